"""The step engine: pure decisions for tool steps, from data alone (no journal, no clock)."""

from __future__ import annotations

from typing import Any

import attrs

from redrive.frames import Frame, Kind, make_frame
from redrive.replay import RecordedStep
from redrive.replay import _engine as engine
from redrive.replay._engine import ToolAsk, decide_tool
from redrive.replay._operations import OperationLedger


def _frame(seq: int, kind: Kind, payload: dict[str, Any]) -> Frame:
    return make_frame(
        run_id="r", seq=seq, kind=kind, name="charge", payload=payload, prev_chain="", at=100.0
    )


def _step(seq: int = 3, *, end: Frame | None = None, attempts: int = 1) -> RecordedStep:
    start = _frame(seq, Kind.TOOL_START, {"args": {"n": 1}, "turn": 0})
    return RecordedStep(seq, "tool", "charge", "k", start, end, 0, attempts)


def _error(seq: int, *, retryable: bool) -> Frame:
    error = {"type": "builtins.TimeoutError", "message": "slow", "retryable": retryable}
    return _frame(seq + 1, Kind.TOOL_ERROR, {"step": seq, "error": error})


ASK = ToolAsk(
    step=None,
    restart_safe=False,
    has_recover=False,
    can_write=True,
    exhausted=True,
    failed_at=None,
    max_attempts=3,
    known_seq=10,
    may_wait=False,
    leased=False,
    claim_age=0.0,
    busy_timeout=30.0,
)


def test_nothing_recorded_claims_or_misses() -> None:
    """A step nothing answers is claimed live, or is a miss when the run cannot write."""
    assert decide_tool(ASK) == engine.Claim()
    assert decide_tool(attrs.evolve(ASK, can_write=False)) == engine.Miss()


def test_a_finished_step_replays() -> None:
    """A recorded outcome is handed back, an error included (unless it ended the last run)."""
    done = _step(end=_frame(4, Kind.TOOL_DONE, {"step": 3, "result": 1}))
    assert decide_tool(attrs.evolve(ASK, step=done)) == engine.Replay(done)
    failed = _step(end=_error(3, retryable=False))
    assert decide_tool(attrs.evolve(ASK, step=failed)) == engine.Replay(failed)
    retryable = _step(end=_error(3, retryable=True))
    later = attrs.evolve(ASK, step=retryable, exhausted=False)
    assert decide_tool(later) == engine.Replay(retryable)


def test_a_retryable_error_that_ended_the_run_is_settled_as_in_flight() -> None:
    """A retryable error at the end of the journal is re-attempted under the in-flight rules."""
    step = _step(end=_error(3, retryable=True))
    decision = decide_tool(attrs.evolve(ASK, step=step))
    assert isinstance(decision, engine.Block) and "retryable" in decision.cause
    assert decide_tool(attrs.evolve(ASK, step=step, restart_safe=True)) == engine.Rerun(step)


def test_in_flight_policy() -> None:
    """In flight: the attempt limit, then recover(), then restart safety, else a block."""
    step = _step()
    ask = attrs.evolve(ASK, step=step)
    assert decide_tool(ask) == engine.Block(3, 1)
    assert decide_tool(attrs.evolve(ask, restart_safe=True)) == engine.Rerun(step)
    assert decide_tool(attrs.evolve(ask, has_recover=True)) == engine.AskRecover(step)
    tired = _step(attempts=3)
    assert decide_tool(attrs.evolve(ask, step=tired, has_recover=True)) == engine.RetryLimit(tired)
    assert decide_tool(attrs.evolve(ask, can_write=False)) == engine.Miss()


def test_a_claim_of_a_live_worker_stops_or_waits() -> None:
    """A claim written while this execution was alive is another worker's: stop or wait."""
    step = _step(seq=12)
    ask = attrs.evolve(ASK, step=step)
    assert decide_tool(ask) == engine.StopBusy(step)
    assert decide_tool(attrs.evolve(ask, may_wait=True)) == engine.WaitForWorker(step, False, None)


def test_a_young_claim_is_presumed_live_without_a_lease() -> None:
    """Under on_busy="wait" and no lease, a claim younger than busy_timeout is waited for."""
    step = _step()
    ask = attrs.evolve(ASK, step=step, may_wait=True, claim_age=5.0)
    assert decide_tool(ask) == engine.WaitForWorker(step, True, 25.0)
    assert decide_tool(attrs.evolve(ask, leased=True)) == engine.Block(3, 1)
    assert decide_tool(attrs.evolve(ask, claim_age=31.0)) == engine.Block(3, 1)


