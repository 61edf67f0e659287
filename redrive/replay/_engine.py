"""The step engine: pure decisions, no I/O, no clock, no sleeping.

A model or value step is replayed when the journal answers it, else it goes
live (:func:`decide_model`, :func:`decide_value`). Tools need more: given
what the run knows when the loop asks for a tool step (the recorded
step it matched, the tool's resume behaviour, whether the run may write, the
age of a claim...), :func:`decide_tool` returns what to do: hand back the
recorded outcome, claim the step and go live, wait for (or stop because of)
a worker that holds it, or settle an in-flight step (:func:`decide_in_flight`:
re-run it, ask its ``recover()``, block it, or stop at the attempt limit).
The Run carries the decision out (journal writes, waits, the user's hooks).

:class:`~._operations.OperationLedger` (not here: it keeps state) decides which
idempotency key a tool call gets.

:func:`decide_drift` decides what a live run does when a model step's request
drifted from its record under ``ReplayPolicy(on_drift="continue_live")``:
re-ask it live (superseding the recorded step), or diverge.
"""

from __future__ import annotations

from typing import TypeGuard

import attrs

from ..frames import Kind
from ._steps import RecordedStep

__all__ = [
    "AskRecover",
    "Block",
    "Claim",
    "ContinueLive",
    "Miss",
    "Replay",
    "Rerun",
    "RetryLimit",
    "StopBusy",
    "ToolAsk",
    "WaitForWorker",
    "GoLive",
    "decide_drift",
    "decide_in_flight",
    "in_flight_action",
    "decide_model",
    "decide_tool",
    "replays_whatever_asked",
    "decide_unrecorded_tool",
    "decide_value",
    "blocks_retry",
]


@attrs.frozen(kw_only=True)
class ToolAsk:
    """What the run knows when its loop asks for a tool step.

    Attributes:
        step: the recorded step the request matched, or None.
        restart_safe: the tool is restart safe or read-only.
        has_recover: the tool has a ``recover()`` hook.
        can_write: the run may record (live, and not already succeeded).
        exhausted: the step ended in an error, and no recorded step left to
            replay was opened after that outcome (its parallel siblings may be
            left: they were issued with it). False for any other step.
        failed_at: seq of an earlier failed call with the same arguments, or None.
        retry_requested: that failed call's body asked to be called again (a
            framework retry signal, ``retry_requested`` in its ``tool_error``):
            this call is a retry of its operation and runs.
        max_attempts: starts allowed for one in-flight step.
        known_seq: the first seq written while this execution was alive.
        may_wait: this worker waits for another (on_busy="wait", adoption allowed).
        leased: this worker holds a run lease.
        claim_age: seconds since the matched step was claimed (0 without a step).
        busy_timeout: seconds this worker waits for another.
    """

    step: RecordedStep | None
    restart_safe: bool
    has_recover: bool
    can_write: bool
    exhausted: bool
    failed_at: int | None
    max_attempts: int
    known_seq: int
    may_wait: bool
    leased: bool
    claim_age: float
    busy_timeout: float
    retry_requested: bool = False


@attrs.frozen
class Replay:
    """Hand back the recorded outcome of ``step`` (no body runs)."""

    step: RecordedStep


@attrs.frozen
class Claim:
    """Nothing recorded answers the step: claim it (durable ``tool_start``) and run the body."""


@attrs.frozen
class Miss:
    """Nothing recorded answers the step and the run cannot go live: ``ReplayMissError``."""


@attrs.frozen
class Block:
    """Do not run the tool: ``SideEffectRetryBlockedError`` (or tell the model).

    Attributes:
        seq: the step the block is about.
        attempts: how many times it was started.
        cause: why its outcome is unknown ("" when nothing more is known).
        retry: the same call failed earlier (a retry, not an interrupted call).
        write: the block's outcome may be journaled (False: raise, replay-only).
    """

    seq: int
    attempts: int
    cause: str = ""
    retry: bool = False
    write: bool = True


@attrs.frozen
class StopBusy:
    """Another live worker holds ``step``: stop with ``RunBusyError``."""

    step: RecordedStep


@attrs.frozen
class WaitForWorker:
    """Another worker holds ``step`` (or is presumed to): wait for its outcome.

    Attributes:
        step: the step it holds.
        presumed: the claim predates this execution; when the wait times out,
            settle the step as interrupted (:func:`decide_in_flight`).
        patience: seconds to wait (None: ``busy_timeout``).
    """

    step: RecordedStep
    presumed: bool
    patience: float | None


