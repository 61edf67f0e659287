"""Errors raised by redrive.

Every error is a :class:`ReplayError`; where it is also a standard error, it
subclasses that too, so ``except LookupError`` keeps working::

    ReplayError (Exception)
    ├── DivergenceError                 the replayed loop asked for a different step
    │                                   (.reason: a DivergenceReason)
    ├── ReplayMissError (LookupError)   replay-only run asked for a step nobody recorded
    ├── SideEffectRetryBlockedError     an in-flight side effect would run twice
    │   └── RetryLimitExceededError     an in-flight step was attempted too often
    ├── BudgetExceededError             a run's max_tokens / max_cost was reached before
    │                                   a live model call (resumable)
    ├── RunBusyError                    another worker holds the run or claimed the step
    │   │                               (.reason: a RunBusyReason)
    │   └── LeaseLostError              this worker's lease was taken over (fenced)
    ├── AppendConflictError             a conditional append lost its race
    ├── RunInputMismatchError (ValueError)
    ├── UnknownRunError (LookupError)
    ├── TerminalRunError                the run already ended
    ├── RunEndedError (RuntimeError)    a step, note or write after the run's block ended
    ├── JournalCorruptError             a journal failed its integrity checks
    ├── JournalFormatError              a journal of another format version
    ├── JournalLockedError              a DuckDB file in use by another process
    ├── JournalWriteError               a write failed (disk full, I/O error, connection lost)
    ├── RecordedToolError               a recorded tool exception that cannot be rebuilt
    └── LostRunContextError (RuntimeError) a step called from a thread that lost its run,
                                        with several runs active (ambiguous)

Each error carries structured fields besides its message: ``run_id`` and
``seq`` on every error, and the typed fields its class declares (``diff``,
``expected``, ``found``...), given as keywords and None when the raiser did
not know them. They are attributes (``err.diff``), are listed by
``err.fields`` (a dict, without ``run_id`` and ``seq``) and ``err.to_fields()``
(with them), and the error pickles with all of them (so it crosses process
pools). A keyword that is not a field of the class is a ``TypeError``, for
mypy and at run time.
"""

from __future__ import annotations

import enum
from typing import Any

from ._errorbase import NextStep, NextStepAction, ReplayError, _field, _fields
from ._journalerrors import (
    JournalCorruptError,
    JournalFormatError,
    JournalLockedError,
    JournalWriteError,
)

__all__ = [
    "AppendConflictError",
    "BudgetExceededError",
    "DivergenceError",
    "DivergenceReason",
    "JournalCorruptError",
    "JournalFormatError",
    "JournalLockedError",
    "JournalWriteError",
    "LeaseLostError",
    "NextStep",
    "NextStepAction",
    "RecordedToolError",
    "ReplayError",
    "ReplayMissError",
    "RetryLimitExceededError",
    "RunBusyError",
    "RunBusyReason",
    "RunEndedError",
    "RunInputMismatchError",
    "SideEffectRetryBlockedError",
    "TerminalRunError",
    "UnknownRunError",
]

#: The step name of approvals (``redrive.replay._approval.APPROVAL_STEP``; errors
#: imports nothing of ours, so the name is repeated here to tell the case apart).
_APPROVAL_STEP = "approval"


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
    OUTCOME = "outcome"
    """A tool run live on replay (``live_tools``) returned or raised other than recorded."""


@_fields
class DivergenceError(ReplayError):
    """The replayed loop asked for a step that differs from the recorded one.

    ``seq`` is the recorded step's (None for an approval).

    Attributes:
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
        reason: which case this is; derived from the other fields when not given.
        caller: where the user's code asked for the drifted step, as
            ``"path/to/file.py:42 in function"`` (the first frame outside
            redrive, the standard library and installed packages), or None
            when it cannot be told (a step issued from a worker thread).

    What to do: an intended change: ``redrive check --update --write`` (saved runs) or
    ``ReplayPolicy(on_drift="continue_live")`` (live runs); else fix the code. See
    ``next_steps``.
    """

    kind: str | None = None
    name: str | None = None
    found_kind: str | None = None
    found_name: str | None = None
    expected: Any = None
    found: Any = None
    expected_key: str | None = None
    found_key: str | None = None
    diff: list[tuple[str, Any, Any]] | None = None
    context: list[str] | None = None
    reason: DivergenceReason = _field(default=None)
    caller: str | None = None

    def _settle(self, fields: dict[str, Any]) -> None:
        if fields["reason"] is not None:
            fields["reason"] = DivergenceReason(fields["reason"])
        elif fields["found_kind"] is None and fields["found_name"] is None:
            # nothing was asked for: the loop ended (context: the steps left) or read on
            unused = fields["context"] is not None
            fields["reason"] = (
                DivergenceReason.UNUSED_STEPS if unused else DivergenceReason.STREAM_OVERRUN
            )
        elif self.seq is None and (fields["kind"], fields["name"]) == ("value", _APPROVAL_STEP):
            fields["reason"] = DivergenceReason.APPROVAL_PAYLOAD
        elif (fields["kind"], fields["name"]) == (fields["found_kind"], fields["found_name"]):
            fields["reason"] = DivergenceReason.ARGUMENTS
        elif fields["found_kind"] == "model" and fields["kind"] in ("tool", "value"):
            fields["reason"] = DivergenceReason.TURN_ORDER
        else:
            fields["reason"] = DivergenceReason.STEP


