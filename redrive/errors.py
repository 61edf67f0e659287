"""Errors raised by redrive.

Every error is a :class:`ReplayError`; where it is also a standard error, it
subclasses that too, so ``except LookupError`` keeps working::

    ReplayError (Exception)
    ├── DivergenceError                 the replayed loop asked for a different step
    │                                   (.reason: a DivergenceReason)
    ├── ReplayMissError (LookupError)   replay-only run asked for a step nobody recorded
    ├── SideEffectRetryBlockedError     an in-flight side effect would run twice
    │   └── RetryLimitExceededError     an in-flight step was attempted too often
    ├── RunBusyError                    another worker holds the run or claimed the step
    │   │                               (.reason: a RunBusyReason)
    │   └── LeaseLostError              this worker's lease was taken over (fenced)
    ├── AppendConflictError             a conditional append lost its race
    ├── RunInputMismatchError (ValueError)
    ├── UnknownRunError (LookupError)
    ├── TerminalRunError                the run already ended
    ├── JournalCorruptError             a journal failed its integrity checks
    ├── JournalFormatError              a journal of another format version
    ├── JournalLockedError              a DuckDB file in use by another process
    ├── JournalWriteError               a write failed (disk full, I/O error, connection lost)
    └── RecordedToolError               a recorded tool exception that cannot be rebuilt

Each error carries structured fields besides its message: ``run_id`` and
``seq`` on every error, and the typed keyword fields of its class (``diff``,
``expected``, ``found``...; None when the raiser did not know them). They are
attributes (``err.diff``), are listed by ``err.fields`` (a dict, without
``run_id`` and ``seq``) and ``err.to_fields()`` (with them), and the error
pickles with all of them (so it crosses process pools).
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "AppendConflictError",
    "DivergenceError",
    "DivergenceReason",
    "JournalCorruptError",
    "JournalFormatError",
    "JournalLockedError",
    "JournalWriteError",
    "LeaseLostError",
    "RecordedToolError",
    "ReplayError",
    "ReplayMissError",
    "RetryLimitExceededError",
    "RunBusyError",
    "RunBusyReason",
    "RunInputMismatchError",
    "SideEffectRetryBlockedError",
    "TerminalRunError",
    "UnknownRunError",
]

#: The step name of approvals (``redrive.replay._approval.APPROVAL_STEP``; errors
#: imports nothing of ours, so the name is repeated here to tell the case apart).
_APPROVAL_STEP = "approval"


class ReplayError(Exception):
    """Root of every redrive error.

    Args:
        message: the human-readable text (what happened, to which run, what next).
        run_id: the run concerned, when there is one.
        seq: the seq concerned (of the step, or the first one written), when known.
        **fields: the subclass's structured fields, set as attributes. The
            errors of this module take explicit typed keywords instead; this
            is for subclasses defined elsewhere.
    """

    run_id: str | None
    seq: int | None

    def __init__(
        self, message: str, *, run_id: str | None = None, seq: int | None = None, **fields: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.seq = seq
        self._fields = fields
        for name, value in fields.items():
            setattr(self, name, value)

    @property
    def fields(self) -> dict[str, Any]:
        """The error's own structured fields (a new dict), without ``run_id`` and ``seq``."""
        return dict(self._fields)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.to_fields()))

    def to_fields(self) -> dict[str, Any]:
        """Return the structured fields (``run_id``, ``seq`` and the error's own)."""
        return {"run_id": self.run_id, "seq": self.seq, **self._fields}

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[ReplayError], message: str, fields: dict[str, Any]) -> ReplayError:
    err = cls.__new__(cls)
    ReplayError.__init__(err, message, **fields)
    return err


class DivergenceReason(enum.StrEnum):
    """Which kind of divergence a :class:`DivergenceError` reports (a ``str``)."""

    ARGUMENTS = "arguments"
    """The loop asked for the recorded step (same kind and name) with other arguments."""
    STEP = "step"
    """The loop asked for another step (kind or name) than the journal has there."""
    TURN_ORDER = "turn_order"
    """The loop asked for a model step while a tool or value step recorded before it
    (in its turn) was not asked for yet."""
    UNUSED_STEPS = "unused_steps"
    """The loop finished with recorded steps left that it did not ask for."""
    STREAM_OVERRUN = "stream_overrun"
    """The loop read a replayed stream past where it stopped reading when recorded."""
    APPROVAL_PAYLOAD = "approval_payload"
    """An approval was decided for another payload than the loop asks for now."""


