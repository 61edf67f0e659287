"""The Journal protocol and the records every backend shares."""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import attrs

from .._advice import after_end_advice
from .._scrub import DEFAULT as _SCRUB
from ..errors import (
    AppendConflictError,
    JournalWriteError,
    LeaseLostError,
    TerminalRunError,
    UnknownRunError,
)
from ..frames import GENESIS, ChainCheck, Frame, Kind, decode, make_frame
from ._limits import MAX_VALUE

__all__ = [
    "IMPORT_OWNER",
    "Decision",
    "Journal",
    "RunIndexOps",
    "RunRecord",
    "RunStatus",
    "RunUpdate",
    "appended",
    "cancel_frame",
    "cancel_run",
    "cancel_text",
    "scrubbed_text",
    "cancelled_error",
    "check_append",
    "check_size",
    "frame_size",
    "check_delete",
    "check_open",
    "check_fence",
    "held_by_other",
    "unknown_run",
]


class RunStatus(enum.StrEnum):
    """Status of a run, as stored in the journal's run index."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for succeeded, failed and cancelled."""
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@attrs.frozen(kw_only=True)
class RunRecord:
    """A run's row in the journal's run index.

    Attributes:
        run_id: the caller-chosen id.
        status: a :class:`RunStatus` value string.
        next_seq: the seq the next appended frame must carry (= frame count).
        last_chain: the chain of the last frame (``GENESIS`` when empty).
        input_fp: fingerprint (32 hex) of the run's input.
        entrypoint: ``"module:qualname"`` of a ``@redrive.durable`` function, or None.
        created_at / updated_at: wall time, seconds since the Unix epoch.
        output: canonical msgpack of the run's output once succeeded, else None.
        error: text of the error that ended the run, or None.
        lease_owner: the worker holding the run lease, or None.
        lease_epoch: fencing epoch, incremented on each lease acquisition (0: never leased).
        lease_expires: when the lease lapses, seconds since the Unix epoch, or None.
    """

    run_id: str
    status: str = RunStatus.RUNNING.value
    next_seq: int = 0
    last_chain: str = GENESIS
    input_fp: str = ""
    entrypoint: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    output: bytes | None = None
    error: str | None = None
    lease_owner: str | None = None
    lease_epoch: int = 0
    lease_expires: float | None = None

    def output_value(self) -> Any:
        """Decode and return the recorded output (None when there is none)."""
        return None if self.output is None else decode(self.output)


@attrs.frozen(kw_only=True)
class RunUpdate:
    """Changes to a run's index row, applied atomically with an append."""

    status: str | None = None
    output: bytes | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class Decision:
    """A recorded approval decision (first decision wins).

    Attributes:
        run_id, name: which approval.
        approved: the decision.
        by: who decided (free text).
        at: seconds since the Unix epoch.
        note: optional free text.
    """

    run_id: str
    name: str
    approved: bool
    by: str
    at: float
    note: str = ""


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


def check_fence(record: RunRecord, epoch: int | None) -> None:
    """Refuse a write that a run lease forbids (fencing).

    Raises:
        LeaseLostError: ``epoch`` is given and is not the run's current epoch.
        RunBusyError: ``epoch`` is None (a writer without a lease) while another
            worker holds an unexpired lease on the run.
    """
    if epoch is None:
        if held_by_other(record, None):
            from ..errors import RunBusyError

            raise RunBusyError(
                f"run {record.run_id!r} is leased by {record.lease_owner!r} (epoch "
                f"{record.lease_epoch}) for another "
                f"{(record.lease_expires or 0.0) - time.time():.1f} s; this worker has no lease, "
                "so its write is refused. Give every worker of this run a lease "
                "(redrive.run(..., lease=seconds)), or wait for the lease to end.",
                run_id=record.run_id,
                seq=record.next_seq,
                owner=record.lease_owner,
            )
        return
    if record.lease_epoch != epoch:
        raise LeaseLostError(
            f"run {record.run_id!r}: this worker's lease (epoch {epoch}) was taken over "
            f"{_by_holder(record)}; its writes are refused. "
            "Stop this loop: the run continues (or was finished) in the other worker.",
            run_id=record.run_id,
            seq=record.next_seq,
            epoch=epoch,
            current_epoch=record.lease_epoch,
        )


def unknown_run(run_id: str) -> UnknownRunError:
    """Return the error for a run id that no journal row has."""
    return UnknownRunError(
        f"no run {run_id!r} in this journal; check the run id and the journal URL, or start it "
        "with redrive.run(...) (create=True)",
        run_id=run_id,
    )


