"""The checks of the write path every backend runs: fencing, size, seq and chain, ended runs.

Each backend calls these inside its own transaction or lock, on the run row
it just read, and gets the row after the write from :func:`after_append`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._advice import after_end_advice
from ..errors import (
    AppendConflictError,
    JournalWriteError,
    LeaseLostError,
    TerminalRunError,
    UnknownRunError,
)
from ..frames import ChainCheck, Frame
from ._limits import MAX_VALUE
from ._records import RunRecord, RunStatus, RunUpdate
from ._validate import frame_problem, passed_as_moved, run_problem


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
    after = after_append(record, frames, update, time.time())
    if not passed_as_moved(after, record):  # a row moved past frames is checked cheaply
        _check_row(after, expected_seq + len(frames))
    return after


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
        ValueError: frames that are not dense, of another run, or mis-chained, or a
            frame or run row that no journal could store and read back
            (:func:`~._validate.frame_problem`, :func:`~._validate.run_problem`):
            the journal never acknowledges what it cannot read back.
    """
    _check_row(record, expected_seq)
    for frame in frames:
        problem = frame_problem(frame)
        if problem is not None:
            raise ValueError(
                f"run {record.run_id!r}: frame seq {frame.seq} ({frame.kind} {frame.name!r}) "
                f"cannot be journaled: {problem}; nothing of this write was journaled"
            )
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


def _check_row(record: RunRecord, seq: int) -> None:
    """Refuse a run row that no journal could store and read back (``ValueError``)."""
    problem = run_problem(record)
    if problem is not None:
        raise ValueError(
            f"run {record.run_id!r} seq {seq}: the run's row cannot be journaled: {problem}; "
            "nothing of this write was journaled"
        )


def _by_holder(record: RunRecord) -> str:
    """Who holds the lease now, for a message ("by 'w2' (epoch 3)"; a released one says so)."""
    if record.lease_owner is None:
        return f"(epoch {record.lease_epoch}, since released by the worker that took it over)"
    return f"by {record.lease_owner!r} (epoch {record.lease_epoch})"


def after_append(
    record: RunRecord, frames: Sequence[Frame], update: RunUpdate | None, now: float
) -> RunRecord:
    """Return the run row as it stands after a validated append.

    Built field by field rather than by ``attrs.evolve`` (every claim makes one;
    evolve introspects the class each time); ``tests/unit/test_after_append.py``
    holds that every field of :class:`RunRecord` is carried over.
    """
    at = update.updated_at if update is not None and update.updated_at is not None else now
    status, output, error = record.status, record.output, record.error
    if update is not None:
        if update.status is not None:
            status = update.status
        if update.output is not None:
            output = update.output
        if update.error is not None:
            error = update.error
    last = frames[-1] if frames else None
    return RunRecord(
        run_id=record.run_id,
        status=status,
        next_seq=record.next_seq if last is None else last.seq + 1,
        last_chain=record.last_chain if last is None else last.chain,
        input_fp=record.input_fp,
        entrypoint=record.entrypoint,
        created_at=record.created_at,
        updated_at=at,
        output=output,
        error=error,
        lease_owner=record.lease_owner,
        lease_epoch=record.lease_epoch,
        lease_expires=record.lease_expires,
    )