def _divergence_reason(
    seq: int | None,
    kind: str | None,
    name: str | None,
    found_kind: str | None,
    found_name: str | None,
    context: list[str] | None,
) -> DivergenceReason:
    """Tell the case apart from the fields its raiser gives (when it names none)."""
    if found_kind is None and found_name is None:
        # nothing was asked for: the loop ended (context: the steps left) or read on
        return DivergenceReason.STREAM_OVERRUN if context is None else DivergenceReason.UNUSED_STEPS
    if seq is None and kind == "value" and name == _APPROVAL_STEP:
        return DivergenceReason.APPROVAL_PAYLOAD
    if kind == found_kind and name == found_name:
        return DivergenceReason.ARGUMENTS
    if found_kind == "model" and kind in ("tool", "value"):
        return DivergenceReason.TURN_ORDER
    return DivergenceReason.STEP


class DivergenceError(ReplayError):
    """The replayed loop asked for a step that differs from the recorded one.

    Args:
        message: what diverged, where, and what to do.
        run_id: the run.
        seq: the seq of the recorded step (None for an approval).
        kind: the recorded step's kind (``"model"``, ``"tool"``, ``"value"``).
        name: the recorded step's name.
        found_kind: the kind of the step asked for (None: none was asked for).
        found_name: the name of the step asked for (None: none was asked for).
        expected: the recorded canonical arguments.
        found: the canonical arguments asked for now.
        expected_key: the recorded step's call key.
        found_key: the call key of the step asked for.
        diff: ``(path, recorded, replayed)`` for each differing leaf.
        context: the last matching steps (or the unused ones), as text lines.
        reason: which case this is; derived from the other fields when None.
    """

    kind: str | None
    name: str | None
    found_kind: str | None
    found_name: str | None
    expected: Any
    found: Any
    expected_key: str | None
    found_key: str | None
    diff: list[tuple[str, Any, Any]] | None
    context: list[str] | None
    reason: DivergenceReason

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        kind: str | None = None,
        name: str | None = None,
        found_kind: str | None = None,
        found_name: str | None = None,
        expected: Any = None,
        found: Any = None,
        expected_key: str | None = None,
        found_key: str | None = None,
        diff: list[tuple[str, Any, Any]] | None = None,
        context: list[str] | None = None,
        reason: DivergenceReason | str | None = None,
    ) -> None:
        super().__init__(
            message,
            run_id=run_id,
            seq=seq,
            kind=kind,
            name=name,
            found_kind=found_kind,
            found_name=found_name,
            expected=expected,
            found=found,
            expected_key=expected_key,
            found_key=found_key,
            diff=diff,
            context=context,
            reason=DivergenceReason(reason)
            if reason is not None
            else _divergence_reason(seq, kind, name, found_kind, found_name, context),
        )


class ReplayMissError(ReplayError, LookupError):
    """A replay-only run asked for a step that no recorded step answers.

    Args:
        message: which step was asked for, and the closest recorded ones.
        run_id: the run.
        seq: the seq the step would have had.
        kind: the kind of the step asked for.
        name: the name of the step asked for.
        found: its canonical arguments.
        closest: text lines describing the nearest recorded steps.
    """

    kind: str | None
    name: str | None
    found: Any
    closest: list[str] | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        kind: str | None = None,
        name: str | None = None,
        found: Any = None,
        closest: list[str] | None = None,
    ) -> None:
        super().__init__(
            message, run_id=run_id, seq=seq, kind=kind, name=name, found=found, closest=closest
        )


class SideEffectRetryBlockedError(ReplayError):
    """A tool that was in flight when the run stopped would run a second time.

    Raised on resume for a tool whose ``tool_start`` is journaled without an
    outcome, unless it is restart safe, its ``recover()`` settled the outcome,
    or the run asked for ``on_in_flight="tell_model"``.

    Args:
        message: which call is blocked and how to settle it.
        run_id: the run.
        seq: the seq of the in-flight ``tool_start``.
        tool: the tool's name.
        arguments: the call's canonical arguments.
        idempotency_key: the step's idempotency key.
        attempts: how often the step was attempted.
    """

    tool: str | None
    arguments: Any
    idempotency_key: str | None
    attempts: int | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        tool: str | None = None,
        arguments: Any = None,
        idempotency_key: str | None = None,
        attempts: int | None = None,
    ) -> None:
        super().__init__(
            message,
            run_id=run_id,
            seq=seq,
            tool=tool,
            arguments=arguments,
            idempotency_key=idempotency_key,
            attempts=attempts,
        )