def appended(
    record: RunRecord | None,
    run_id: str,
    frames: Sequence[Frame],
    *,
    expected_seq: int,
    update: RunUpdate | None,
    epoch: int | None,
) -> RunRecord:
    """Check an append against the run's current row and return the row after it.

    Every backend calls this inside its own transaction or lock, with the row
    it just read (None when the run is missing).

    Raises:
        UnknownRunError, LeaseLostError, RunBusyError, AppendConflictError,
        ValueError: as :meth:`Journal.append`.
    """
    if record is None:
        raise unknown_run(run_id)
    check_fence(record, epoch)
    if record.status == RunStatus.CANCELLED.value:
        raise cancelled_error(record)  # before the seq check: a cancel is not a lost race
    check_append(record, frames, expected_seq)
    if update is not None and update.output is not None:
        check_size(run_id, expected_seq + len(frames), "the run's output", len(update.output))
    if update is not None and update.error is not None:
        check_size(run_id, expected_seq + len(frames), "the run's error", len(update.error))
    check_open(record)  # a lost race to end the run is a conflict (above), not this
    return after_append(record, frames, update, time.time())


def check_open(record: RunRecord) -> None:
    """Refuse a write to a run that has ended (succeeded, failed or cancelled).

    Raises:
        TerminalRunError: the run's status is terminal; for a cancelled run the
            message names who cancelled it and why.
    """
    if RunStatus(record.status).terminal:
        raise (
            cancelled_error(record)
            if record.status == RunStatus.CANCELLED.value
            else TerminalRunError(
                f"run {record.run_id!r} already ended with status {record.status}; nothing "
                "more can be written to it. " + after_end_advice(record.run_id),
                run_id=record.run_id,
                seq=record.next_seq,
                status=record.status,
            )
        )


def cancelled_error(record: RunRecord) -> TerminalRunError:
    """Return the error for a write to (or a step of) a run that was cancelled."""
    return TerminalRunError(
        f"run {record.run_id!r} was cancelled ({record.error or 'cancelled'}); this worker "
        "stops: no step runs after a cancel. " + after_end_advice(record.run_id),
        run_id=record.run_id,
        seq=record.next_seq,
        status=record.status,
    )


def scrubbed_text(text: str) -> str:
    """Return free text an operator gives (a cancel's reason, a decision's note) scrubbed.

    The default secret rules of :mod:`redrive._scrub` (secret-looking text:
    keys, bearer tokens, secret URL parameters), as every frame gets them.
    """
    return _SCRUB.text(text) or ""


def cancel_text(reason: str, by: str) -> str:
    """The ``error`` text of a run cancelled by ``by`` for ``reason``."""
    return f"cancelled by {by}: {reason}"


def cancel_frame(record: RunRecord, *, reason: str, by: str) -> Frame:
    """The ``run_end`` frame that cancels the run ``record`` (next seq, chained after it)."""
    return make_frame(
        run_id=record.run_id,
        seq=record.next_seq,
        kind=Kind.RUN_END,
        name="run",
        payload={
            "status": RunStatus.CANCELLED.value,
            "output": None,
            "error": cancel_text(reason, by),
            "reason": reason,
            "by": by,
        },
        prev_chain=record.last_chain,
        epoch=record.lease_epoch,
    )


def held_by_other(record: RunRecord, owner: str | None) -> bool:
    """True when someone other than ``owner`` holds an unexpired lease on the run."""
    return (
        record.lease_owner is not None
        and record.lease_owner != owner
        and record.lease_expires is not None
        and record.lease_expires > time.time()
    )


def check_delete(record: RunRecord | None, expected_seq: int) -> bool:
    """Whether a conditional delete of ``record`` may go ahead (shared by every backend).

    Returns:
        False when the run is gone or no longer has ``expected_seq`` frames.

    Raises:
        RunBusyError: another worker holds an unexpired lease on the run.
    """
    if record is None or record.next_seq != expected_seq:
        return False
    if held_by_other(record, None):
        from ..errors import RunBusyError

        raise RunBusyError(
            f"run {record.run_id!r} is leased by {record.lease_owner!r} for another "
            f"{(record.lease_expires or 0.0) - time.time():.1f} s: a worker is executing it, "
            "so it is not deleted. Prune it once the lease has lapsed.",
            run_id=record.run_id,
            seq=record.next_seq,
            owner=record.lease_owner,
        )
    return True


#: The lease owner of a run while an import copies it: workers cannot write to it,
#: sweeps and ``interrupted_runs()`` skip it, and a new import of it starts it over.
IMPORT_OWNER = "redrive import (not finished)"


