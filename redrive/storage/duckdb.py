"""The DuckDB journal: the embedded default (a file path, or ``":memory:"`` in DuckDB).

Writes take the fast durable path: each append is one record in an
append-only log next to the database (``<file>.rdlog``) and one fsync. The
records are moved into DuckDB's tables in bulk at checkpoints (every
:data:`CHECKPOINT_FRAMES` frames, on open, on close), so the tables serve
queries (``redrive sql``), the run index and reads, while the per-step
commit cost stays close to the fsync floor. Reads merge the tables with the
records not yet checkpointed, so they always see every acknowledged write.

DuckDB lets one process at a time open a database file for writing, and while
it does, no other process can open the file at all (not even read-only). A
second process gets :class:`~redrive.errors.JournalLockedError`; for many
workers use the Postgres journal. Within a process the journal is thread-safe,
and there must be one journal object per file: a second writable
``DuckDBJournal`` on the same file in the same process also raises
:class:`~redrive.errors.JournalLockedError` (each object would hold its own
writes not yet checkpointed, so both could claim the same step). Share one
object, e.g. with :func:`redrive.storage.shared_journal`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Final

import attrs
import duckdb

from ..errors import JournalCorruptError, JournalLockedError
from ..frames import Frame
from ._base import (
    Decision,
    RunIndexOps,
    RunRecord,
    RunStatus,
    RunUpdate,
    appended,
    check_append,
    unknown_run,
)
from ._framelog import ADVICE as _ADVICE
from ._framelog import FrameLog
from ._sql import FRAME_ATTRS, FRAME_COLUMNS, RUN_COLUMNS, Cursor, SqlJournal, _frame

__all__ = ["CHECKPOINT_FRAMES", "DuckDBJournal"]

#: Frames held in the log (and memory) before they are moved into DuckDB.
CHECKPOINT_FRAMES: Final = 2000
_PAGE: Final = 1000
_CHUNK: Final = 200

#: Writable DuckDB journals open in this process, by the file's real path.
_OPEN: dict[str, weakref.ref[DuckDBJournal]] = {}
_OPEN_LOCK = threading.Lock()


class _Store(SqlJournal):
    """The DuckDB tables (the SQL base over one DuckDB connection)."""

    def __init__(self, path: str, *, read_only: bool) -> None:
        self.path = path
        self.url = path
        self.read_only = read_only
        self.durable = path != ":memory:"
        self._lock = threading.RLock()
        try:
            self._con = duckdb.connect(path, read_only=read_only)
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise _locked_elsewhere(path, read_only, text) from None
            raise
        if not read_only:
            self._migrate()
        else:
            self.check_schema()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        with self._lock:
            con = self._con
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def page(self, run_id: str, start: int, limit: int) -> list[Frame]:
        """Return up to ``limit`` frames of a run from seq ``start``."""
        with self._transaction() as cur:
            cur.execute(
                f"SELECT {', '.join(FRAME_COLUMNS)} FROM redrive_frames "
                "WHERE run_id = ? AND seq >= ? AND seq < ? ORDER BY seq",
                [run_id, start, start + limit],
            )
            return [_frame(row) for row in cur.fetchall()]

    def ingest(
        self,
        runs: Sequence[RunRecord],
        frames: Sequence[Frame],
        decisions: Sequence[Decision],
    ) -> None:
        """Write checkpointed records in one transaction (idempotent: safe to redo)."""
        with self._transaction() as cur:
            for start in range(0, len(frames), _CHUNK):
                chunk = frames[start : start + _CHUNK]
                marks = ", ".join("(" + ", ".join("?" for _ in FRAME_COLUMNS) + ")" for _ in chunk)
                cur.execute(
                    f"INSERT OR IGNORE INTO redrive_frames ({', '.join(FRAME_COLUMNS)}) "
                    f"VALUES {marks}",
                    [getattr(f, a) for f in chunk for a in FRAME_ATTRS],
                )
            for record in runs:
                values = attrs.asdict(record)
                cur.execute(
                    f"INSERT OR REPLACE INTO redrive_runs ({', '.join(RUN_COLUMNS)}) "
                    f"VALUES ({', '.join('?' for _ in RUN_COLUMNS)})",
                    [values[c] for c in RUN_COLUMNS],
                )
            for d in decisions:
                cur.execute(
                    "INSERT OR IGNORE INTO redrive_decisions "
                    "(run_id, name, approved, decided_by, decided_at, note) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [d.run_id, d.name, d.approved, d.by, d.at, d.note],
                )

    def close(self) -> None:
        """See :meth:`redrive.storage.Journal.close`."""
        with self._lock:
            self._con.close()


def _locked_elsewhere(path: str, read_only: bool, said: str) -> JournalLockedError:
    """The error for a DuckDB file that another process holds open for writing."""
    where = os.path.abspath(path)
    if read_only:
        advice = (
            f"DuckDB journal {where} cannot be opened, not even read-only, while another "
            "process has it open for writing (DuckDB locks the whole file for its writer). "
            "Stop that worker first (it checkpoints on close), or copy the file together "
            f"with its {os.path.basename(path)}.rdlog and .wal neighbours and read the copy "
            "(it may miss writes made during the copy), or export runs from inside the "
            "worker; to read while workers write, use a Postgres journal "
            "(redrive.open_journal('postgresql://...')). "
        )
    else:
        advice = (
            f"DuckDB journal {where} is open for writing in another process; DuckDB allows "
            "one writing process per file. Stop that process, or use a Postgres journal "
            "(redrive.open_journal('postgresql://...')) for several workers. "
        )
    return JournalLockedError(advice + f"DuckDB said: {said}", path=path)


def _claim(path: str, journal: DuckDBJournal) -> str:
    """Register ``journal`` as the writable journal of ``path`` in this process.

    Raises:
        JournalLockedError: another live writable journal object has the file.
    """
    key = os.path.realpath(path)
    with _OPEN_LOCK:
        ref = _OPEN.get(key)
        other = ref() if ref is not None else None
        if other is not None and not other.closed:
            raise JournalLockedError(
                f"DuckDB journal {key} is already open for writing in this process (another "
                "DuckDBJournal object holds it). Two journal objects on one file would each "
                "keep their own writes not yet checkpointed, so both could claim and run the "
                "same step. Reuse the open journal object, or get one journal per file per "
                "process from redrive.storage.shared_journal(path).",
                path=path,
            )
        _OPEN[key] = weakref.ref(journal)
    return key


def _release(key: str, journal: DuckDBJournal) -> None:
    with _OPEN_LOCK:
        ref = _OPEN.get(key)
        if ref is not None and ref() in (journal, None):
            del _OPEN[key]


def _run_row(record: RunRecord) -> list[Any]:
    return [getattr(record, c) for c in RUN_COLUMNS]


def _frame_row(frame: Frame) -> list[Any]:
    return [getattr(frame, a) for a in FRAME_ATTRS]


class DuckDBJournal(RunIndexOps):
    """Journal in a DuckDB database file, with a fsynced log as its write path.

    Args:
        path: the database file (created when missing), or ``":memory:"``
            (DuckDB in memory: no log, not durable).
        read_only: open without writing (several processes may read at once).
        checkpoint_frames: frames kept in the log before a bulk move into
            DuckDB (default :data:`CHECKPOINT_FRAMES`).

    Raises:
        JournalLockedError: another process has the file open for writing, or
            (when writable) another journal object in this process has it.
        JournalFormatError: the file holds a journal of another format version.
        JournalCorruptError: the log next to the file is damaged mid-file, or
            holds a record that is not a well-formed journal record; the error
            names the file, the byte offset, the record index and (when known)
            the run and seq of the last good record.
    """

    def __init__(
        self, path: str, *, read_only: bool = False, checkpoint_frames: int = CHECKPOINT_FRAMES
    ) -> None:
        self.path = path
        self.url = path
        self.read_only = read_only
        self.durable = path != ":memory:"
        self.checkpoint_frames = checkpoint_frames
        self._lock = threading.RLock()
        self._closed = False
        self._log: FrameLog | None = None
        self._runs: dict[str, RunRecord] = {}
        self._frames: dict[str, list[Frame]] = {}
        self._decisions: dict[tuple[str, str], Decision] = {}
        self._held = 0
        self._key = _claim(path, self) if path != ":memory:" and not read_only else None
        try:
            self._store = _Store(path, read_only=read_only)
        except BaseException:
            self._release()
            raise
        try:
            if path != ":memory:":
                self._log = FrameLog(path + ".rdlog", read_only=read_only)
                self._replay_log(self._log)
                if not read_only:
                    self.checkpoint()
        except BaseException:
            if self._log is not None:
                self._log.close()
            self._store.close()
            self._release()
            raise

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def _release(self) -> None:
        self._closed = True
        if self._key is not None:
            _release(self._key, self)

    # -- the log -------------------------------------------------------------

    def _replay_log(self, log: FrameLog) -> None:
        """Apply every record of the log; raise JournalCorruptError naming the last good one."""
        last: tuple[str | None, int | None] = (None, None)
        try:
            for index, (offset, record) in enumerate(log.entries()):
                try:
                    self._apply(record)
                except _BadRecord as exc:
                    raise JournalCorruptError(
                        f"{log.path}: record {index} at byte {offset} is not a well-formed "
                        f"journal record: {exc}. " + _after(last) + _ADVICE,
                        source=log.path,
                        offset=offset,
                        record_index=index,
                        reason="record",
                        run_id=last[0],
                        last_good_seq=last[1],
                    ) from None
                last = _position(record)
        except JournalCorruptError as exc:
            if exc.fields.get("reason") == "record" or last == (None, None):
                raise
            fields = exc.to_fields()
            fields.update(run_id=last[0], last_good_seq=last[1])
            raise JournalCorruptError(f"{exc.message} {_after(last)}".rstrip(), **fields) from None

    def _apply(self, record: Any) -> None:
        """Apply one log record to the held state.

        Raises:
            _BadRecord: the record is not a well-formed journal record (what is
                wrong is the message); nothing was applied.
        """
        if not isinstance(record, list) or not record or not isinstance(record[0], str):
            raise _BadRecord(f"expected a list starting with a record type, got {_shape(record)}")
        tag = record[0]
        if tag == "run":
            _arity(record, 2)
            row = _run_record(record[1])
            self._runs[row.run_id] = row
        elif tag == "frames":
            _arity(record, 3)
            row = _run_record(record[1])
            if not isinstance(record[2], list):
                raise _BadRecord(f"frames: expected a list of frame rows, got {_shape(record[2])}")
            frames = [_frame_of(f, i) for i, f in enumerate(record[2])]
            held = self._frames.get(row.run_id, [])
            _check_frames(row, frames, held[-1].seq + 1 if held else None)
            self._runs[row.run_id] = row
            self._frames.setdefault(row.run_id, []).extend(frames)
            self._held += len(frames)
        elif tag == "decision":
            _arity(record, 2)
            d = _decision(record[1])
            self._decisions.setdefault((d.run_id, d.name), d)
        else:
            raise _BadRecord(f"unknown record type {tag!r} (expected run, frames or decision)")

    def _write(self, record: list[Any], *, sync: bool = True) -> None:
        """Make one mutation durable (log + fsync; ``sync=False``: log only), then visible."""
        if self._log is not None:
            self._log.append(record, sync=sync)
            self._apply(record)
            if self._held >= self.checkpoint_frames:
                self.checkpoint()
            return
        self._apply(record)  # ":memory:": straight into the tables
        self.checkpoint()

    def checkpoint(self) -> None:
        """Move the records held in the log into DuckDB's tables, then empty the log."""
        with self._lock:
            if not (self._runs or self._frames or self._decisions):
                return
            frames = [f for run in self._frames.values() for f in run]
            self._store.ingest(list(self._runs.values()), frames, list(self._decisions.values()))
            if self._log is not None:
                self._log.reset()
            self._runs.clear()
            self._frames.clear()
            self._decisions.clear()
            self._held = 0

    # -- runs ------------------------------------------------------------------

    def _record(self, run_id: str) -> RunRecord | None:
        found = self._runs.get(run_id)
        return found if found is not None else self._store.get_run(run_id)

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        """See :meth:`redrive.storage.Journal.create_run`."""
        check_append(attrs.evolve(record, next_seq=0), [first], 0)
        with self._lock:
            if self._record(record.run_id) is not None:
                return False
            row = attrs.evolve(record, next_seq=1, last_chain=first.chain)
            self._write(["frames", _run_row(row), [_frame_row(first)]])
            return True

    def get_run(self, run_id: str) -> RunRecord | None:
        """See :meth:`redrive.storage.Journal.get_run`."""
        with self._lock:
            return self._record(run_id)

    def append(
        self,
        run_id: str,
        frames: Sequence[Frame],
        *,
        expected_seq: int,
        update: RunUpdate | None = None,
        epoch: int | None = None,
        sync: bool = True,
    ) -> None:
        """See :meth:`redrive.storage.Journal.append`."""
        with self._lock:
            row = appended(
                self._record(run_id),
                run_id,
                frames,
                expected_seq=expected_seq,
                update=update,
                epoch=epoch,
            )
            self._write(["frames", _run_row(row), [_frame_row(f) for f in frames]], sync=sync)

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """See :meth:`redrive.storage.Journal.frames`."""
        seq = start
        while True:
            with self._lock:
                page = self._store.page(run_id, seq, _PAGE)
                if not page:
                    held = self._frames.get(run_id, [])
                    first = held[0].seq if held else 0
                    page = held[max(0, seq - first) : max(0, seq - first) + _PAGE]
            if not page:
                return
            yield from page
            seq = page[-1].seq + 1

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """See :meth:`redrive.storage.Journal.runs`."""
        with self._lock:
            held = dict(self._runs)
            stored = self._store.runs(
                status=status, limit=None if limit is None else limit + len(held)
            )
        merged = {r.run_id: r for r in stored if r.run_id not in held}
        merged.update(held)
        rows = [r for r in merged.values() if status is None or r.status == status]
        rows.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return rows if limit is None else rows[:limit]

    # -- leases ----------------------------------------------------------------

    def _change_run(self, run_id: str, change: Any) -> RunRecord:
        with self._lock:
            record = self._record(run_id)
            if record is None:
                raise unknown_run(run_id)
            changed: RunRecord = change(record)
            if changed is not record:
                self._write(["run", _run_row(changed)])
            return changed

    # -- approvals -------------------------------------------------------------

    def decide(
        self, run_id: str, name: str, approved: bool, *, by: str, note: str = ""
    ) -> Decision:
        """See :meth:`redrive.storage.Journal.decide`."""
        with self._lock:
            if self._record(run_id) is None:
                raise unknown_run(run_id)
            existing = self.decision(run_id, name)
            if existing is not None:
                return existing
            decision = Decision(
                run_id=run_id, name=name, approved=bool(approved), by=by, at=time.time(), note=note
            )
            self._write(["decision", attrs.asdict(decision)])
            return decision

    def decision(self, run_id: str, name: str) -> Decision | None:
        """See :meth:`redrive.storage.Journal.decision`."""
        with self._lock:
            found = self._decisions.get((run_id, name))
            return found if found is not None else self._store.decision(run_id, name)

    # -- schema and lifetime -----------------------------------------------------

    def schema_version(self) -> int:
        """Return the schema version of the DuckDB tables."""
        return self._store.schema_version()

    def format_version(self) -> int:
        """Return the frame format version stored in the journal."""
        return self._store.format_version()

    def check_schema(self) -> None:
        """Raise JournalFormatError when the schema is too old or too new (read-only check)."""
        self._store.check_schema()

    def close(self) -> None:
        """Checkpoint what the log holds, then close the log and the database (idempotent).

        The file is released for another journal object in this process even
        when the checkpoint fails (what the log holds stays in the log).
        """
        with self._lock:
            if self._closed:
                return
            try:
                if not self.read_only:
                    self.checkpoint()
            finally:
                if self._log is not None:
                    self._log.close()
                self._store.close()
                self._release()


