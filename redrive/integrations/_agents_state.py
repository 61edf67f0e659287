"""An Agents SDK run paused for tool approvals, continued from a ``RunState`` the user stored.

The SDK's human-in-the-loop pattern: a tool with ``needs_approval`` stops the
run (``result.interruptions``); the application stores
``result.to_state().to_string()``, a person decides, and a later process loads
it (``RunState.from_string``), calls ``state.approve(item)`` and
``Runner.run(agent, state)``. Under one redrive run id that later process is
a resume, and the two records of the run must agree.

Who owns what: the stored **state owns the history up to its interruption**
(the model calls and tool calls before it, and what the loop did after it in
the attempt that stored it); the **journal owns the continuation** (the
approved tool call, the model calls after it): a continuation killed half-way
and continued again from the same stored state replays what it finished, and
its side effects run once.

How, inside :class:`~redrive.integrations._agents_runner.SessionGuard`:

1. A ``Runner.run`` / ``run_sync`` that returns with ``interruptions`` journals
   an ``agents_interruption`` note (the calls waiting, and their digest), and
   the run's block, ended without ``run.finish``, leaves it ``suspended``
   rather than ``succeeded`` with no output (:func:`redrive.replay.suspend_at_exit`).
   A ``Runner.run_streamed`` result stops in a task of its own, after the call
   returned: its pause is journaled when that task ends, or at the latest when
   the block ends (:func:`after_streamed`); a block that ends while the streamed
   run still runs (its events not consumed to the end), or after it was
   cancelled (either mode: ``after_turn`` ends the loop cleanly, with no final
   output) or failed, leaves the run ``suspended`` too: it did not finish.
2. A ``Runner`` call given a ``RunState`` journals an ``agents_continue`` note
   and marks the recorded steps that belong to the state's side answered
   (:func:`redrive.replay.answered_before`): those recorded before the first
   continuation of that state, or all of them when this is the first. The
   continuation then asks its steps in the journal's order.
3. A ``RunState`` this run never paused at, given while the journal holds
   steps this execution has not replayed, is refused before anything runs
   (:class:`ForeignRunStateError`).

The in-process pattern (re-drive the run from its start, take the decision
from :func:`redrive.await_approval`, continue the state in the same
execution) passes through unchanged: by the time it continues, every
recorded step before is replayed, so nothing is marked.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from .._canonical import call_key
from ..errors import NextStep, NextStepAction, ReplayError, RunEndedError
from ..replay import Run, answered_before, suspend_at_exit

__all__ = [
    "ForeignRunStateError",
    "after_result",
    "after_streamed",
    "before_state",
    "waiting_calls",
]

#: note: an Agents SDK run returned paused for tool approvals
INTERRUPTION_NOTE = "agents_interruption"
#: note: a Runner call continued a ``RunState``
CONTINUE_NOTE = "agents_continue"


class ForeignRunStateError(ReplayError):
    """A ``Runner`` call under a resumed run was given a ``RunState`` the run never paused at.

    The journal holds steps this execution has not replayed, and none of its
    pauses is the state's: continuing it would ask steps the journal does not
    hold in that order (a ``DivergenceError`` part-way, or a side effect the
    journal cannot tell was made). Nothing was sent or run.
    """


def waiting_calls(interruptions: Any) -> list[dict[str, str]]:
    """The tool calls ``interruptions`` (``ToolApprovalItem``s) wait on, in a stable form."""
    calls = []
    for item in interruptions or []:
        raw = getattr(item, "raw_item", None)

        def field(name: str, raw: Any = raw) -> str:
            found = raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)
            return "" if found is None else str(found)

        calls.append(
            {
                "tool": str(getattr(item, "tool_name", "") or field("name")),
                "call_id": field("call_id") or field("id"),
                "arguments": field("arguments"),
            }
        )
    return sorted(calls, key=lambda c: (c["call_id"], c["tool"], c["arguments"]))


def _digest(calls: list[dict[str, str]]) -> str:
    return call_key(INTERRUPTION_NOTE, calls)


def _journal_pause(run: Run, calls: list[dict[str, str]]) -> str:
    """Journal the ``agents_interruption`` note of ``calls``; return why the run waits."""
    run.note(INTERRUPTION_NOTE, {"digest": _digest(calls), "calls": calls})
    names = ", ".join(f"{c['tool']} ({c['call_id']})" for c in calls)
    return (
        f"run {run.run_id!r}: the Agents SDK run stopped for approval of {names}; store "
        "result.to_state().to_string() (or re-drive and ask redrive.await_approval), approve, "
        "and continue with Runner.run(agent, state) under the same run_id"
    )


def after_result(run: Run, result: Any) -> None:
    """Journal the pause of a ``Runner`` result that has interruptions (step 1 of the module).

    A result without interruptions takes back an earlier pause of this execution.
    """
    calls = waiting_calls(getattr(result, "interruptions", None))
    suspend_at_exit(run, _journal_pause(run, calls) if calls else None)


class _StreamedPause:
    """What a ``Runner.run_streamed`` result under ``run`` means for the end of the run's block.

    Its pause is journaled once, by whichever comes first: the end of the
    result's loop task (:meth:`on_done`) or the block's clean end (:meth:`why`).
    """

    def __init__(self, run: Run, result: Any) -> None:
        self.run = run
        self.result = result
        self.lock = threading.Lock()
        self.paused: str | None = None  # why the run waits, once the pause is journaled

    def _journal(self) -> str | None:
        with self.lock:
            if self.paused is None:
                calls = waiting_calls(getattr(self.result, "interruptions", None))
                if calls:
                    self.paused = _journal_pause(self.run, calls)
            return self.paused

    def on_done(self, _task: Any) -> None:
        """The loop task ended: journal its pause now (the block may end much later)."""
        # the block may have ended first: its end already journaled what the run became
        with contextlib.suppress(RunEndedError):
            self._journal()

    def _cut_short(self) -> bool:
        """The streamed run was cancelled (any mode) before it had a final output."""
        cancelled = getattr(self.result, "_cancel_mode", "none") != "none"
        return cancelled and getattr(self.result, "final_output", None) is None

    def why(self) -> str | None:
        """At the block's clean end without ``finish``: why the run waits, or None (finished)."""
        paused = self._journal()
        if paused is not None:
            return paused
        task = getattr(self.result, "run_loop_task", None)
        ended = task is None or (task.done() and not task.cancelled() and task.exception() is None)
        # a loop that ended cleanly finished the run, unless it was cancelled first:
        # ``cancel(mode="after_turn")`` ends the task cleanly after the turn, no output
        if ended and not self._cut_short():
            return None
        return (
            f"run {self.run.run_id!r}: the block ended while an Agents SDK streamed run was "
            "still running (its events not consumed to the end), or after it was cancelled or "
            "failed; what it did after that was not journaled. Deliver the job again under the "
            "same run_id: the run is re-driven and its finished steps replay"
        )


