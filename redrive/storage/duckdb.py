"""The DuckDB journal: the embedded default (a file path, or ``":memory:"`` in DuckDB).

Writes take the fast durable path: each append is one record in an
append-only log next to the database (``<file>.rdlog``) and one fsync. The
log holds the live set and the tables hold history: at checkpoints (every
:data:`CHECKPOINT_FRAMES` frames, and on close) the records of runs that have
ended are moved into DuckDB's tables in bulk, and the log is rewritten
atomically with only the records of unfinished runs (unless those grow past
half the threshold: then they move too). The tables serve queries
(``redrive sql``), the run index and reads, while the per-step commit cost
stays close to the fsync floor. Reads merge the tables with the records held
in the log, so they always see every acknowledged write.

Opening is cheap when the log holds records: the log is read on the calling
thread and the DuckDB file is opened later (on a background thread
:data:`OPEN_DELAY` seconds after opening, or by the first operation that
needs the tables). Reading a run held in the log and re-driving its recorded
steps does not need the tables; the first write waits for the open, so nothing
is acknowledged (no claim, so no side effect) before the file is known to be a
journal this redrive may write. An error opening the file
(:class:`~redrive.errors.JournalLockedError`,
:class:`~redrive.errors.JournalFormatError`) is then raised by the first
operation that needs the tables (``runs()``, reading a run the log does not
hold wholly, a write, a checkpoint, ``close()``), with the same message. A
new file, a read-only open, ``":memory:"`` and an empty log open the file at
once, as before.

DuckDB lets one process at a time open a database file for writing, and while
it does, no other process can open the file at all (not even read-only). A
second process gets :class:`~redrive.errors.JournalLockedError`; for many
workers use the Postgres journal. Within a process the journal is thread-safe,
and there must be one journal object per file: a second writable
``DuckDBJournal`` on the same file in the same process also raises
:class:`~redrive.errors.JournalLockedError` (each object would hold its own
writes not yet checkpointed, so both could claim the same step). The file is
known by identity (device and inode, plus an exclusive ``flock`` on it), not
by path: a hard link or a second path to the file is the same file. Share one
object, e.g. with :func:`redrive.storage.shared_journal`.
"""

from __future__ import annotations

import _thread
import contextlib
import fcntl
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Final

import attrs
import duckdb

from ..errors import (
    JournalCorruptError,
    JournalLockedError,
    JournalWriteError,
    ReplayError,
)
from ..frames import FORMAT_VERSION, Frame
from . import _framelog
from ._base import (
    Decision,
    RunRecord,
    RunStatus,
)
from ._framelog import ADVICE as _ADVICE
from ._framelog import START as _LOG_START
from ._framelog import FrameLog
from ._logrecord import (
    BadRecord,
    after,
    check_frames,
    decision_record,
    frames_record,
    parse_record,
    position,
    run_record,
)
from ._sql import SqlJournal
from ._sqlschema import (
    FRAME_ATTRS,
    FRAME_COLUMNS,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    Cursor,
    _frame,
)
from .memory import LocalJournal, MemoryState

__all__ = ["CHECKPOINT_FRAMES", "DuckDBJournal"]

#: Frames held in the log (and memory) before they are moved into DuckDB.
CHECKPOINT_FRAMES: Final = 2000
#: Seconds after opening at which the DuckDB file is opened in the background
#: (when the log holds records; an operation needing the tables opens it sooner).
OPEN_DELAY: Final = 0.05
_PAGE: Final = 1000
_CHUNK: Final = 200
#: Payload bytes a file-backed journal may read (paging frames in) before it makes
#: DuckDB drop the table blocks it cached for them (see :meth:`_Store.page`): about
#: one page of 2 KB frames (an eviction costs ~1 ms); a short read (resuming a small
#: run) never evicts.
_READ_CACHE_BYTES: Final = 2 << 20
#: The memory limit DuckDB is briefly set to so that it evicts its cached blocks.
_EVICT_TO: Final = "1MB"
#: DuckDB worker threads of a file-backed journal's database (see :class:`_Store`).
_THREADS: Final = 1
#: The page read: ``run_id``, first seq, end seq (exclusive); in seq order.
_PAGE_SQL: Final = (
    f"SELECT {', '.join(FRAME_COLUMNS)} FROM redrive_frames "
    "WHERE run_id = ? AND seq >= ? AND seq < ? ORDER BY seq"
)

