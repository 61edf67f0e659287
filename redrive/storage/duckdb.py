"""The DuckDB journal: the embedded default (a file path, or ``":memory:"`` in DuckDB).

Writes take the fast durable path: each append is one record in an
append-only log next to the database (``<file>.rdlog``) and one fsync. The
records are moved into DuckDB's tables in bulk at checkpoints (every
:data:`CHECKPOINT_FRAMES` frames, on open, on close), so the tables serve
queries (``redrive sql``), the run index and reads, while the per-step
commit cost stays close to the fsync floor. Reads merge the tables with the
records not yet checkpointed, so they always see every acknowledged write.

DuckDB lets one process at a time open a database file for writing. A second
process gets :class:`~redrive.errors.JournalLockedError`; for many workers use
the Postgres journal. Within a process the journal is thread-safe.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

import attrs
import duckdb

from ..errors import JournalLockedError
from ..frames import Frame
from ._base import (
    Decision,
    RunRecord,
    RunStatus,
    RunUpdate,
    after_append,
    check_append,
    check_fence,
    lease_released,
    lease_renewed,
    lease_taken,
)
from ._framelog import FrameLog
from ._sql import FRAME_ATTRS, FRAME_COLUMNS, RUN_COLUMNS, Cursor, SqlJournal, _frame
from .memory import unknown_run

__all__ = ["CHECKPOINT_FRAMES", "DuckDBJournal"]

#: Frames held in the log (and memory) before they are moved into DuckDB.
CHECKPOINT_FRAMES: Final = 2000
_PAGE: Final = 1000
_CHUNK: Final = 200


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
                raise JournalLockedError(
                    f"DuckDB journal {os.path.abspath(path)} is open for writing in another "
                    "process; DuckDB allows one writing process per file. Stop that process, "
                    "open the file read-only, or use a Postgres journal "
                    "(redrive.open_journal('postgresql://...')) for several workers. "
                    f"DuckDB said: {text}",
                    path=path,
                ) from None
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
                marks = ", ".join(
                    "(" + ", ".join("?" for _ in FRAME_COLUMNS) + ")" for _ in chunk
                )
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
        with self._lock:
            self._con.close()


def _run_row(record: RunRecord) -> list[Any]:
    return [getattr(record, c) for c in RUN_COLUMNS]


def _frame_row(frame: Frame) -> list[Any]:
    return [getattr(frame, a) for a in FRAME_ATTRS]


class DuckDBJournal:
    """Journal in a DuckDB database file, with a fsynced log as its write path.

    Args:
        path: the database file (created when missing), or ``":memory:"``
            (DuckDB in memory: no log, not durable).
        read_only: open without writing (several processes may read at once).
        checkpoint_frames: frames kept in the log before a bulk move into
            DuckDB (default :data:`CHECKPOINT_FRAMES`).

    Raises:
        JournalLockedError: another process has the file open for writing.
        JournalFormatError: the file holds a journal of another format version.
        JournalCorruptError: the log next to the file is damaged mid-file.
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
        self._store = _Store(path, read_only=read_only)
        self._log: FrameLog | None = None
        self._runs: dict[str, RunRecord] = {}
        self._frames: dict[str, list[Frame]] = {}
        self._decisions: dict[tuple[str, str], Decision] = {}
        self._held = 0
        if path != ":memory:":
            self._log = FrameLog(path + ".rdlog", read_only=read_only)
            for record in self._log.records():
                self._apply(record)
            if not read_only:
                self.checkpoint()

    # -- the log -------------------------------------------------------------

    def _apply(self, record: list[Any]) -> None:
        tag = record[0]
        if tag == "run":
            row = RunRecord(**dict(zip(RUN_COLUMNS, record[1], strict=True)))
            self._runs[row.run_id] = row
        elif tag == "frames":
            row = RunRecord(**dict(zip(RUN_COLUMNS, record[1], strict=True)))
            self._runs[row.run_id] = row
            frames = [Frame(**dict(zip(FRAME_ATTRS, f, strict=True))) for f in record[2]]
            self._frames.setdefault(row.run_id, []).extend(frames)
            self._held += len(frames)
        elif tag == "decision":
            d = Decision(**record[1])
            self._decisions.setdefault((d.run_id, d.name), d)

    def _write(self, record: list[Any]) -> None:
        """Make one mutation durable (log + fsync), then visible (memory)."""
        if self._log is not None:
            self._log.append(record)
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
        check_append(attrs.evolve(record, next_seq=0), [first], 0)
        with self._lock:
            if self._record(record.run_id) is not None:
                return False
            row = attrs.evolve(record, next_seq=1, last_chain=first.chain)
            self._write(["frames", _run_row(row), [_frame_row(first)]])
            return True

    def get_run(self, run_id: str) -> RunRecord | None:
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
    ) -> None:
        with self._lock:
            record = self._record(run_id)
            if record is None:
                raise unknown_run(run_id)
            check_fence(record, epoch)
            check_append(record, frames, expected_seq)
            row = after_append(record, frames, update, time.time())
            self._write(["frames", _run_row(row), [_frame_row(f) for f in frames]])

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
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

    def interrupted_runs(self) -> list[RunRecord]:
        return self.runs(status=RunStatus.RUNNING.value)

    def stale_runs(self, *, older_than: float = 0.0) -> list[RunRecord]:
        cutoff = time.time() - older_than
        rows = [
            r
            for r in self.interrupted_runs()
            if r.lease_expires is not None and r.lease_expires <= cutoff
        ]
        rows.sort(key=lambda r: r.lease_expires or 0.0)
        return rows

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

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        record = self._change_run(run_id, lambda r: lease_taken(r, owner, ttl, time.time()))
        return record.lease_epoch

    def renew_lease(self, run_id: str, owner: str, epoch: int, ttl: float) -> None:
        self._change_run(run_id, lambda r: lease_renewed(r, owner, epoch, ttl, time.time()))

    def release_lease(self, run_id: str, owner: str, epoch: int) -> None:
        with contextlib.suppress(LookupError):
            self._change_run(run_id, lambda r: lease_released(r, owner, epoch))

    # -- approvals -------------------------------------------------------------

    def decide(
        self, run_id: str, name: str, approved: bool, *, by: str, note: str = ""
    ) -> Decision:
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
        """Checkpoint what the log holds, then close the log and the database."""
        with self._lock:
            if not self.read_only:
                self.checkpoint()
            if self._log is not None:
                self._log.close()
            self._store.close()
