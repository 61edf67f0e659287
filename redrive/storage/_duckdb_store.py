"""The DuckDB tables of the DuckDB journal: one connection, paged reads with eviction, bulk inserts.

Part of :mod:`.duckdb` (see its docstring).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final

import attrs
import duckdb

from ..errors import JournalCorruptError, JournalLockedError
from ..frames import FORMAT_VERSION, Frame
from ._base import Decision, RunRecord
from ._sql import SqlJournal
from ._sqlschema import FRAME_ATTRS, FRAME_COLUMNS, RUN_COLUMNS, SCHEMA_VERSION, Cursor, _frame

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
            absent = _absent(path, read_only)
            if absent is not None:
                raise absent from None
            raise damaged_file(path, exc) from None
        except duckdb.Error as exc:
            raise damaged_file(path, exc) from None
        try:
            self._setup(read_only)
        except duckdb.Error as exc:
            with contextlib.suppress(duckdb.Error):
                self._con.close()
            raise damaged_file(path, exc) from None

    def _setup(self, read_only: bool) -> None:
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
            except BaseException as exc:
                with contextlib.suppress(duckdb.Error):  # a failed COMMIT may have ended it
                    con.execute("ROLLBACK")
                if isinstance(exc, duckdb.Error) and _is_damage(exc):
                    raise damaged_file(self.path, exc) from exc
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

    def drop_run(self, run_id: str) -> None:
        """Delete a run's rows from every table, unconditionally (a damaged run's drop)."""
        with self._transaction() as cur:
            for table in ("redrive_frames", "redrive_decisions", "redrive_runs"):
                cur.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

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


def _is_damage(exc: duckdb.Error) -> bool:
    """True when DuckDB failed reading its file (not a full disk, not a lost race)."""
    damage = (
        duckdb.IOException,
        duckdb.InternalException,
        duckdb.SerializationException,
        duckdb.FatalException,
        duckdb.CatalogException,
        duckdb.ConversionException,
    )
    if _disk_full(exc):
        return False
    # DuckDB raises a failed block checksum as its base class (duckdb 1.x:
    # "Corrupt database file: computed checksum ... does not match stored checksum")
    return isinstance(exc, damage) or "corrupt database file" in str(exc).lower()


def _disk_full(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "no space left" in text or "disk is full" in text or "disk full" in text


def _absent(path: str, read_only: bool) -> FileNotFoundError | None:
    """The error for a journal file that is not there to open (None: it is, or could be made).

    A writable journal is created where its directory exists; a read-only one
    must exist. Either is a path mistake, not a damaged file.
    """
    where = os.path.abspath(path)
    folder = os.path.dirname(where)
    if not os.path.isdir(folder):
        return FileNotFoundError(
            errno.ENOENT,
            f"cannot open journal {where}: the directory {folder} does not exist (nothing "
            f"was written). Check the path, or create the directory first (mkdir -p {folder}).",
            path,
        )
    if read_only and not os.path.exists(where):
        return FileNotFoundError(
            errno.ENOENT,
            f"journal {where} does not exist, and a read-only open creates nothing. Check "
            "the path; a worker creates the journal when it first opens it for writing.",
            path,
        )
    return None


def damaged_file(path: str, exc: BaseException) -> JournalCorruptError:
    """The error for a DuckDB file that DuckDB cannot read (truncated, overwritten, foreign).

    A full disk is not damage: it is raised as :class:`JournalWriteError`'s advice
    by the callers that write; this is for everything DuckDB refuses to read.
    """
    where = os.path.abspath(path)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "not a valid duckdb database file" in text.lower():
        return JournalCorruptError(
            f"cannot open journal {where}: it is not a DuckDB database file ({text}). Check the "
            "path: an export opens by a path ending in .rdj, a Postgres journal by a "
            "postgresql:// URL. Nothing was written to it.",
            source=where,
            reason="unreadable",
        )
    return JournalCorruptError(
        f"DuckDB journal {where} cannot be read: the database file is damaged (truncated, "
        f"overwritten, or damaged on disk; DuckDB said: {text}). Writes not "
        f"yet checkpointed are still in {where}.rdlog: keep it. Restore the database file "
        "from a backup and put the .rdlog back next to it, or move both away and start a new "
        "journal (runs exported to .rdj files import into it). Freeing disk space does not "
        "help: nothing is full.",
        source=where,
        reason="unreadable",
    )


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
