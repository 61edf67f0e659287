"""The matcher: a Run's steps against its recorded steps, and what a miss or a leftover means.

It asks the cursor (:mod:`._cursor`) for the recorded step that answers a
step, waits a moment for a sibling flow's step, re-asks a drifted model step
under ``on_drift="continue_live"`` (:mod:`._drift`), and raises the errors of
a replay miss (``ReplayMissError``) and of recorded steps left unasked at the
run's end (``DivergenceError``).
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import DivergenceError, ReplayMissError
from ._config import unknown_live_tools
from ._delta import expand_frames
from ._diff import caller_location, diff_values, format_diff, short
from ._divergence import Found
from ._drift import advice_for, continue_live, leftovers, supersede_leftovers
from ._flows import FlowTracker, Issue
from ._lease import LeaseKeeper
from ._places import hold_place, inserted_live
from ._state import RunState
from ._steps import RecordedStep, iter_steps
from ._writer import JournalWriter

__all__ = ["Matcher"]

#: seconds a call waits for a sibling flow to replay a step recorded from the same point
#: before it calls its own drift a divergence (threads started together race to ask)
_SIBLING_WAIT = 2.0


class Matcher:
    """Matches one run's steps to its record (the run's state holds the cursor).

    Args:
        state: the run's state.
        writer: the run's journal writer (``reasked`` notes are queued on it).
        lease: the run's lease keeper (a step goes live only under it).
        flows: the run's flow tracker (who asked; who may still ask for a recorded step).
    """

    def __init__(
        self, state: RunState, writer: JournalWriter, lease: LeaseKeeper, flows: FlowTracker
    ) -> None:
        self._state = state
        self._writer = writer
        self._lease = lease
        self._flows = flows

    def match(
        self,
        kind: str,
        name: str,
        args: Any,
        key: str,
        *,
        turn: int,
        issue: Issue | None = None,
        harmless: bool = False,
    ) -> RecordedStep | None:
        """Return the recorded step that answers this step, or None to go live.

        Called under the run's lock (released while waiting for a sibling).
        A step that goes live where recorded steps wait takes a place in the
        record (:mod:`._places`), so the flow's next steps match where the
        record has them.

        Args:
            kind: ``"model"``, ``"tool"`` or ``"value"``.
            name: the step name.
            args: the canonical (redacted) arguments.
            key: the match key of ``args``.
            turn: the calling flow's turn.
            issue: where the calling flow issued it (None: a value step).
            harmless: a tool declared read-only or restart-safe.

        Raises:
            DivergenceError: nothing recorded answers it where the record goes on
                and the policy does not let it go live (its ``next_steps`` say
                what is safe to do).
        """
        step: RecordedStep | None = None
        try:
            step = self._match(kind, name, args, key, turn=turn, issue=issue, harmless=harmless)
            return step
        finally:
            if issue is not None:  # its caller will stand at the recorded step it was handed
                self._flows.answered(issue, name, arriving=step.seq if step is not None else None)

    def _match(
        self,
        kind: str,
        name: str,
        args: Any,
        key: str,
        *,
        turn: int,
        issue: Issue | None,
        harmless: bool,
    ) -> RecordedStep | None:
        state = self._state
        cursor = state.cursor
        if cursor is None:
            return None
        policy = state.config.policy
        places = state.places
        at = places.in_record(issue)  # where the record has the flow
        waited_until: float | None = None

        def wait_for_sibling() -> bool:
            """Wait a moment for a sibling flow (the lock is released); False once it is up."""
            nonlocal waited_until
            now = time.monotonic()
            waited_until = waited_until or now + _SIBLING_WAIT
            if now >= waited_until:
                return False
            state.sibling_wait.wait(0.005)
            return True

        patient = True
        while True:
            if patient and cursor.claim_pending(kind, name, args, key, turn=turn, issue=at):
                # an identical request is recorded at a sibling flow's point and the sibling
                # has not asked yet: it is the sibling's unless it asks for another step
                if wait_for_sibling():
                    continue
                patient = False  # the sibling never asked: the code moved the call
            try:
                step = cursor.match(
                    kind, name, args, key, turn=turn, issue=at, patient=patient, harmless=harmless
                )
                if step is None and policy.rule(kind) != "lenient" and not cursor.exhausted:
                    if cursor.frontier(kind, name, at):
                        return None  # this flow's record ends here, other flows' goes on: live
                    raise cursor.divergence(cursor.remaining()[0], Found(kind, name, key, args))
            except DivergenceError as exc:
                if cursor.sibling_pending(kind, name, at) and wait_for_sibling():
                    # the step recorded from this point may be a sibling flow's, not yet
                    # asked for: give it a moment
                    continue
                if continue_live(state, self._writer, cursor, kind, name, turn, key, exc):
                    superseded = state.reasked[-1].get("step")
                    old = superseded if isinstance(superseded, int) else None
                    hold_place(places, cursor, policy, kind, name, issue, at, old)
                    return None
                if inserted_live(cursor, policy, kind, harmless, can_write=state.can_write):
                    hold_place(places, cursor, policy, kind, name, issue, at)
                    return None
                raise exc.with_next_steps(advice_for(state, exc, harmless=harmless)) from None
            if step is None:
                hold_place(places, cursor, policy, kind, name, issue, at)
            return step

    def check_live(self, kind: str, name: str, args: Any, key: str) -> None:
        """Let a step no recorded step answers go live, or raise why it cannot.

        Raises:
            LeaseLostError: the run's lease was lost.
            ReplayMissError: the run already succeeded, or replays only (``live=False``).
        """
        self._lease.check()
        state = self._state
        if state.can_write:
            return
        cursor = state.cursor
        closest = []
        if cursor is not None:
            closest = [
                f"{s.describe()} args {short(s.args)}" for s in cursor.remaining() if s.kind == kind
            ][:3]
        why = "this run replays only (live=False)"
        if state.finished_record is not None:
            empty = not state.replayed_steps and (cursor is None or not cursor.remaining())
            why = (
                # true of a test fixture's stand-in for a missing recording too
                "the run's record is finished and holds no step"
                if empty
                else "the run already succeeded, so its journal is complete"
            )
        caller = caller_location()
        raise ReplayMissError(
            f"run {state.run_id!r}: the loop asked for {kind} {name!r} with arguments "
            f"{short(args)}, which no recorded step answers, and {why}.\n"
            + _replayed_twins_line(kind, self._replayed_twins(kind, name, key))
            + (f"  called from: {caller}\n" if caller is not None else "")
            + (
                "  closest recorded steps:\n    " + "\n    ".join(closest)
                if closest
                else "  no unconsumed recorded step of that kind"
            )
            + "\nWhat to do: find the code change that added this call (redrive show / "
            "redrive diff); if it is intended, record a new run only where its side "
            "effects may run again (a test fixture: redrive check --update).",
            run_id=state.run_id,
            seq=self._writer.next_seq,
            kind=kind,
            name=name,
            found=args,
            closest=closest,
        )

    def _replayed_twins(self, kind: str, name: str, key: str) -> list[int]:
        """The seqs of the recorded steps identical to the one asked for that were already used.

        Read only on the error path (a replay miss): the journal is scanned once,
        so replaying keeps holding only a few steps at once.
        """
        state = self._state
        cursor = state.cursor
        unused = {s.seq for s in cursor.remaining()} if cursor is not None else set()
        frames = state.config.journal.frames(state.run_id)
        return [
            step.seq
            for step in iter_steps(frames, state.run_id, verify=False)
            if (step.kind, step.name, step.key) == (kind, name, key) and step.seq not in unused
        ]

    def check_fully_replayed(self, exc: BaseException | None) -> None:
        """At the block's clean end: every recorded step the policy holds to was asked for.

        Raises:
            ValueError: ``live_tools`` names a tool that does not exist.
            DivergenceError: recorded steps were left unasked (the code took a
                shorter path than the record).
        """
        state = self._state
        cursor = state.cursor
        if exc is not None or cursor is None:
            return
        config = state.config
        if not isinstance(config.live_tools, bool):
            frames = config.journal.frames(state.run_id)
            steps = iter_steps(frames, state.run_id, verify=False)
            recorded = {s.name for s in steps if s.kind == "tool"}
            problem = unknown_live_tools(config.live_tools, recorded)
            if problem:
                raise ValueError(f"run {state.run_id!r}: {problem}")
        left = leftovers(state, cursor.remaining())
        if left and supersede_leftovers(state, self._writer, left):
            return
        if not left:
            return
        step = left[0]
        counterpart = self._live_counterpart(step)
        diff = counterpart[1] if counterpart is not None else []
        called = (
            f" The loop called {step.kind} {step.name!r} live at seq {counterpart[0]} "
            f"with other arguments (recorded -> live):\n{format_diff(diff)}\n"
            if counterpart is not None and diff
            else " "
        )
        error = DivergenceError(
            f"run {state.run_id!r}: the loop finished but the journal has more steps, from "
            f"seq {step.seq} ({step.kind} {step.name}); the code took a shorter path than "
            f"the record. {len(left)} recorded step(s) were not asked for.{called}",
            run_id=state.run_id,
            seq=step.seq,
            kind=step.kind,
            name=step.name,
            found_kind=None,
            found_name=None,
            expected=step.args,
            found=None,
            expected_key=step.key,
            found_key=None,
            diff=diff,
            context=[s.describe() for s in left],
        )
        raise error.with_next_steps(advice_for(state, error, left=left))

    def _live_counterpart(self, step: RecordedStep) -> tuple[int, list[Any]] | None:
        """The first step of ``step``'s kind and name this execution made live, and their diff.

        Read only when a resumed run ends with recorded steps unused (the error
        path), so a changed argument is named even though the loop went live.
        """
        state = self._state
        opening = {"tool": "tool_start", "model": "model_request"}.get(step.kind)
        if opening is None or not state.resumed:
            return None
        for frame, data in expand_frames(state.config.journal.frames(state.run_id)):
            if frame.seq < state.resumed_at or frame.kind != opening or frame.name != step.name:
                continue
            if isinstance(data, dict):
                return frame.seq, diff_values(step.args, data.get("args"))
        return None


def _replayed_twins_line(kind: str, seqs: list[int]) -> str:
    """The line of a replay miss naming the identical recorded steps already replayed (or "").

    vcrpy's message for the same case says "no matchers failed" (kevin1024/vcrpy#929, #516):
    this one says how many times the record has the call and which time the code asks.
    """
    if not seqs:
        return ""
    if len(seqs) == 1:
        return (
            f"  an identical {kind} step at seq {seqs[0]} was already replayed: the "
            "record has this call once, the code now makes it again\n"
        )
    times = len(seqs) + 1
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(times % 10, "th")
    nth = f"{times}{'th' if 10 <= times % 100 <= 20 else suffix}"
    return (
        f"  identical {kind} steps at seqs {', '.join(map(str, seqs))} were already replayed: "
        f"the record has this call {len(seqs)} times, the code now makes it a {nth} time\n"
    )