@_fields
class ReplayMissError(ReplayError, LookupError):
    """A replay-only run asked for a step that no recorded step answers.

    ``seq`` is the one the step would have had.

    Attributes:
        kind: the kind of the step asked for.
        name: the name of the step asked for.
        found: its canonical arguments.
        closest: text lines describing the nearest recorded steps.

    What to do: record the step (``--redrive-record-mode=rewrite`` for a test), or replay with
    ``live=True``; ``closest`` shows what was recorded.
    """

    kind: str | None = None
    name: str | None = None
    found: Any = None
    closest: list[str] | None = None


@_fields
class SideEffectRetryBlockedError(ReplayError):
    """A tool that was in flight when the run stopped would run a second time.

    Raised on resume for a tool whose ``tool_start`` (at ``seq``) is journaled
    without an outcome, unless it is restart safe, its ``recover()`` settled
    the outcome, or the run asked for ``on_in_flight="tell_model"``.

    Attributes:
        tool: the tool's name.
        arguments: the call's canonical arguments.
        idempotency_key: the step's idempotency key.
        attempts: how often the step was attempted.

    What to do: check the external system, then ``redrive resolve RUN SEQ --done RESULT_JSON``
    or ``--not-done --reason TEXT``; for later runs a ``recover()``.
    """

    tool: str | None = None
    arguments: Any = None
    idempotency_key: str | None = None
    attempts: int | None = None


@_fields
class RetryLimitExceededError(SideEffectRetryBlockedError):
    """An in-flight step was attempted more often than the run allows.

    What to do: find why the step keeps dying (``redrive show RUN``), then settle it with
    ``redrive resolve``.
    """


@_fields
class BudgetExceededError(ReplayError):
    """A run's budget (``max_tokens`` or ``max_cost``) was reached before a live model call.

    Raised before the call goes out (nothing is billed for it); ``seq`` is the
    seq the call would have had. The run is left resumable: its spend is read
    from its journal, so a resume with the same budget stops at the same
    place, and a resume with a larger one continues from here (replayed steps
    are not charged again).

    Attributes:
        limit_kind: ``"tokens"`` (input + output) or ``"cost"`` (at the run's prices).
        used: what the run's live model calls used so far, across its executions.
        limit: the run's limit.
        step: the model step that was about to be called.

    What to do: the run is paused (kind ``budget``): resume it with a larger budget
    (``max_tokens=`` / ``max_cost=`` of ``redrive.run``), or leave it.
    """

    limit_kind: str | None = None
    used: float | None = None
    limit: float | None = None
    step: str | None = None


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
    OPEN_HERE = "open_here"
    """The run is already open in another ``with redrive.run(...)`` block of this process
    (``where`` names it)."""


@_fields
class RunBusyError(ReplayError):
    """Another worker holds this run's lease or has claimed this step.

    ``seq`` is the run's next seq, or the seq that was claimed.

    Attributes:
        owner: the lease holder.
        expires_in: seconds until that lease lapses.
        timed_out: True when this worker waited ``busy_timeout`` in vain.
        lock_timeout: the journal's lock timeout in seconds, when it ran out.
        where: for :attr:`RunBusyReason.OPEN_HERE`, where the run is already
            open in this process (thread, task, and the ``with`` line).
        reason: which case this is; derived from the other fields when not given.

    What to do: usually nothing (another worker runs it); ``on_busy="wait"`` waits for it; a
    dead worker's run is taken over when its lease lapses.
    """

    owner: str | None = None
    expires_in: float | None = None
    timed_out: bool = False
    lock_timeout: float | None = None
    where: str | None = None
    reason: RunBusyReason = _field(default=None)

    def _settle(self, fields: dict[str, Any]) -> None:
        if fields["reason"] is not None:
            fields["reason"] = RunBusyReason(fields["reason"])
        elif fields["lock_timeout"] is not None:
            fields["reason"] = RunBusyReason.LOCKED
        elif fields["timed_out"]:
            fields["reason"] = RunBusyReason.TIMED_OUT
        else:
            leased = fields["owner"] is not None
            fields["reason"] = RunBusyReason.LEASED if leased else RunBusyReason.CLAIMED


