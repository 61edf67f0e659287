"""The DuckDB journal class; see :mod:`.duckdb` (which re-exports it) for how it works."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Final

import duckdb

from ..errors import ReplayError
from ..frames import Frame
from . import _framelog
from ._base import Decision, RunRecord
from ._duckdb_held import (
    KEEP_LOG_BYTES,
    Damage,
    _apply_run,
    _close_failed,
    _drop_moved,
    _held_records,
    _holds_live,
    _kept_records,
    _kept_runs,
    _Move,
    _move_failed,
    _replay_log,
    _wholly_held,
    nothing_moves,
)
from ._duckdb_open import (
    OPEN_DELAY,
    _abandon,
    _claim,
    _close_quietly,
    _lock_file,
    _log_holds_records,
    _Opening,
    _release,
)
from ._duckdb_store import _Store
from ._framelog import FrameLog
from ._logrecord import decision_record, frames_record, run_record
from .memory import LocalJournal, MemoryState

#: Frames held in the log (and memory) before they are moved into DuckDB.
CHECKPOINT_FRAMES: Final = 2000
_PAGE: Final = 1000


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
        JournalCorruptError: the log next to the file is damaged mid-file, or holds a
            record that is not a well-formed journal record; the error names the file,
            the byte offset, the record index and (when known) the last good run and seq.
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
        #: the runs the log names that cannot be read (see _duckdb_held.Damage)
        self._damage = Damage()
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
                # tables can be opened later: a write or an operation that needs them
                # opens them (see _store); a read of a run wholly held in the log does
                # not. The background open starts below when the log holds a live run.
                self._opening = _Opening(path)
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
                self._damage = _replay_log(self._overlay, self._log, path)
                if self._opening is not None and _holds_live(self._overlay):
                    self._opening.start(OPEN_DELAY)
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
            _apply_run(self._overlay, row, frames)
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
        move = _Move.of(self._overlay, self._keep())
        if move is None:
            return
        # not a daemon: the interpreter joins it at exit, before finalizing (a daemon
        # thread still inside DuckDB then is killed there, which aborts the process)
        self._mover = threading.Thread(
            target=self._move, args=(move,), name="redrive-duckdb-checkpoint"
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
                    _drop_moved(self._overlay, move)
                    self._log.rewrite(_held_records(self._overlay) + self._damage.records())
                    self._retry_at = 0
            except Exception:
                with self._lock:
                    self._retry_at = self._overlay.held + self.checkpoint_frames
        finally:
            with self._lock:
                self._mover = None
                self._moved.notify_all()

    def _keep(self) -> set[str]:
        """The runs a threshold or closing checkpoint keeps in the log (see :func:`_kept_runs`)."""
        small = self._log is not None and self._log.size() <= KEEP_LOG_BYTES
        kept = _kept_runs(self._overlay, self.checkpoint_frames, ended=small)
        return (kept if self._log is not None else set()) | set(self._damage.runs)

    def _settle(self) -> None:
        """Wait (releasing ``_lock``) until no background checkpoint is in flight."""
        with self._lock:
            while self._mover is not None and self._mover is not threading.current_thread():
                self._moved.wait()

    def checkpoint(self) -> None:
        """Move every record held in the log into DuckDB's tables, then empty the log.

        The automatic checkpoints (every ``checkpoint_frames`` frames, and on
        close) keep the records of unfinished runs and of recently ended ones
        in the log instead (see :func:`._duckdb_held._kept_runs`), so resuming
        or replaying one reads the log, not the tables.
        """
        self._checkpoint(keep_live=False)

    def _checkpoint(self, *, keep_live: bool) -> None:
        """Move held records into the tables; with ``keep_live``, keep the runs :meth:`_keep` names.

        A kept run's row, frames and decisions stay in the log: unfinished
        runs, then recently ended ones, within half of ``checkpoint_frames``
        (:func:`._duckdb_held._kept_runs`), and none of the ended ones once the
        log is over :data:`._duckdb_held.KEEP_LOG_BYTES`; so one huge run
        cannot make every write a checkpoint: it moves, and is read from the
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
            # a damaged run stays in the log, as it was found
            keep = self._keep() if keep_live else set(self._damage.runs)
            runs = [r for r in held.runs.values() if r.run_id not in keep]
            frames = [f for rid, run in held.frames.items() if rid not in keep for f in run]
            decisions = [d for d in held.decisions.values() if d.run_id not in keep]
            if runs or frames or decisions:
                self._store.ingest(runs, frames, decisions)
                _framelog._crash_point("checkpoint-ingested")
            if self._log is not None:
                if keep:
                    self._log.rewrite(_kept_records(self._overlay, keep) + self._damage.records())
                else:
                    self._log.reset()
            for run_id in list(held.runs) + list(held.frames):
                if run_id not in keep:
                    held.forget(run_id)
            for key in [k for k in held.decisions if k[0] not in keep]:
                del held.decisions[key]
            self._retry_at = 0

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
            raise _move_failed(self.path, exc) from exc

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
        and a frame here the table's frame of its run and seq (after a crash
        between a checkpoint's insert and its log rewrite both hold it).

        Returns:
            ``(run rows, frames)``, each frame list in seq order per run.
        """
        with self._lock:
            held = self._overlay
            return list(held.runs.values()), [f for run in held.frames.values() for f in run]

    # -- runs ------------------------------------------------------------------

    def _current(self, run_id: str) -> RunRecord | None:
        self._damage.refuse(run_id)
        found = self._overlay.runs.get(run_id)
        return found if found is not None else self._store.get_run(run_id)

    def _commit(self, row: RunRecord, frames: Sequence[Frame], *, sync: bool) -> None:
        record = frames_record(row, frames) if frames else run_record(row)
        self._write(record, sync=sync, row=row, frames=frames)

    def _held_decision(self, run_id: str, name: str) -> Decision | None:
        found = self._overlay.decision(run_id, name)
        if found is not None or _wholly_held(self._overlay, run_id):
            return found
        return self._store.decision(run_id, name)

    def _put_decision(self, decision: Decision) -> None:
        self._write(decision_record(decision), decision=decision)

    def damaged_runs(self) -> dict[str, str]:
        """The runs the log holds damaged (unreadable; the others read as before): ``{id: why}``."""
        with self._lock:
            return {run_id: exc.message for run_id, exc in self._damage.runs.items()}

    def drop_damaged(self, run_id: str) -> bool:
        """Delete a damaged run from the log and the tables; False when it is not damaged."""
        with self._lock:
            if run_id not in self._damage.runs:
                return False
            self._settle()
            del self._damage.runs[run_id]
            self._overlay.forget(run_id)  # its row, frames and decisions
            assert self._log is not None  # damage is only ever found in a log
            self._log.rewrite(_held_records(self._overlay) + self._damage.records())
            self._store.drop_run(run_id)
            return True

    def intact(self, run_id: str) -> tuple[RunRecord | None, Iterator[Frame]]:
        """A damaged run's last readable row (or None) and its frames as held, unchecked."""
        with self._lock:
            found = self._overlay.runs.get(run_id)
            row = found if found is not None else self._store.get_run(run_id)
        return row, self._frames(run_id, 0)

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """See :meth:`redrive.storage.Journal.frames`."""
        with self._lock:
            self._damage.refuse(run_id)
        return self._frames(run_id, start)

    def _frames(self, run_id: str, start: int) -> Iterator[Frame]:
        seq = start
        while True:
            with self._lock:
                page = (
                    []
                    if _wholly_held(self._overlay, run_id)
                    else self._store.page(run_id, seq, _PAGE)
                )
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

        When nothing must move (the log holds only runs it keeps:
        :func:`._duckdb_held.nothing_moves`), it neither rewrites the log nor
        opens the tables: about a millisecond (issue 26).

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
                if (
                    not self.read_only
                    and self._mover is None
                    and nothing_moves(self._overlay, self._keep())
                ):
                    # an open that started is waited for and its error raised; one that
                    # did not start is cancelled below (nothing was written without it)
                    if self._opening is not None and self._opening.started:
                        self._store  # noqa: B018
                elif not self.read_only:
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
                raise _close_failed(self.path, closing) from closing