def after_streamed(run: Run, result: Any) -> None:
    """Journal the pause of a ``run_streamed`` result when its loop stops (step 1 of the module).

    Args:
        run: the active run.
        result: the ``RunResultStreaming`` the SDK's runner returned.
    """
    streamed = _StreamedPause(run, result)
    task = getattr(result, "run_loop_task", None)
    if task is not None:
        task.add_done_callback(streamed.on_done)
    suspend_at_exit(run, streamed.why)


def _notes(run: Run, digest: str) -> tuple[int | None, int | None]:
    """The seq of the first interruption note of ``digest``, and of its first continuation."""
    paused: int | None = None
    continued: int | None = None
    for frame in run.frames():
        if frame.kind != "note" or frame.name not in (INTERRUPTION_NOTE, CONTINUE_NOTE):
            continue
        data = (frame.data() or {}).get("data") or {}
        if data.get("digest") != digest:
            continue
        if frame.name == INTERRUPTION_NOTE and paused is None:
            paused = frame.seq
        elif frame.name == CONTINUE_NOTE and continued is None:
            continued = frame.seq
    return paused, continued


def _refusal(run: Run, calls: list[dict[str, str]], waiting: int) -> ForeignRunStateError:
    names = ", ".join(f"{c['tool']} ({c['call_id']})" for c in calls) or "no tool call"
    return ForeignRunStateError(
        f"run {run.run_id!r}: Runner.run was given a RunState paused at {names}, a pause this "
        f"run never journaled, while {waiting} recorded step(s) of the run are not replayed "
        "yet. Continuing it would ask steps the journal does not hold in that order. Nothing "
        "was sent or run. Pass the state this run stored when it stopped for approval, or "
        "re-drive the run from its input (Runner.run(agent, input)) and take each decision "
        "from redrive.await_approval, or continue this state under a new run id.",
        run_id=run.run_id,
    ).with_next_steps(
        (
            NextStep(
                NextStepAction.PERSON,
                "continue the RunState this run stored at its pause, or this state under a "
                "new run id",
                {"commands": []},
            ),
        )
    )


def before_state(run: Run, state: Any) -> None:
    """Prepare a ``Runner`` call that continues ``state`` (steps 2 and 3 of the module).

    Raises:
        ForeignRunStateError: ``state`` is not a pause of this run, and the
            journal holds steps not replayed yet (nothing is run).
    """
    calls = waiting_calls(state.get_interruptions())
    digest = _digest(calls)
    paused, continued = _notes(run, digest)
    cursor = run._state.cursor
    waiting = len(cursor.remaining()) if cursor is not None else 0
    if paused is None and continued is None and waiting:
        raise _refusal(run, calls, waiting)
    run.note(CONTINUE_NOTE, {"digest": digest, "calls": calls})
    if waiting:
        # the steps before the state's first continuation belong to the state's side
        bound = continued if continued is not None else 1 << 62
        answered_before(run, bound, lambda _step: False)
