"""The Journal protocol: what every journal backend provides."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from ..frames import Frame
from ._records import Decision, RunRecord, RunUpdate


@runtime_checkable
class Journal(Protocol):
    """What every journal backend provides. No SQL here: frames and run rows.

    Implementations: :class:`~redrive.storage.MemoryJournal` (the reference),
    DuckDB, Postgres, and the read-only ``.rdj`` file journal. All are
    thread-safe. Writes raise :class:`~redrive.errors.ReplayError` subclasses
    (``AppendConflictError``, ``LeaseLostError``) when they lose a race.
    """

    url: str
    #: True when a write survives a crash of this process as soon as it returns.
    durable: bool
    #: True when writes are refused (``.rdj`` files).
    read_only: bool

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        """Insert a run with its ``run_start`` frame (seq 0) unless it exists.

        Returns:
            True when this call created the run, False when it already existed
            (the journal is left unchanged).

        Raises:
            ValueError: the run id breaks the one rule every backend shares
                (empty, NUL, a lone surrogate, over 1,024 UTF-8 bytes); nothing
                is written. Checked before the database sees it, so every
                backend refuses the same ids with the same message.
        """
        ...

    def get_run(self, run_id: str) -> RunRecord | None:
        """Return the run's index row, or None for an unknown run."""
        ...

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
        """Append ``frames`` (dense seqs from ``expected_seq``) atomically and durably.

        Args:
            run_id: the run, which must exist.
            frames: frames with seqs ``expected_seq, expected_seq+1, ...`` whose
                chains link to the run's last chain. May be empty (only ``update``).
            expected_seq: the run's current ``next_seq``; the append is
                conditional on it.
            update: changes to the run row, in the same transaction.
            epoch: the writer's lease epoch; when given and the run's lease
                epoch differs, the write is refused (fencing).
            sync: False lets the backend return once the write survives the
                death of this process (written to the OS, or committed without
                waiting for the WAL flush), not yet a machine crash; the next
                ``sync=True`` write makes it fully durable. Used for model
                frames, which nothing external depends on.

        Raises:
            AppendConflictError: another writer appended first.
            LeaseLostError: ``epoch`` is stale.
            UnknownRunError: no such run.
            ValueError: frames are not dense, of another run, or mis-chained.
        """
        ...

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """Yield the run's frames from seq ``start`` in seq order (streamed)."""
        ...

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Return run rows, newest first, optionally only of one status."""
        ...

    def interrupted_runs(self) -> list[RunRecord]:
        """Return runs left ``running`` (a worker may have died in them)."""
        ...

    def stale_runs(self, *, older_than: float = 0.0) -> list[RunRecord]:
        """Return running runs whose lease expired at least ``older_than`` seconds ago."""
        ...

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Take the run's lease for ``ttl`` seconds and return the new epoch.

        Raises:
            RunBusyError: another owner holds an unexpired lease.
            UnknownRunError: no such run.
        """
        ...

    def renew_lease(self, run_id: str, owner: str, epoch: int, ttl: float) -> None:
        """Extend a held lease by ``ttl`` seconds from now.

        Raises:
            LeaseLostError: the lease is no longer ``(owner, epoch)``.
        """
        ...

    def release_lease(self, run_id: str, owner: str, epoch: int) -> None:
        """Give the lease up (no error when it was already lost)."""
        ...

    def cancel(self, run_id: str, *, reason: str, by: str) -> RunRecord:
        """End the run ``cancelled`` on purpose, naming who and why; return its row after.

        Appends a ``run_end`` frame (status ``cancelled``, with ``reason`` and
        ``by``) and sets the row's status and ``error`` (``"cancelled by BY:
        REASON"``) in one transaction. A worker executing the run meanwhile has
        its next append refused with ``TerminalRunError``: no step it has not
        claimed yet runs after this returns.

        Raises:
            UnknownRunError: no such run.
            TerminalRunError: the run already ended (succeeded, failed or
                cancelled); nothing changes.
            PermissionError: the journal is read-only (an ``.rdj`` file).
            ValueError: ``reason`` or ``by`` is empty.
        """
        ...

    def decide(
        self, run_id: str, name: str, approved: bool, *, by: str, note: str = ""
    ) -> Decision:
        """Record an approval decision; the first one wins and is returned."""
        ...

    def delete_run(self, run_id: str, *, expected_seq: int) -> bool:
        """Delete a run (its row, frames and decisions) if it has not changed; for retention.

        Conditional, like an append: the run is deleted only while it still has
        ``expected_seq`` frames and no other worker holds an unexpired lease on
        it, in one transaction, so a run that a worker resumed after it was
        chosen for deletion is kept.

        Returns:
            True when this call deleted the run; False when it is gone already
            or gained frames meanwhile (nothing changes).

        Raises:
            RunBusyError: a worker holds an unexpired lease on the run.
            PermissionError: the journal is read-only (an ``.rdj`` file).
        """
        ...

    def decision(self, run_id: str, name: str) -> Decision | None:
        """Return the recorded decision for ``(run_id, name)``, if any."""
        ...

    def close(self) -> None:
        """Release the backend's resources."""
        ...