#: Run statuses whose records a checkpoint moves into the tables (the run has ended).
_ENDED: Final = frozenset(s.value for s in RunStatus if s.terminal)

#: Writable DuckDB journals open in this process, by the file's real path and identity.
_OPEN: dict[str | tuple[int, int], weakref.ref[DuckDBJournal]] = {}
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
            if "not a valid duckdb database file" in text.lower():
                raise JournalCorruptError(
                    f"cannot open journal {os.path.abspath(path)}: it is not a DuckDB database "
                    f"file ({text}). Check the path: an export opens by a path ending in .rdj, "
                    "a Postgres journal by a postgresql:// URL. Nothing was written to it.",
                    source=os.path.abspath(path),
                    reason="unreadable",
                ) from None
            raise
        if self.durable:
            # one DuckDB worker thread: a journal's queries are small (a page, a row, a
            # bulk insert of a checkpoint), and each extra worker keeps its own allocator
            # cache, which made a long replay's peak memory creep up by several MB
            self._con.execute(f"SET threads = {_THREADS}")
        #: payload bytes paged in since DuckDB last dropped its cached table blocks
        self._read_since_evict = 0
        self._memory_limit: str | None = None
        #: background checkpoints inserting on their own cursor now (see ingest_apart)
        self._ingesting = 0
        self._limit_is_default = False
        if self._meta_is_current():
            return  # the common case: nothing to migrate or refuse
        if not read_only:
            self._migrate()
        else:
            self.check_schema()

    def _meta_is_current(self) -> bool:
        """True when the file already holds this redrive's schema and frame format.

        One direct read of ``redrive_meta`` (about 1 ms) instead of the
        ``information_schema`` lookup of :meth:`_migrate` (5-10 ms on a fresh
        connection): opening is on the resume path. Anything else (new file,
        older or newer schema, another format) goes the full way, which
        migrates or raises. One writer per file, so nothing can change the
        schema between this read and the journal's first write.
        """
        with self._lock:
            try:
                rows = self._con.execute("SELECT key, value FROM redrive_meta").fetchall()
            except duckdb.CatalogException:
                return False
        meta = {str(k): str(v) for k, v in rows}
        return meta.get("schema") == str(SCHEMA_VERSION) and meta.get("format") == str(
            FORMAT_VERSION
        )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        with self._lock:
            con = self._con
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):  # a failed COMMIT may have ended it
                    con.execute("ROLLBACK")
                raise

    def page(self, run_id: str, start: int, limit: int) -> list[Frame]:
        """Return up to ``limit`` frames of a run from seq ``start``.

        Each page is one query that row-group pruning confines to the row
        groups holding the seq range (DuckDB's ART index serves no range
        scans). DuckDB keeps every table block a query reads cached in its
        buffer pool until its memory limit (80% of RAM) forces it out, so a
        reader walking a long run would grow the process by the run's size on
        disk; after every :data:`_READ_CACHE_BYTES` of payload read, a
        file-backed journal makes DuckDB drop them (:meth:`_drop_cached_blocks`),
        which keeps replay memory flat however long the run.
        """
        with self._transaction() as cur:
            cur.execute(_PAGE_SQL, [run_id, start, start + limit])
            frames = [_frame(row) for row in cur.fetchall()]
        if self.durable and frames:
            self._read_since_evict += sum(len(f.payload) for f in frames)
            if self._read_since_evict >= _READ_CACHE_BYTES:
                self._drop_cached_blocks()
        return frames

    def _drop_cached_blocks(self) -> None:
        """Make DuckDB evict the table blocks it holds cached (none is lost: they are on disk).

        DuckDB has no statement to empty its block cache, but lowering the
        memory limit evicts unpinned blocks down to it; the limit is then put
        back to what it was (exactly when it was DuckDB's default, else to the
        setting as DuckDB shows it, rounded to 0.1 of its unit). Only for a
        file-backed database (an in-memory one has nowhere to evict to).
        Nothing else runs on the connection meanwhile (its lock is held).
        Best effort: if DuckDB cannot get down to
        :data:`_EVICT_TO`, what it did evict stays evicted and no error is raised.
        """
        with self._lock:
            if self._ingesting:
                # a background checkpoint is inserting on its own cursor: a memory limit
                # lowered under it could fail it with an out-of-memory error; evict later
                return
            con = self._con
            if self._memory_limit is None:
                row = con.execute("SELECT current_setting('memory_limit')").fetchone()
                self._memory_limit = str(row[0]) if row else ""
                con.execute("RESET memory_limit")
                row = con.execute("SELECT current_setting('memory_limit')").fetchone()
                # the setting reads back rounded ("18.8 GiB"), so setting that text would
                # lower the limit a little: DuckDB's default (80% of RAM) is put back exactly
                self._limit_is_default = row is not None and str(row[0]) == self._memory_limit
                if not self._limit_is_default and self._memory_limit:
                    con.execute(f"SET memory_limit = '{self._memory_limit}'")
            if not self._memory_limit:
                return
            try:
                con.execute(f"SET memory_limit = '{_EVICT_TO}'")
            except duckdb.Error:
                pass  # blocks in use, or nowhere to spill; those it could evict are gone
            finally:
                if self._limit_is_default:
                    con.execute("RESET memory_limit")
                else:
                    con.execute(f"SET memory_limit = '{self._memory_limit}'")
            self._read_since_evict = 0

    def ingest(
        self,
        runs: Sequence[RunRecord],
        frames: Sequence[Frame],
        decisions: Sequence[Decision],
    ) -> None:
        """Write checkpointed records in one transaction (idempotent: safe to redo)."""
        with self._transaction() as cur:
            _insert(cur, runs, frames, decisions)
        if self.durable and frames:
            self._drop_cached_blocks()  # the blocks just written are on disk

    def ingest_apart(
        self,
        runs: Sequence[RunRecord],
        frames: Sequence[Frame],
        decisions: Sequence[Decision],
    ) -> None:
        """:meth:`ingest` on a DuckDB cursor of its own, without holding the store's lock.

        For a background checkpoint: reads on the journal's connection go on
        meanwhile and see the tables before or after this transaction, never
        part of it.
        """
        with self._lock:
            cur = self._con.cursor()
            self._ingesting += 1  # no eviction lowers the memory limit under this insert
        try:
            cur.execute("BEGIN TRANSACTION")
            try:
                _insert(cur, runs, frames, decisions)
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
        finally:
            with contextlib.suppress(duckdb.Error):
                cur.close()
            with self._lock:
                self._ingesting -= 1
        if self.durable and frames:
            self._drop_cached_blocks()  # the blocks just written are on disk

    def close(self) -> None:
        """See :meth:`redrive.storage.Journal.close`."""
        with self._lock:
            self._con.close()