class RetryLimitExceededError(SideEffectRetryBlockedError):
    """An in-flight step was attempted more often than the run allows."""


class RunBusyReason(enum.StrEnum):
    """Why a :class:`RunBusyError` was raised (a ``str``)."""

    LEASED = "leased"
    """Another worker holds the run's unexpired lease (``owner``)."""
    CLAIMED = "claimed"
    """Another worker wrote this run (a claim, a step, its end) while this one ran it."""
    TIMED_OUT = "timed_out"
    """Another worker's claimed step got no outcome within ``busy_timeout``."""
    LOCKED = "locked"
    """A run row stayed locked by another connection past ``lock_timeout``."""
    LEASE_LOST = "lease_lost"
    """This worker's lease was taken over (:class:`LeaseLostError`)."""


class RunBusyError(ReplayError):
    """Another worker holds this run's lease or has claimed this step.

    Args:
        message: who holds what, and what to do.
        run_id: the run (None for a lock timeout).
        seq: the run's next seq, or the seq that was claimed.
        owner: the lease holder.
        expires_in: seconds until that lease lapses.
        timed_out: True when this worker waited ``busy_timeout`` in vain.
        lock_timeout: the journal's lock timeout in seconds, when it ran out.
        reason: which case this is; derived from the other fields when None.
    """

    owner: str | None
    expires_in: float | None
    timed_out: bool
    lock_timeout: float | None
    reason: RunBusyReason

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        owner: str | None = None,
        expires_in: float | None = None,
        timed_out: bool = False,
        lock_timeout: float | None = None,
        reason: RunBusyReason | str | None = None,
    ) -> None:
        if reason is None:
            reason = (
                RunBusyReason.LOCKED
                if lock_timeout is not None
                else RunBusyReason.TIMED_OUT
                if timed_out
                else RunBusyReason.LEASED
                if owner is not None
                else RunBusyReason.CLAIMED
            )
        super().__init__(
            message,
            run_id=run_id,
            seq=seq,
            owner=owner,
            expires_in=expires_in,
            timed_out=timed_out,
            lock_timeout=lock_timeout,
            reason=RunBusyReason(reason),
        )


class LeaseLostError(RunBusyError):
    """This worker's lease expired and another worker took the run over.

    Every later write of this worker is refused (fencing): stop the loop.

    Args:
        message: who took the run over.
        run_id: the run.
        seq: the run's next seq.
        epoch: this worker's lease epoch.
        current_epoch: the run's lease epoch now.
        owner, expires_in, timed_out, lock_timeout: as :class:`RunBusyError`
            (unset by redrive's raisers).
        reason: :attr:`RunBusyReason.LEASE_LOST` unless given.
    """

    epoch: int | None
    current_epoch: int | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        epoch: int | None = None,
        current_epoch: int | None = None,
        owner: str | None = None,
        expires_in: float | None = None,
        timed_out: bool = False,
        lock_timeout: float | None = None,
        reason: RunBusyReason | str | None = None,
    ) -> None:
        ReplayError.__init__(
            self,
            message,
            run_id=run_id,
            seq=seq,
            owner=owner,
            expires_in=expires_in,
            timed_out=timed_out,
            lock_timeout=lock_timeout,
            reason=RunBusyReason(reason or RunBusyReason.LEASE_LOST),
            epoch=epoch,
            current_epoch=current_epoch,
        )


class AppendConflictError(ReplayError):
    """A conditional append found another frame already at its seq.

    Args:
        message: which seq was taken.
        run_id: the run.
        seq: the seq that was expected to be next.
        found: the journal's actual next seq.
    """

    found: int | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        found: int | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, seq=seq, found=found)


class RunInputMismatchError(ReplayError, ValueError):
    """A run was resumed with a different input than it was started with.

    Args:
        message: how the inputs differ.
        run_id: the run.
        seq: unused (None).
        expected: the recorded input.
        found: the input given now.
        diff: ``(path, recorded, given)`` for each differing leaf.
    """

    expected: Any
    found: Any
    diff: list[tuple[str, Any, Any]] | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        expected: Any = None,
        found: Any = None,
        diff: list[tuple[str, Any, Any]] | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, seq=seq, expected=expected, found=found, diff=diff)


