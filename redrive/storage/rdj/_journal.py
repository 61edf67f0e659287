"""The read-only journal over one ``.rdj`` file."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator, Sequence

from ...frames import Frame
from .._base import Decision, RunRecord, RunStatus, RunUpdate
from ._format import (
    BATCH,
    MAX_RECORD,
)
from ._reader import Reader

__all__ = ["HOLD_BYTES", "RdjJournal"]

#: Files up to this size (bytes) keep the frames checked on open in memory (see RdjJournal).
HOLD_BYTES = 4 * 1024 * 1024


def _read_only(path: str, what: str) -> PermissionError:
    return PermissionError(
        f"{path} is a read-only .rdj export; it cannot {what}. Import it into a journal first "
        f"(`redrive --journal runs.duckdb import {shlex.quote(str(path))}` or redrive.import_run) "
        "to resume or "
        "record into the run."
    )


class RdjJournal:
    """A read-only journal over one ``.rdj`` file (``open_journal("incident.rdj")``).

    Opening reads the whole file once, streamed, and checks every record and
    the chain, so a damaged file is refused at once. A file of at most
    :data:`HOLD_BYTES` keeps the frames it checked in memory, and
    :meth:`frames` hands those out (what a test or ``redrive check`` reads is
    then read and checked once); a larger one is streamed from the file again
    for each caller (and checked again).

    Args:
        path: the ``.rdj`` file.
        verify: check every frame on open (default True); False reads only the header.
        max_record: the largest record body accepted, in bytes.
        keep_payloads: leave each frame's payload, decoded and checked on open,
            for the first replay that reads that frame (:mod:`redrive._decoded`),
            which then does not decode it again. For a caller that replays the
            frames it opened soon (the pytest plugin); the decoded payloads
            are held until then, or until the frames are dropped.
        data: the file's bytes, when the caller has read them (the file is then
            not opened: what is checked and held is exactly these bytes).

    Raises:
        JournalCorruptError: the file is damaged, truncated or not an ``.rdj`` file.
        JournalFormatError: the file is of a newer format version.
        FileNotFoundError: no such file.
    """

    durable = False
    read_only = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        verify: bool = True,
        max_record: int = MAX_RECORD,
        keep_payloads: bool = False,
        data: bytes | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.url = self.path
        self.max_record = max_record
        self._data = data  # read again (verify, a stream) from these bytes, not the file
        reader = Reader(self.path, max_record, keep=keep_payloads, data=data)
        #: the frames checked on open, for a file of at most HOLD_BYTES (else None)
        self._held: tuple[Frame, ...] | None = None
        try:
            self.header = reader.header()
            if verify:
                hold = reader.size <= HOLD_BYTES
                frames = tuple(reader.frames(self.header)) if hold else None
                if frames is None:
                    for _frame in reader.frames(self.header):
                        pass
                self._held = frames
        finally:
            reader.close()
        self.run_id = self.header.run.run_id

    def verify(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Check the whole file again; return the frame count.

        Args:
            progress: called as ``progress(frames_done, frames_total)`` now and then.

        Raises:
            JournalCorruptError: as on open.
        """
        count = 0
        for _frame in self._read(0):
            count += 1
            if progress is not None and count % BATCH == 0:
                progress(count, self.header.frames)
        if progress is not None:
            progress(count, self.header.frames)
        return count

    def _stream(self, start: int) -> Iterator[Frame]:
        if self._held is not None:
            return iter(self._held[start:] if start > 0 else self._held)  # seq is the index
        return self._read(start)

    def _read(self, start: int) -> Iterator[Frame]:
        reader = Reader(self.path, self.max_record, data=self._data)
        try:
            header = reader.header()
            if header.run.run_id != self.run_id or header.frames != self.header.frames:
                raise reader.corrupt("changed", "the file changed since it was opened")
            for frame in reader.frames(header):
                if frame.seq >= start:
                    yield frame
        finally:
            reader.close()

    # -- reads -----------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        """Return the exported run's row when ``run_id`` is its id, else None."""
        return self.header.run if run_id == self.run_id else None

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """Yield the run's frames from seq ``start`` (checked: held since open, or streamed).

        Raises:
            JournalCorruptError: a streamed file (larger than :data:`HOLD_BYTES`,
                or opened with ``verify=False``) was damaged after it was opened.
        """
        if run_id != self.run_id:
            return iter(())
        return self._stream(start)

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Return ``[the run]`` (or nothing when it has another status or ``limit`` is 0)."""
        rows = [self.header.run] if status is None or self.header.run.status == status else []
        return rows if limit is None else rows[:limit]

    def interrupted_runs(self) -> list[RunRecord]:
        """Return the run when it was exported while still ``running``."""
        return self.runs(status=RunStatus.RUNNING.value)

    def stale_runs(self, *, older_than: float = 0.0) -> list[RunRecord]:
        """Return nothing: an export carries no lease."""
        return []

    def decision(self, run_id: str, name: str) -> Decision | None:
        """Return None: approval decisions are not part of an export."""
        return None

    def release_lease(self, run_id: str, owner: str, epoch: int) -> None:
        """Do nothing (an export holds no lease)."""

    def close(self) -> None:
        """Nothing to release: every read opens and closes the file itself."""

    # -- writes (refused) -----------------------------------------------------------

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"start run {record.run_id!r}")

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
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"append to run {run_id!r} at seq {expected_seq}")

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"lease run {run_id!r}")

    def renew_lease(self, run_id: str, owner: str, epoch: int, ttl: float) -> None:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"lease run {run_id!r}")

    def cancel(self, run_id: str, *, reason: str, by: str) -> RunRecord:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"cancel run {run_id!r}")

    def decide(
        self, run_id: str, name: str, approved: bool, *, by: str, note: str = ""
    ) -> Decision:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"record a decision for run {run_id!r}")

    def delete_run(self, run_id: str, *, expected_seq: int) -> bool:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"delete run {run_id!r}")