def _insert(
    cur: Any,
    runs: Sequence[RunRecord],
    frames: Sequence[Frame],
    decisions: Sequence[Decision],
) -> None:
    """Insert checkpointed records (idempotently) through ``cur``, inside its transaction."""
    for start in range(0, len(frames), _CHUNK):
        chunk = frames[start : start + _CHUNK]
        marks = ", ".join("(" + ", ".join("?" for _ in FRAME_COLUMNS) + ")" for _ in chunk)
        cur.execute(
            f"INSERT OR IGNORE INTO redrive_frames ({', '.join(FRAME_COLUMNS)}) VALUES {marks}",
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


@attrs.frozen
class _Move:
    """What a background checkpoint moves: the held records of some runs, as they were."""

    rows: dict[str, RunRecord]
    #: frames held per run at the snapshot (the overlay may add more meanwhile)
    counts: dict[str, int]
    frames: list[Frame]
    decisions: dict[tuple[str, str], Decision]


class _Opening:
    """A :class:`_Store` opened (``duckdb.connect`` + meta check) off the resume path.

    The open starts on a background thread :data:`OPEN_DELAY` seconds after
    the journal opened, or at once on the thread of the first operation that
    needs the tables, whichever comes first (exactly one of them runs it).
    Why the delay: DuckDB's connect holds the GIL for parts of its 20-40 ms,
    so a thread started at once stalls the calling thread just when it reads
    the log and replays the run to resume (measured: resume @10 steps 2.9x the
    memory journal with an immediate thread, 1.7x with the open deferred); once
    the resumed run makes its first live call (seconds of waiting on a model),
    the open costs nothing.
    """

    def __init__(self, path: str, delay: float) -> None:
        self._path = path
        self._store: _Store | None = None
        self._error: BaseException | None = None
        self._claim_lock = threading.Lock()
        self._claimed = False
        self._done = threading.Event()
        self._cancelled = threading.Event()
        # A low-level thread: threading.Thread.start() waits until the new thread
        # has been scheduled and has run its bootstrap, which on a loaded machine
        # cost milliseconds on the resume path (3 ms of a 6 ms resume, profiled);
        # this one is started without waiting. It is a daemon (not joined at exit)
        # and catches everything it raises (see _open).
        _thread.start_new_thread(self._background, (delay,))

    def _claim(self) -> bool:
        with self._claim_lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def _background(self, delay: float) -> None:
        if not self._cancelled.wait(delay) and self._claim():
            self._open()

    def _open(self) -> None:
        try:
            self._store = _Store(self._path, read_only=False)
        except BaseException as exc:  # handed to the thread that needs the tables
            self._error = exc
        finally:
            self._done.set()

    def abandon(self) -> _Store | None:
        """Cancel the open if it did not start; else wait for it and return the store (or None)."""
        if self._claim():
            self._cancelled.set()
            self._done.set()
            return None
        self._done.wait()
        return self._store

    def wait(self) -> tuple[_Store | None, BaseException | None]:
        """Open now or wait for the background open; return ``(store, None)``/``(None, error)``."""
        if self._claim():
            self._cancelled.set()
            self._open()
        else:
            self._done.wait()
        return self._store, self._error


def _abandon(opening: _Opening) -> None:
    """Cancel or close a background open whose journal was dropped without close()."""
    with contextlib.suppress(Exception):
        store = opening.abandon()
        if store is not None:
            store.close()


def _row_at(row: RunRecord, last: Frame) -> RunRecord:
    """``row`` as it was right after frame ``last`` was appended (for a rewritten log)."""
    return attrs.evolve(row, next_seq=last.seq + 1, last_chain=last.chain)


def _log_holds_records(path: str) -> bool:
    """True when the log file at ``path`` is longer than a header (it may hold records)."""
    try:
        return os.path.getsize(path) > _LOG_START
    except OSError:
        return False


def _locked_elsewhere(path: str, read_only: bool, said: str) -> JournalLockedError:
    """The error for a DuckDB file that another process holds open for writing."""
    where = os.path.abspath(path)
    if read_only:
        advice = (
            f"DuckDB journal {where} cannot be opened, not even read-only, while another "
            "process has it open for writing (DuckDB locks the whole file for its writer). "
            "Stop that worker first, or copy the file together "
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


def _claim(key: str | tuple[int, int], path: str, journal: DuckDBJournal) -> None:
    """Register ``journal`` as the writable journal of file ``key`` in this process.

    Args:
        key: the file's real path, or its ``(device, inode)`` once it exists.
        path: the path the journal was opened with (for the message).
        journal: the journal object claiming the file.

    Raises:
        JournalLockedError: another live writable journal object has the file.
    """
    with _OPEN_LOCK:
        ref = _OPEN.get(key)
        other = ref() if ref is not None else None
        if other is not None and other is not journal and not other.closed:
            same = (
                f"the same file as {other.path!r} (device {key[0]}, inode {key[1]})"
                if isinstance(key, tuple)
                else repr(key)
            )
            raise JournalLockedError(
                f"DuckDB journal {path!r} is {same}, which is already open for writing in "
                "this process (another DuckDBJournal object holds it, possibly through "
                "another path or a hard link). Two journal objects on one file would each "
                "keep their own writes not yet checkpointed, so both could claim and run the "
                "same step. Reuse the open journal object, or get one journal per file per "
                "process from redrive.storage.shared_journal(path).",
                path=path,
            )
        _OPEN[key] = weakref.ref(journal)


def _release(key: str | tuple[int, int], journal: DuckDBJournal) -> None:
    with _OPEN_LOCK:
        ref = _OPEN.get(key)
        if ref is not None and ref() in (journal, None):
            del _OPEN[key]


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _lock_file(path: str, journal: DuckDBJournal) -> tuple[int, tuple[int, int]] | None:
    """Claim an existing database file by identity and take an OS lock on it.

    The file is claimed by ``(device, inode)``, so a hard link or any second
    path to it is the same file; then an exclusive ``flock`` is taken on an
    open file description of its own, which conflicts with every other open
    of the file (in this process or another), unlike DuckDB's own ``fcntl``
    locks, which one process never conflicts with.

    Returns:
        ``(descriptor holding the lock, (device, inode))``, or None when the
        file does not exist yet.

    Raises:
        JournalLockedError: another journal object, or another process, holds it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        ident = (st.st_dev, st.st_ino)
        _claim(ident, path, journal)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _release(ident, journal)
            raise _locked_elsewhere(
                path, False, "another redrive journal holds an exclusive lock on the file"
            ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd, ident


class DuckDBJournal(LocalJournal):
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
            These two come from opening the DuckDB file: when the log holds
            records, that happens later (see the module docstring) and the
            first operation that needs the tables raises them instead.
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
        #: the records written to the log and not yet checkpointed into the tables
        self._overlay = MemoryState()
        #: after a failed bulk move, the held frame count at which to try again
        self._retry_at = 0
        #: the background checkpoint in flight, and its end (notified under _lock)
        self._mover: threading.Thread | None = None
        self._moved = threading.Condition(self._lock)
        self._keys: list[str | tuple[int, int]] = []
        self._lock_fd: int | None = None
        self._opened: _Store | None = None
        self._opening: _Opening | None = None
        try:
            if path != ":memory:" and not read_only:
                self._keys.append(os.path.realpath(path))
                _claim(self._keys[0], path, self)
                self._take_file()
            if self._lock_fd is not None and _log_holds_records(path + ".rdlog"):
                # Our flock excludes every other redrive process and object, so the
                # tables can be opened while the log is read: a write or an operation
                # that needs them waits (see _store); a read of a run wholly held in the
                # log does not.
                self._opening = _Opening(path, OPEN_DELAY)
                # a journal dropped without close() must not open (or keep) the file later
                weakref.finalize(self, _abandon, self._opening)
            else:
                # new file, read-only, ":memory:", empty log: laziness buys nothing
                self._opened = _Store(path, read_only=read_only)
        except BaseException:
            self._release()
            raise
        try:
            if path != ":memory:" and not read_only and self._lock_fd is None:
                self._take_file()  # the file did not exist before DuckDB created it
            if path != ":memory:":
                self._log = FrameLog(path + ".rdlog", read_only=read_only)
                # what the log holds stays in the log (and the overlay): it moves into
                # the tables at the next checkpoint (threshold or close), not here, so
                # opening after a crash costs reading the log, not a bulk insert
                self._replay_log(self._log)
        except BaseException:
            if self._log is not None:
                self._log.close()
            self._close_store()
            self._release()
            raise

    @property
    def _store(self) -> _Store:
        """The DuckDB tables; waits for the background open and raises its error.

        Raises:
            JournalLockedError, JournalFormatError, duckdb.Error: opening the
                file failed (the same error a synchronous open gives; nothing
                was acknowledged before it, since a write waits for the open).
        """
        store = self._opened
        if store is not None:
            return store
        opening = self._opening
        assert opening is not None
        store, error = opening.wait()
        if error is not None:
            raise error
        assert store is not None
        self._opened = store
        return store

    def _close_store(self) -> None:
        """Close the DuckDB connection if it was (or is being) opened; raise duckdb.Error."""
        store = self._opened
        if store is None and self._opening is not None:
            store = self._opening.abandon()  # no DuckDB open just to close it
        self._opened = None
        self._opening = None
        if store is not None:
            store.close()

    def _wholly_held(self, run_id: str) -> bool:
        """True when the overlay holds the run from seq 0 on (the tables hold none of it).

        Then its row, frames and decisions are all in the overlay (a checkpoint
        keeps or moves a run's records together, and a run is in the tables
        from its seq 0 once any of it moved).
        """
        held = self._overlay.frames.get(run_id)
        return bool(held) and held[0].seq == 0  # type: ignore[index]

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def _take_file(self) -> None:
        locked = _lock_file(self.path, self)
        if locked is not None:
            self._lock_fd, ident = locked
            self._keys.append(ident)
            # a journal dropped without close() releases the file's lock when collected
            self._lock_closer = weakref.finalize(self, _close_quietly, self._lock_fd)

    def _release(self) -> None:
        self._closed = True
        for key in self._keys:
            _release(key, self)
        self._keys = []
        if self._lock_fd is not None:
            self._lock_closer.detach()
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- the log -------------------------------------------------------------

    def _replay_log(self, log: FrameLog) -> None:
        """Apply every record of the log; raise JournalCorruptError naming the last good one."""
        last: tuple[str | None, int | None] = (None, None)
        try:
            for index, (offset, record) in enumerate(log.entries()):
                try:
                    self._apply(record)
                except BadRecord as exc:
                    raise JournalCorruptError(
                        f"{log.path}: record {index} at byte {offset} is not a well-formed "
                        f"journal record: {exc}. " + after(last) + _ADVICE,
                        source=log.path,
                        offset=offset,
                        record_index=index,
                        reason="record",
                        run_id=last[0],
                        last_good_seq=last[1],
                    ) from None
                last = position(record)
        except JournalCorruptError as exc:
            if exc.fields.get("reason") == "record" or last == (None, None):
                raise
            fields = exc.to_fields()
            fields.update(run_id=last[0], last_good_seq=last[1])
            raise JournalCorruptError(f"{exc.message} {after(last)}".rstrip(), **fields) from None

    def _apply(self, record: Any) -> None:
        """Apply one log record to the overlay.

        Raises:
            BadRecord: the record is not a well-formed journal record (what is
                wrong is the message); nothing was applied.
        """
        parsed = parse_record(record)
        if parsed.decision is not None:
            self._overlay.put_decision(parsed.decision)
            return
        assert parsed.row is not None
        self._apply_run(parsed.row, parsed.frames)

    def _apply_run(self, row: RunRecord, frames: Sequence[Frame]) -> None:
        """Apply a run row and its new frames to the overlay (BadRecord: seqs not dense)."""
        if frames:
            check_frames(row, frames, self._overlay.next_held_seq(row.run_id))
        self._overlay.put_run(row, frames)

    def _write(
        self,
        record: list[Any],
        *,
        sync: bool = True,
        row: RunRecord | None = None,
        frames: Sequence[Frame] = (),
        decision: Decision | None = None,
    ) -> None:
        """Make one mutation durable (log + fsync; ``sync=False``: log only), then visible.

        ``record`` is the log record of ``row`` and ``frames``, or of ``decision``:
        the overlay takes those objects as they are. Parsing the record back
        (:func:`parse_record`, which decodes and checks every payload, as for a
        log read from disk) cost about 90 µs per tool step for a record this
        process has just built from them.
        """
        if self._log is not None:
            if self._opened is None:
                # Nothing is acknowledged before the file is known to be a journal
                # this redrive may write (its format, and no other process holding
                # it): a write waits for the background open and raises its error,
                # so a newer journal never gets a claim, and so a side effect, from
                # older code. Reads of a run held in the log never wait.
                self._store  # noqa: B018
            self._log.append(record, sync=sync)
        if decision is not None:
            self._overlay.put_decision(decision)
        else:
            assert row is not None
            self._apply_run(row, frames)
        if self._log is None:
            self.checkpoint()  # ":memory:": straight into the tables
        elif self._mover is None and self._overlay.held >= max(
            self.checkpoint_frames, self._retry_at
        ):
            self._start_move()

    def _start_move(self) -> None:
        """Start a threshold checkpoint on a background thread (caller holds ``_lock``).

        The write that crossed the threshold returns at once: the bulk insert
        runs on a DuckDB cursor of its own while writes and reads go on (the
        moved records stay in the log and the overlay until it commits, and
        reads merge tables and overlay either way); then, under the lock, the
        moved records leave the overlay and the log is rewritten atomically
        with what the overlay still holds. A failure (disk full, I/O error)
        leaves everything in the log; the next try comes after another
        ``checkpoint_frames`` frames, or on close (which reports it).
        """
        keep = self._kept_runs()
        held = self._overlay
        move = _Move(
            rows={rid: r for rid, r in held.runs.items() if rid not in keep},
            counts={rid: len(fs) for rid, fs in held.frames.items() if rid not in keep},
            frames=[f for rid, fs in held.frames.items() if rid not in keep for f in fs],
            decisions={k: d for k, d in held.decisions.items() if k[0] not in keep},
        )
        if not (move.rows or move.frames or move.decisions):
            return
        self._mover = threading.Thread(
            target=self._move, args=(move,), name="redrive-duckdb-checkpoint", daemon=True
        )
        self._mover.start()

    def _move(self, move: _Move) -> None:
        """The background checkpoint's body (see :meth:`_start_move`)."""
        try:
            try:
                self._store.ingest_apart(
                    list(move.rows.values()), move.frames, list(move.decisions.values())
                )
                _framelog._crash_point("checkpoint-ingested")
                with self._lock:
                    if self._closed or self._log is None:
                        return
                    self._drop_moved(move)
                    self._log.rewrite(self._held_records())
                    self._retry_at = 0
            except Exception:
                with self._lock:
                    self._retry_at = self._overlay.held + self.checkpoint_frames
        finally:
            with self._lock:
                self._mover = None
                self._moved.notify_all()

    def _drop_moved(self, move: _Move) -> None:
        """Forget the overlay's records that ``move`` put into the tables (caller holds the lock).

        A run written to since the snapshot keeps what came after (its newer
        row, its later frames): it is then in the tables up to some seq and in
        the overlay after it, which reads merge.
        """
        held = self._overlay
        for run_id in set(move.rows) | set(move.counts):
            frames = held.frames.get(run_id, [])
            count = move.counts.get(run_id, 0)
            rest = frames[count:]
            held.held -= len(frames) - len(rest)
            if rest:
                held.frames[run_id] = rest
            else:
                held.frames.pop(run_id, None)
            if held.runs.get(run_id) is move.rows.get(run_id) and not rest:
                held.runs.pop(run_id, None)
        for key, decision in move.decisions.items():
            if held.decisions.get(key) is decision:
                del held.decisions[key]

    def _held_records(self) -> list[list[Any]]:
        """Log records that restore exactly what the overlay holds."""
        held = self._overlay
        records = self._kept_records(set(held.runs))
        records.extend(
            decision_record(d) for d in held.decisions.values() if d.run_id not in held.runs
        )
        return records

    def _settle(self) -> None:
        """Wait (releasing ``_lock``) until no background checkpoint is in flight."""
        with self._lock:
            while self._mover is not None and self._mover is not threading.current_thread():
                self._moved.wait()

    def checkpoint(self) -> None:
        """Move every record held in the log into DuckDB's tables, then empty the log.

        The automatic checkpoints (every ``checkpoint_frames`` frames, and on
        close) keep the records of unfinished runs in the log instead, so
        resuming one reads the log, not the tables.
        """
        self._checkpoint(keep_live=False)

    def _checkpoint(self, *, keep_live: bool) -> None:
        """Move held records into the tables; with ``keep_live``, keep unfinished runs' records.

        A run is kept (its row, frames and decisions stay in the log) when its
        status is not terminal, as long as the kept frames stay under half of
        ``checkpoint_frames`` (smallest runs first), so one huge unfinished run
        cannot make every write a checkpoint: it moves, and resumes from the
        tables. The tables are written first (idempotently), then the log is
        rewritten atomically with only the kept records (see
        :meth:`FrameLog.rewrite`): a crash at any point leaves every
        acknowledged record in the tables or the log, or both.
        """
        with self._lock:
            self._settle()
            held = self._overlay
            if held.empty:
                return
            keep = self._kept_runs() if keep_live and self._log is not None else set()
            runs = [r for r in held.runs.values() if r.run_id not in keep]
            frames = [f for rid, run in held.frames.items() if rid not in keep for f in run]
            decisions = [d for d in held.decisions.values() if d.run_id not in keep]
            if runs or frames or decisions:
                self._store.ingest(runs, frames, decisions)
                _framelog._crash_point("checkpoint-ingested")
            if self._log is not None:
                if keep:
                    self._log.rewrite(self._kept_records(keep))
                else:
                    self._log.reset()
            for run_id in list(held.runs) + list(held.frames):
                if run_id not in keep:
                    held.forget(run_id)
            for key in [k for k in held.decisions if k[0] not in keep]:
                del held.decisions[key]
            self._retry_at = 0

    def _kept_runs(self) -> set[str]:
        """The unfinished runs whose records a threshold or closing checkpoint keeps in the log."""
        held = self._overlay
        live = [
            (len(held.frames.get(r.run_id, ())), r.run_id)
            for r in held.runs.values()
            if r.status not in _ENDED
        ]
        budget = self.checkpoint_frames // 2
        keep: set[str] = set()
        for count, run_id in sorted(live):
            if count > budget:
                break
            budget -= count
            keep.add(run_id)
        return keep

    def _kept_records(self, keep: set[str]) -> list[list[Any]]:
        """Log records that restore exactly the overlay's records of the runs in ``keep``."""
        held = self._overlay
        records: list[list[Any]] = []
        for run_id in sorted(keep):
            row = held.runs[run_id]
            frames = held.frames.get(run_id, [])
            for start in range(0, len(frames), _CHUNK):
                chunk = frames[start : start + _CHUNK]
                # an earlier chunk's row only has to match its frames (_apply checks
                # it); the last record sets the run's current row
                last = chunk[-1]
                step = row if start + _CHUNK >= len(frames) else _row_at(row, last)
                records.append(frames_record(step, chunk))
            if not frames:
                records.append(run_record(row))
        records.extend(decision_record(d) for d in held.decisions.values() if d.run_id in keep)
        return records

    def _final_checkpoint(self) -> None:
        """Checkpoint on close; a failure is a JournalWriteError telling what is durable."""
        # an error opening the file (locked, another format, not a DuckDB file) is
        # raised as it is: the disk-space advice below is about moving the records
        self._store  # noqa: B018 - waits for a background open and raises its error
        try:
            self._checkpoint(keep_live=True)
        except Exception as exc:
            if isinstance(exc, ReplayError):
                raise
            log = f"{self.path}.rdlog"
            raise JournalWriteError(
                f"closing DuckDB journal {self.path}: moving the records of its log into the "
                f"database failed ({type(exc).__name__}: {exc}). Nothing is lost: every "
                f"acknowledged write is durable in {log} (fsynced); reopening the journal reads "
                "it from there and moves it into the database at its next checkpoint. Free "
                "disk space (or fix the I/O error), then reopen the journal; keep "
                f"{log} next to the database file until then.",
                journal=self.path,
            ) from exc

    def delete_run(self, run_id: str, *, expected_seq: int) -> bool:
        """See :meth:`redrive.storage.Journal.delete_run`.

        Checkpoints first, so no record of the run is left in the log to bring
        it back when the journal is reopened; then deletes it from the tables.
        """
        with self._lock:
            self.checkpoint()
            return self._store.delete_run(run_id, expected_seq=expected_seq)

    def not_checkpointed(self) -> tuple[list[RunRecord], list[Frame]]:
        """Return the run rows and frames held in the log, not yet moved into the tables.

        A reader that queries the DuckDB file itself (``redrive sql``) adds these
        to what the tables hold: a row here replaces the table's row of its run,
        and these frames follow the table's frames of their run.

        Returns:
            ``(run rows, frames)``, each frame list in seq order per run.
        """
        with self._lock:
            held = self._overlay
            return list(held.runs.values()), [f for run in held.frames.values() for f in run]

    # -- runs ------------------------------------------------------------------

    def _current(self, run_id: str) -> RunRecord | None:
        found = self._overlay.runs.get(run_id)
        return found if found is not None else self._store.get_run(run_id)

    def _commit(self, row: RunRecord, frames: Sequence[Frame], *, sync: bool) -> None:
        self._write(
            frames_record(row, frames) if frames else run_record(row),
            sync=sync,
            row=row,
            frames=frames,
        )

    def _held_decision(self, run_id: str, name: str) -> Decision | None:
        found = self._overlay.decision(run_id, name)
        if found is not None or self._wholly_held(run_id):
            return found
        return self._store.decision(run_id, name)

    def _put_decision(self, decision: Decision) -> None:
        self._write(decision_record(decision), decision=decision)

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """See :meth:`redrive.storage.Journal.frames`."""
        seq = start
        while True:
            with self._lock:
                page = [] if self._wholly_held(run_id) else self._store.page(run_id, seq, _PAGE)
                if not page:
                    page = self._overlay.page(run_id, seq, _PAGE)
            if not page:
                return
            yield from page
            seq = page[-1].seq + 1

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """See :meth:`redrive.storage.Journal.runs`."""
        with self._lock:
            held = len(self._overlay.runs)
            stored = self._store.runs(status=status, limit=None if limit is None else limit + held)
            return self._overlay.select(status, limit, stored)

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

        Raises:
            JournalWriteError: the checkpoint or DuckDB's close failed (disk
                full, I/O error); the message says what is durable where (the
                log keeps every acknowledged write; a reopened journal reads it).
        """
        with self._lock:
            if self._closed:
                return
            try:
                if not self.read_only:
                    self._final_checkpoint()
            finally:
                if self._log is not None:
                    self._log.close()
                try:
                    self._close_store()
                except duckdb.Error as exc:
                    closing: duckdb.Error | None = exc
                else:
                    closing = None
                self._release()
            if closing is not None:
                raise JournalWriteError(
                    f"closing DuckDB journal {self.path} failed ({type(closing).__name__}: "
                    f"{closing}); every acknowledged write is durable in the database or in "
                    f"{self.path}.rdlog, which the reopened journal reads and moves into the "
                    "database.",
                    journal=self.path,
                ) from closing