def check_size(run_id: str, seq: int, what: str, size: int) -> None:
    """Refuse a value over the one size limit of every journal (:data:`MAX_VALUE`).

    Args:
        run_id: the run the value would be written to.
        seq: the seq it would be written at.
        what: what the value is, for the message (``"frame seq 4 (tool_done 'fetch')"``).
        size: its size in bytes.

    Raises:
        JournalWriteError: ``size`` is over the limit; nothing was written.
    """
    if size > MAX_VALUE:
        raise JournalWriteError(
            f"run {run_id!r} seq {seq}: {what} is {size:,} bytes, over the {MAX_VALUE:,}-byte "
            "limit of a journaled value (redrive.storage.MAX_VALUE, the same on every journal "
            "and in .rdj files). Nothing of this write was journaled; what was journaled "
            "before it is kept. Return a smaller value from the step: store large data "
            "elsewhere (a file, an object store) and return a reference to it.",
            run_id=run_id,
            seq=seq,
        )


def frame_size(frame: Frame) -> int:
    """Return the bytes a frame counts against :data:`MAX_VALUE`: payload, name and key."""
    return (
        len(frame.payload)
        + len(frame.name.encode("utf-8", "surrogatepass"))
        + len(frame.key.encode("utf-8", "surrogatepass"))
    )


def check_append(record: RunRecord, frames: Sequence[Frame], expected_seq: int) -> None:
    """Validate an append against the run row (shared by every backend).

    Raises:
        AppendConflictError: ``expected_seq`` is not the run's ``next_seq``.
        JournalWriteError: a frame over the size limit (:func:`check_size`).
        ValueError: frames that are not dense, of another run, or mis-chained.
    """
    for frame in frames:
        check_size(
            record.run_id,
            frame.seq,
            f"frame seq {frame.seq} ({frame.kind} {frame.name!r})",
            frame_size(frame),
        )
    if record.next_seq != expected_seq:
        raise AppendConflictError(
            f"run {record.run_id!r}: expected to append at seq {expected_seq} but the journal "
            f"already holds {record.next_seq} frames: another writer appended first. Re-read "
            "the run and continue from its journal.",
            run_id=record.run_id,
            seq=expected_seq,
            found=record.next_seq,
        )
    check = ChainCheck(record.run_id, next_seq=expected_seq, prev_chain=record.last_chain)
    for frame in frames:
        found = check.problem(frame)
        if found is not None:
            raise ValueError(
                f"frame seq {frame.seq} appended to run {record.run_id!r} {found[1]} "
                "(appended frames must be the run's own, dense in seq, each chained to the "
                "frame before it)"
            )
        check.advance(frame)


class RunIndexOps:
    """Journal methods written once over two primitives of a backend.

    A backend provides ``runs(status=, limit=)`` and ``_change_run(run_id,
    change)`` (apply ``change(record) -> record`` atomically; write only when
    it returns a new record; raise ``UnknownRunError`` for a missing run) and
    gets the run sweeps and the lease operations from here.
    """

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """See :meth:`redrive.storage.Journal.runs`."""
        raise NotImplementedError

    def _change_run(self, run_id: str, change: Callable[[RunRecord], RunRecord]) -> RunRecord:
        raise NotImplementedError

    def interrupted_runs(self) -> list[RunRecord]:
        """Return runs left ``running`` (a worker may have died in them).

        A run an import is still copying (or a killed import left half-copied;
        importing again finishes it) is not listed.
        """
        return [
            r for r in self.runs(status=RunStatus.RUNNING.value) if r.lease_owner != IMPORT_OWNER
        ]

    def stale_runs(self, *, older_than: float = 0.0) -> list[RunRecord]:
        """Return running runs whose lease expired at least ``older_than`` seconds ago."""
        cutoff = time.time() - older_than
        rows = [
            r
            for r in self.interrupted_runs()
            if r.lease_expires is not None and r.lease_expires <= cutoff
        ]
        rows.sort(key=lambda r: r.lease_expires or 0.0)
        return rows

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Take the run's lease for ``ttl`` seconds; return the new epoch (see :class:`Journal`)."""
        record = self._change_run(run_id, lambda r: lease_taken(r, owner, ttl, time.time()))
        return record.lease_epoch

    def renew_lease(self, run_id: str, owner: str, epoch: int, ttl: float) -> None:
        """Extend a held lease by ``ttl`` seconds from now, or raise ``LeaseLostError``."""
        self._change_run(run_id, lambda r: lease_renewed(r, owner, epoch, ttl, time.time()))

    def release_lease(self, run_id: str, owner: str, epoch: int) -> None:
        """Give the lease up (no error when it was already lost or the run is gone)."""
        with contextlib.suppress(LookupError):
            self._change_run(run_id, lambda r: lease_released(r, owner, epoch))

    def cancel(self, run_id: str, *, reason: str, by: str) -> RunRecord:
        """See :meth:`redrive.storage.Journal.cancel` (and :func:`cancel_run`)."""
        return cancel_run(cast(Journal, self), run_id, reason=reason, by=by)