@attrs.frozen
class RetryLimit:
    """The step was started ``max_attempts`` times without finishing: stop."""

    step: RecordedStep


@attrs.frozen
class AskRecover:
    """Ask the tool's ``recover()`` what happened to the in-flight ``step``."""

    step: RecordedStep


@attrs.frozen
class Rerun:
    """Run the restart-safe in-flight ``step`` again (an attempt note, then the body)."""

    step: RecordedStep


@attrs.frozen
class GoLive:
    """Make the live call and record it; ``unfinished`` is the recorded request it completes."""

    unfinished: RecordedStep | None = None


def decide_model(step: RecordedStep | None, *, can_write: bool) -> Replay | GoLive | Miss:
    """A model step: replay a recorded response, or go live (completing a request left open)."""
    if step is not None and step.end is not None:
        return Replay(step)
    return GoLive(step) if can_write else Miss()


def decide_value(step: RecordedStep | None, *, can_write: bool) -> Replay | GoLive | Miss:
    """A recorded value (``now``, ``uuid4``...): replay it, or make and record a new one."""
    if step is not None:
        return Replay(step)
    return GoLive() if can_write else Miss()


@attrs.frozen
class ContinueLive:
    """Re-ask a drifted model step live; ``step`` is the recorded step it supersedes.

    ``step`` is None when the caller's turn holds no recorded step any more
    (its model step was superseded by an execution that stopped before
    recording the new request).
    """

    step: RecordedStep | None


def decide_drift(
    *,
    on_drift: str,
    can_write: bool,
    kind: str,
    expected: RecordedStep | None,
    others_pending: bool,
) -> ContinueLive | None:
    """A step diverged from its record: continue live from it, or raise (None).

    Continues only under ``on_drift="continue_live"``, in a run that may
    write, for a model step asked where the record has a model step of the
    same turn (or nothing left in that turn), and while no tool or value step
    of that turn is left unasked: a loop that skips a recorded tool step (a
    side effect it would not see) never continues. Tool and value drift
    always raise (the policy's rule for them applies).

    Args:
        on_drift: the policy's ``on_drift``.
        can_write: the run is live and not already finished.
        kind: the kind of the step the loop asked for.
        expected: the caller's turn's unconsumed recorded model step, or None.
        others_pending: the caller's turn still holds unconsumed tool or value steps.
    """
    if on_drift != "continue_live" or not can_write or kind != "model" or others_pending:
        return None
    return ContinueLive(expected)


def decide_unrecorded_tool(
    *, rule: str, on_drift: str, can_write: bool, harmless: bool, side_effect_waits: bool
) -> bool:
    """A tool call no recorded step answers, where recorded steps still wait: go live (True)?

    The resume contract (C4, DESIGN invariant 15): a side-effecting tool body
    never starts while a recorded side-effecting tool step (finished or in
    flight) waits unreplayed, under every policy. A read-only (or
    restart-safe) call, or a side-effecting one where only model, value and
    read-only steps wait, runs live under ``tool="lenient"`` or
    ``on_drift="continue_live"``; strict and warn diverge.

    Args:
        rule: the policy's rule for tool steps.
        on_drift: the policy's ``on_drift``.
        can_write: the run is live and not already finished.
        harmless: the tool is declared read-only or restart-safe.
        side_effect_waits: a recorded side-effecting tool step is still unreplayed.
    """
    if not can_write or (rule != "lenient" and on_drift != "continue_live"):
        return False
    return harmless or not side_effect_waits


ToolDecision = Replay | Claim | Miss | Block | StopBusy | WaitForWorker
InFlightDecision = Miss | RetryLimit | AskRecover | Rerun | Block


def ended_run(ask: ToolAsk) -> bool:
    """True for a retryable tool error that ended the last execution (nothing opened after it).

    Such a step is not settled: resuming re-attempts it under the in-flight
    rules, so a retryable error leaves a run that makes progress when resumed.
    """
    step = ask.step
    if step is None or step.end is None or step.end.kind != Kind.TOOL_ERROR.value:
        return False
    if not ask.can_write:
        return False
    error = step.decode_outcome().get("error") or {}
    if error.get("retry_requested") is True:
        return False  # the body asked to be called again: the loop decides, as when recorded
    return bool(error.get("retryable")) and ask.exhausted