class UnknownRunError(ReplayError, LookupError):
    """No run with this id is in the journal.

    Args:
        message: which run, in which journal.
        run_id: the run id looked for.
        seq: unused (None).
    """

    def __init__(self, message: str, *, run_id: str | None = None, seq: int | None = None) -> None:
        super().__init__(message, run_id=run_id, seq=seq)


class TerminalRunError(ReplayError):
    """The run already ended (failed or cancelled) and cannot execute again.

    Args:
        message: how the run ended.
        run_id: the run.
        seq: unused (None).
        status: the run's terminal status (``"failed"``, ``"cancelled"``).
    """

    status: str | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        status: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, seq=seq, status=status)


class JournalCorruptError(ReplayError):
    """A journal failed an integrity check: bad bytes, chain or order.

    Args:
        message: what is wrong, where, and the last good seq.
        run_id: the run whose frames are bad, when known.
        seq: the bad frame's seq, when known.
        last_good_seq: the last frame that passed its checks (None when not
            even the first frame could be read).
        source: the file or table read.
        reason: a short word naming the failed check (``"chain"``, ``"seq"``,
            ``"checksum"``, ``"truncated"``, ``"magic"``, ``"decode"``...).
        offset: the byte offset of the bad record in ``source``.
        record_index: the 0-based index of the bad record in a journal log.
        next_record_offset: the byte offset of the record after it.
    """

    last_good_seq: int | None
    source: str | None
    reason: str | None
    offset: int | None
    record_index: int | None
    next_record_offset: int | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        last_good_seq: int | None = None,
        source: str | None = None,
        reason: str | None = None,
        offset: int | None = None,
        record_index: int | None = None,
        next_record_offset: int | None = None,
    ) -> None:
        super().__init__(
            message,
            run_id=run_id,
            seq=seq,
            last_good_seq=last_good_seq,
            source=source,
            reason=reason,
            offset=offset,
            record_index=record_index,
            next_record_offset=next_record_offset,
        )


class JournalFormatError(ReplayError):
    """A journal was written by a format version this redrive cannot read.

    Args:
        message: which version, and what to upgrade.
        run_id: unused (None).
        seq: unused (None).
        found: the journal's format version (as stored, when it is not a number).
        expected: the version this redrive writes.
        supported: the newest version this redrive reads.
        too: ``"new"`` or ``"old"``: which side of ``expected`` ``found`` is.
        source: the file read.
        path: the file that is not a journal of this format at all.
    """

    found: int | str | None
    expected: int | None
    supported: int | None
    too: str | None
    source: str | None
    path: str | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        found: int | str | None = None,
        expected: int | None = None,
        supported: int | None = None,
        too: str | None = None,
        source: str | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(
            message,
            run_id=run_id,
            seq=seq,
            found=found,
            expected=expected,
            supported=supported,
            too=too,
            source=source,
            path=path,
        )


class JournalLockedError(ReplayError):
    """A DuckDB journal file is open for writing in another process.

    Args:
        message: which file, and what to do.
        run_id: unused (None).
        seq: unused (None).
        path: the journal file.
    """

    path: str | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, seq=seq, path=path)


class JournalWriteError(ReplayError):
    """A journal write failed for a reason outside redrive (disk full, I/O error,
    lost database connection). The underlying error is its ``__cause__``.

    The run stays resumable: nothing from ``seq`` on was acknowledged, so a
    tool whose claim failed did not run. (With a lost connection the write may
    still have committed; a resume then finds that claim in flight and applies
    the in-flight rules, which fail closed.)

    Args:
        message: what failed, and that the run stays resumable.
        run_id: the run.
        seq: the first seq of the failed write.
        journal: the journal's URL.
        frames: how many frames the write held.
    """

    journal: str | None
    frames: int | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        journal: str | None = None,
        frames: int | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, seq=seq, journal=journal, frames=frames)


class RecordedToolError(ReplayError):
    """A tool raised during recording, and its exception type cannot be rebuilt.

    Args:
        message: the recorded exception, named.
        run_id: the run.
        seq: the seq of the tool's outcome.
        tool: the tool's name.
        error_type: the recorded exception's ``module.QualName``.
        error_message: its message.
    """

    tool: str | None
    error_type: str | None
    error_message: str | None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        tool: str | None = None,
        error_type: str | None = None,
        error_message: str | None = None,
    ) -> None:
        super().__init__(
            message,
            run_id=run_id,
            seq=seq,
            tool=tool,
            error_type=error_type,
            error_message=error_message,
        )