def test_a_failed_call_repeated_is_blocked() -> None:
    """The same arguments after a failure of a non-restart-safe tool are blocked, not re-run."""
    ask = attrs.evolve(ASK, failed_at=2)
    assert decide_tool(ask) == engine.Block(2, 1, retry=True, write=True)
    replaying = attrs.evolve(ask, can_write=False)
    assert decide_tool(replaying) == engine.Block(2, 1, retry=True, write=False)
    assert decide_tool(attrs.evolve(ask, restart_safe=True)) == engine.Claim()


def test_model_and_value_steps_replay_or_go_live() -> None:
    """A model step replays its response, or goes live (completing an open request)."""
    answered = attrs.evolve(_step(), end=_frame(4, Kind.MODEL_RESPONSE, {"step": 3}))
    assert engine.decide_model(answered, can_write=False) == engine.Replay(answered)
    open_request = _step()
    assert engine.decide_model(open_request, can_write=True) == engine.GoLive(open_request)
    assert engine.decide_model(None, can_write=True) == engine.GoLive()
    assert engine.decide_model(None, can_write=False) == engine.Miss()
    assert engine.decide_value(open_request, can_write=False) == engine.Replay(open_request)
    assert engine.decide_value(None, can_write=True) == engine.GoLive()
    assert engine.decide_value(None, can_write=False) == engine.Miss()


def test_a_re_attempt_begun_in_this_execution_is_a_live_worker() -> None:
    """An old step whose last attempt began while this execution was alive is held by a worker."""
    step = _step()
    step.last_attempt_seq = 12
    assert decide_tool(attrs.evolve(ASK, step=step)) == engine.StopBusy(step)
    step.last_attempt_seq = 5
    assert decide_tool(attrs.evolve(ASK, step=step)) == engine.Block(3, 1)


def test_open_operations_give_a_retry_its_operations_key() -> None:
    """A retryable failure leaves the operation open: the next call of the same tool with the
    same arguments takes its key; a success or a permanent error closes it."""
    ops = OperationLedger()
    assert ops.take("pay", "k") is None and ops.peek("pay", "k") is None
    ops.failed("pay", "k", "r:1:pay", retryable=True)
    assert ops.peek("pay", "k") == "r:1:pay"
    assert ops.take("pay", "other") is None and ops.take("refund", "k") is None
    assert ops.take("pay", "k") == "r:1:pay"  # the retry is under way: no longer open
    assert ops.take("pay", "k") is None
    ops.failed("pay", "k", "r:1:pay", retryable=False)  # the retry failed for good
    assert ops.take("pay", "k") is None and ops.peek("pay", "k") == "r:1:pay"


def test_open_operations_follow_replayed_attempts() -> None:
    """Replayed attempts (began, failed) rebuild what the interrupted execution held;
    parallel identical operations are retried oldest first."""
    ops = OperationLedger()
    ops.failed("pay", "k", "r:1:pay", retryable=True)
    ops.failed("pay", "k", "r:2:pay", retryable=True)
    ops.failed("pay", "k", "r:2:pay", retryable=True)  # the same operation, not a new one
    ops.began("pay", "k", "r:1:pay")  # a recorded retry of the first one
    assert ops.take("pay", "k") == "r:2:pay" and ops.take("pay", "k") is None
    ops.began("pay", "k", "r:9:pay")  # nothing open: nothing to do


def test_a_recorded_result_replays_whatever_else_the_ask_holds() -> None:
    """``replays_whatever_asked`` says so only where every ask decides Replay."""
    import itertools

    done = _step(end=_frame(4, Kind.TOOL_DONE, {"step": 3, "result": 1}))
    others = [
        _step(),
        _step(end=_error(3, retryable=True)),
        _step(end=_error(3, retryable=False)),
    ]
    assert engine.replays_whatever_asked(done)
    assert not any(engine.replays_whatever_asked(s) for s in [None, *others])
    for flags in itertools.product([False, True], repeat=6):
        safe, recover, write, exhausted, wait, leased = flags
        ask = attrs.evolve(
            ASK,
            step=done,
            restart_safe=safe,
            has_recover=recover,
            can_write=write,
            exhausted=exhausted,
            may_wait=wait,
            leased=leased,
            failed_at=3 if safe else None,
            retry_requested=recover,
            known_seq=0 if wait else 10,
            max_attempts=1,
        )
        assert decide_tool(ask) == engine.Replay(done)