# -- log record validation -------------------------------------------------------

_RUN_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "run_id": (str,),
    "status": (str,),
    "next_seq": (int,),
    "last_chain": (str,),
    "input_fp": (str,),
    "entrypoint": (str, type(None)),
    "created_at": (float, int),
    "updated_at": (float, int),
    "output": (bytes, type(None)),
    "error": (str, type(None)),
    "lease_owner": (str, type(None)),
    "lease_epoch": (int,),
    "lease_expires": (float, int, type(None)),
}
_FRAME_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "run_id": (str,),
    "seq": (int,),
    "kind": (str,),
    "name": (str,),
    "key": (str,),
    "payload": (bytes,),
    "chain": (str,),
    "at": (float, int),
    "epoch": (int,),
}
_DECISION_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "run_id": (str,),
    "name": (str,),
    "approved": (bool,),
    "by": (str,),
    "at": (float, int),
    "note": (str,),
}
_STATUSES: Final = frozenset(s.value for s in RunStatus)
#: Largest seq / epoch a journal stores (a signed 64-bit column).
_INT_MAX: Final = 2**63 - 1


class _BadRecord(ValueError):
    """A log record with a good checksum that is not a well-formed journal record."""


def _shape(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _arity(record: list[Any], size: int) -> None:
    if len(record) != size:
        raise _BadRecord(f"{record[0]}: expected {size} items, got {len(record)}")


def _typed(what: str, values: dict[str, Any], types: dict[str, tuple[type, ...]]) -> None:
    for name, allowed in types.items():
        value = values[name]
        if isinstance(value, bool) and bool not in allowed:
            raise _BadRecord(f"{what}.{name}: expected {allowed[0].__name__}, got a bool")
        if not isinstance(value, allowed):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
            raise _BadRecord(f"{what}.{name}: expected {names}, got {_shape(value)}")
        if isinstance(value, int) and not isinstance(value, bool):
            if allowed[0] is int and not 0 <= value <= _INT_MAX:
                raise _BadRecord(f"{what}.{name}: {value} is out of range 0..{_INT_MAX}")
            if allowed[0] is float and abs(value) > _INT_MAX:
                raise _BadRecord(f"{what}.{name}: {value} is out of range")


def _row(what: str, row: Any, columns: Sequence[str]) -> dict[str, Any]:
    if not isinstance(row, list) or len(row) != len(columns):
        raise _BadRecord(f"{what}: expected a list of {len(columns)} values, got {_shape(row)}")
    return dict(zip(columns, row, strict=True))


def _run_record(row: Any) -> RunRecord:
    values = _row("run row", row, RUN_COLUMNS)
    _typed("run", values, _RUN_TYPES)
    if values["status"] not in _STATUSES:
        raise _BadRecord(f"run.status: {values['status']!r} is not a run status")
    return RunRecord(**values)


def _frame_of(row: Any, index: int) -> Frame:
    values = _row(f"frame row {index}", row, FRAME_ATTRS)
    _typed(f"frame {index}", values, _FRAME_TYPES)
    return Frame(**values)


def _decision(fields: Any) -> Decision:
    if not isinstance(fields, dict) or set(fields) != set(_DECISION_TYPES):
        keys = sorted(map(str, fields)) if isinstance(fields, dict) else _shape(fields)
        raise _BadRecord(
            f"decision: expected a map with keys {sorted(_DECISION_TYPES)}, got {keys}"
        )
    _typed("decision", fields, _DECISION_TYPES)
    return Decision(**fields)


def _check_frames(row: RunRecord, frames: Sequence[Frame], next_held: int | None) -> None:
    """Check that a frames record continues its run densely and matches its run row."""
    expected = next_held
    for frame in frames:
        if frame.run_id != row.run_id:
            raise _BadRecord(
                f"frames: a frame of run {frame.run_id!r} in a record of run {row.run_id!r}"
            )
        if expected is not None and frame.seq != expected:
            raise _BadRecord(
                f"frames: run {row.run_id!r} seq {frame.seq} where seq {expected} was expected"
            )
        expected = frame.seq + 1
    if frames and row.next_seq != frames[-1].seq + 1:
        raise _BadRecord(
            f"frames: run {row.run_id!r} row says next_seq {row.next_seq} after a frame at "
            f"seq {frames[-1].seq}"
        )


def _position(record: list[Any]) -> tuple[str | None, int | None]:
    """Return ``(run_id, seq)`` of the last frame a (validated) record speaks for."""
    tag = record[0]
    if tag == "frames" and record[2]:
        return record[1][0], record[2][-1][1]
    if tag in ("run", "frames"):
        next_seq = record[1][2]
        return record[1][0], next_seq - 1 if next_seq > 0 else None
    return record[1]["run_id"], None


def _after(last: tuple[str | None, int | None]) -> str:
    run_id, seq = last
    if run_id is None:
        return "No record before it could be read. "
    at = f" seq {seq}" if seq is not None else ""
    return f"The last good record before it is of run {run_id!r}{at}. "