@_fields
class LeaseLostError(RunBusyError):
    """This worker's lease expired and another worker took the run over.

    Every later write of this worker is refused (fencing): stop the loop. Its
    ``reason`` is :attr:`RunBusyReason.LEASE_LOST`.

    Attributes:
        epoch: this worker's lease epoch.
        current_epoch: the run's lease epoch now.

    What to do: stop this loop (the new holder settles the step); lengthen ``lease=`` if workers
    freeze that long.
    """

    epoch: int | None = None
    current_epoch: int | None = None

    def _settle(self, fields: dict[str, Any]) -> None:
        fields["reason"] = RunBusyReason(fields["reason"] or RunBusyReason.LEASE_LOST)


@_fields
class AppendConflictError(ReplayError):
    """A conditional append found another frame already at its seq (``seq``: the expected one).

    Attributes:
        found: the journal's actual next seq.

    What to do: re-open the run so it reads what the other writer appended.
    """

    found: int | None = None


@_fields
class RunInputMismatchError(ReplayError, ValueError):
    """A run was resumed with a different input than it was started with.

    Attributes:
        expected: the recorded input.
        found: the input given now.
        diff: ``(path, recorded, given)`` for each differing leaf.

    What to do: give each job its own run id (the job's, not a session's), or resume with
    ``expected``.
    """

    expected: Any = None
    found: Any = None
    diff: list[tuple[str, Any, Any]] | None = None


@_fields
class UnknownRunError(ReplayError, LookupError):
    """No run with this id (``run_id``) is in the journal.

    What to do: check the id and the journal (``redrive runs``); ``create=True`` starts it.
    """


@_fields
class TerminalRunError(ReplayError):
    """The run already ended (failed or cancelled) and cannot execute again.

    Attributes:
        status: the run's terminal status (``"failed"``, ``"cancelled"``).

    What to do: replay it with ``live=False``, or fork it after its last side-effecting step.
    """

    status: str | None = None


@_fields
class RunEndedError(ReplayError, RuntimeError):
    """A step, note or write reached a Run whose ``with`` block had already ended.

    Nothing was written: a run accepts nothing after its block exits (after its
    ``run_end``, or after an interruption left it resumable), from any thread or
    asyncio task. A step asked for after the end did not run (no tool body, no model
    call). An outcome refused after the end (a ``tool_done``, ``tool_error`` or
    ``model_response`` of a call begun before it) answers a call that did run: the
    message says so, and the journal keeps that step in flight (a resume applies the
    in-flight rules). ``seq`` is the run's next seq when it ended.

    Attributes:
        status: the run's status when its block ended (``"succeeded"``, ``"running"``...).
        step: what was refused: ``"tool 'charge'"``, ``"note 'progress'"``,
            ``"tool_done of seq 4"``...
        thread: the name of the thread that asked.

    What to do: end a run's threads and tasks inside its block (``redrive.executor()``, await
    them).
    """

    status: str | None = None
    step: str | None = None
    thread: str | None = None


@_fields
class RecordedToolError(ReplayError):
    """A tool raised during recording, and its exception type cannot be rebuilt.

    Attributes:
        tool: the tool's name.
        error_type: the recorded exception's ``module.QualName``.
        error_message: its message.

    What to do: import the module defining ``error_type`` before replaying.
    """

    tool: str | None = None
    error_type: str | None = None
    error_message: str | None = None


@_fields
class LostRunContextError(ReplayError, RuntimeError):
    """A step was called from a thread that lost its run's context, with several runs active.

    Which run it belongs to is ambiguous, so it joins none.

    Nothing ran: the call fails closed rather than execute unrecorded. Fields:
    ``run_ids`` (the active runs, sorted), ``thread`` (the calling thread's
    name), ``step`` (``"tool 'charge_card'"``, ``"model 'model:plan'"``...).

    What to do: start threads with ``redrive.executor()``; wrap run-less code in
    ``redrive.outside_run()``.
    """

    run_ids: tuple[str, ...] | None = None
    thread: str | None = None
    step: str | None = None