def cancel_run(journal: Journal, run_id: str, *, reason: str, by: str) -> RunRecord:
    """End the run ``cancelled`` in ``journal``: a conditional append, retried on a race.

    Every writable backend's :meth:`Journal.cancel`. The ``run_end`` frame is
    written under the run's current lease epoch, so it overrides a worker
    holding the lease; that worker's next append finds the run terminal.

    Returns:
        The run's row after the cancel.

    Raises:
        As :meth:`Journal.cancel`.
    """
    if not reason or not by:
        raise ValueError("cancel needs a reason and who cancels (by): both non-empty")
    reason, by = scrubbed_text(reason), scrubbed_text(by)
    while True:
        record = journal.get_run(run_id)
        if record is None:
            raise unknown_run(run_id)
        if RunStatus(record.status).terminal:
            raise TerminalRunError(
                f"run {run_id!r} already ended with status {record.status}"
                + (f" ({record.error})" if record.error else "")
                + "; there is nothing to cancel and nothing was changed.",
                run_id=run_id,
                seq=record.next_seq,
                status=record.status,
            )
        frame = cancel_frame(record, reason=reason, by=by)
        try:
            journal.append(
                run_id,
                [frame],
                expected_seq=record.next_seq,
                update=RunUpdate(status=RunStatus.CANCELLED.value, error=cancel_text(reason, by)),
                epoch=record.lease_epoch,
            )
        except (AppendConflictError, LeaseLostError):
            continue  # a worker appended or took the lease meanwhile: read again
        after = journal.get_run(run_id)
        assert after is not None
        return after


def lease_taken(record: RunRecord, owner: str, ttl: float, now: float) -> RunRecord:
    """Return ``record`` with the lease given to ``owner`` (epoch + 1) for ``ttl`` seconds.

    Shared by every backend, which call it inside their own transaction.

    Raises:
        RunBusyError: another owner holds a lease that has not expired.
    """
    from ..errors import RunBusyError

    if (
        record.lease_owner is not None
        and record.lease_owner != owner
        and record.lease_expires is not None
        and record.lease_expires > now
    ):
        raise RunBusyError(
            f"run {record.run_id!r} is leased by {record.lease_owner!r} for another "
            f"{record.lease_expires - now:.1f} s (epoch {record.lease_epoch}): another worker is "
            "executing it, or died and its lease has not lapsed yet. Retry after that, or pass "
            "on_busy='wait' to wait for it.",
            run_id=record.run_id,
            seq=record.next_seq,
            owner=record.lease_owner,
            expires_in=record.lease_expires - now,
        )
    return attrs.evolve(
        record,
        lease_owner=owner,
        lease_epoch=record.lease_epoch + 1,
        lease_expires=now + ttl,
        updated_at=now,
    )


def _by_holder(record: RunRecord) -> str:
    """Who holds the lease now, for a message ("by 'w2' (epoch 3)"; a released one says so)."""
    if record.lease_owner is None:
        return f"(epoch {record.lease_epoch}, since released by the worker that took it over)"
    return f"by {record.lease_owner!r} (epoch {record.lease_epoch})"


def lease_renewed(record: RunRecord, owner: str, epoch: int, ttl: float, now: float) -> RunRecord:
    """Return ``record`` with the lease extended, or raise ``LeaseLostError``."""
    if record.lease_owner != owner or record.lease_epoch != epoch:
        raise LeaseLostError(
            f"run {record.run_id!r}: lease epoch {epoch} of {owner!r} was taken over "
            f"{_by_holder(record)}; stop this worker's loop.",
            run_id=record.run_id,
            seq=record.next_seq,
            epoch=epoch,
            current_epoch=record.lease_epoch,
        )
    return attrs.evolve(record, lease_expires=now + ttl)


def lease_released(record: RunRecord, owner: str, epoch: int) -> RunRecord:
    """Return ``record`` without the lease when ``(owner, epoch)`` still holds it."""
    if record.lease_owner != owner or record.lease_epoch != epoch:
        return record
    return attrs.evolve(record, lease_owner=None, lease_expires=None)


def after_append(
    record: RunRecord, frames: Sequence[Frame], update: RunUpdate | None, now: float
) -> RunRecord:
    """Return the run row as it stands after a validated append."""
    changes: dict[str, Any] = {"updated_at": now}
    if frames:
        changes["next_seq"] = frames[-1].seq + 1
        changes["last_chain"] = frames[-1].chain
    if update is not None:
        if update.status is not None:
            changes["status"] = update.status
        if update.output is not None:
            changes["output"] = update.output
        if update.error is not None:
            changes["error"] = update.error
    return attrs.evolve(record, **changes)