#: The kind of a recorded tool result (the str itself: no enum look-up per step).
_TOOL_DONE = Kind.TOOL_DONE.value


def replays_whatever_asked(step: RecordedStep | None) -> TypeGuard[RecordedStep]:
    """True when :func:`decide_tool` replays ``step`` whatever else its ask holds.

    A step with a recorded result (``tool_done``): only an error's outcome
    depends on the rest of the ask (:func:`ended_run`), so the caller may
    skip gathering it.
    """
    return step is not None and step.end is not None and step.end.kind == _TOOL_DONE


def decide_tool(ask: ToolAsk) -> ToolDecision | InFlightDecision:
    """Decide what a tool step asked for does (see the module docstring)."""
    step = ask.step
    if step is not None and step.end is not None and not ended_run(ask):
        return Replay(step)
    if step is not None and step.end is None:
        busy = _busy(ask, step)
        if busy is not None:
            return busy
    if step is not None:
        # in flight, or a retryable error that ended the last execution: unsettled
        return decide_in_flight(ask)
    if blocks_retry(ask):
        # the same block as when recorded (a replay-only run never writes its outcome)
        assert ask.failed_at is not None
        return Block(ask.failed_at, 1, retry=True, write=ask.can_write)
    return Claim() if ask.can_write else Miss()


def blocks_retry(ask: ToolAsk) -> bool:
    """True when a new call must not run: the same call failed earlier and may have had its effect.

    Not for a restart-safe tool (running it again is harmless), nor after a
    failure whose body asked to be called again (a retry signal: the body
    said its effect did not happen, and the call continues that operation).
    """
    return ask.failed_at is not None and not ask.restart_safe and not ask.retry_requested


def _busy(ask: ToolAsk, step: RecordedStep) -> StopBusy | WaitForWorker | None:
    """An in-flight step that may belong to a live worker (None: simply in flight).

    A claim written while this execution was alive is another live worker's.
    Without a lease, under on_busy="wait", a claim found at entry that is
    younger than ``busy_timeout`` is presumed live too.
    """
    live = step.last_seq >= ask.known_seq  # its last attempt began in this execution
    presumed = not live and ask.may_wait and not ask.leased and ask.claim_age < ask.busy_timeout
    if not live and not presumed:
        return None
    if not ask.may_wait:
        return StopBusy(step)
    return WaitForWorker(step, presumed, ask.busy_timeout - ask.claim_age if presumed else None)


def decide_in_flight(ask: ToolAsk) -> InFlightDecision:
    """Settle a step whose outcome is unknown: re-run, recover, block, or stop.

    A step a person resolved as not done (:func:`redrive.replay.resolve_step`)
    is re-run, whatever the tool's declarations: its body did not take effect.
    """
    step = ask.step
    assert step is not None
    if not ask.can_write:
        return Miss()
    if step.resolved_not_done:  # a person checked: it did not happen (redrive resolve)
        return Rerun(step)
    if step.attempts >= ask.max_attempts:
        return RetryLimit(step)
    if ask.has_recover:
        return AskRecover(step)
    if ask.restart_safe:
        return Rerun(step)
    return Block(step.seq, step.attempts, cause=_ended_cause(step))


def in_flight_action(ask: ToolAsk) -> str:
    """What a resume does with an in-flight step, as a word (what :func:`decide_in_flight` decides).

    Returns:
        ``"rerun"`` (its body runs again), ``"recover"`` (its ``recover()`` is
        asked), ``"block"`` (a person decides), ``"retry_limit"`` (started
        ``max_attempts`` times: a person decides), ``"miss"`` (the run cannot write).
    """
    decision = decide_in_flight(ask)
    words: dict[type, str] = {
        Rerun: "rerun",
        AskRecover: "recover",
        Block: "block",
        RetryLimit: "retry_limit",
        Miss: "miss",
    }
    return words[type(decision)]


def _ended_cause(step: RecordedStep) -> str:
    if step.end is None:
        return ""
    error = step.decode_outcome().get("error") or {}
    return (
        f"it failed with the retryable {error.get('type')}: {error.get('message')} and "
        "the run stopped there, so whether its side effect happened is unknown"
    )
