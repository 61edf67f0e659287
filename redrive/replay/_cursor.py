"""The cursor over a run's recorded steps, and the matcher (pure: no I/O of its own).

Frames are read lazily from an iterator: a strict replay holds only the
steps of the current turn and a little look-ahead, so memory does not grow
with the journal. A lenient rule needs the whole index and loads it.
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Iterator
from typing import Any

from ..errors import DivergenceError
from ..frames import Frame, call_key
from ._bycontent import by_content
from ._callers import IdenticalRequests
from ._callers import point as _point
from ._callers import position as _position
from ._delta import Expander
from ._diff import diff_values, format_diff
from ._divergence import Found, ReplayDriftWarning, divergence_error
from ._flows import Issue
from ._frontier import past_flow_record
from ._policy import ReplayPolicy, match_view
from ._recorded import CAUSAL_TURNS, ISSUED_KINDS, RecordedIndex
from ._steps import STEP_KINDS, RecordedStep

__all__ = [
    "CAUSAL_TURNS",
    "Cursor",
    "ISSUED_KINDS",
    "RecordedStep",
    "ReplayDriftWarning",
    "STEP_KINDS",
]


class Cursor:
    """Walks a run's recorded steps and matches the replayed loop's steps to them.

    Args:
        run_id: the run, for messages.
        frames: the run's frames in seq order (consumed lazily).
        policy: the replay policy.
    """

    def __init__(
        self, run_id: str, frames: Iterator[Frame], policy: ReplayPolicy, *, source: str = ""
    ) -> None:
        self.run_id = run_id
        #: the journal's URL, for the hint in divergence messages
        self.source = source
        self.policy = policy
        self._ignore = policy.ignore_patterns
        self._idx = RecordedIndex(run_id, frames, self._ignore)
        self._recent: collections.deque[str] = collections.deque(maxlen=5)
        #: the step :meth:`claim_pending` just found at the caller's own position
        self._own: RecordedStep | None = None
        #: the requests ``(kind, name, key)`` replayed so far (warn: asked again, not drift);
        #: kept only under a warn rule, so a strict replay holds no state per step
        self._replayed: set[tuple[str, str, str]] = set()
        self._warns = "warn" in (policy.tool, policy.model, policy.value)
        #: a lenient rule matches by content, out of issue positions
        self._reorders = "lenient" in (policy.tool, policy.model, policy.value)
        if self._reorders:
            self._idx.load_all()

    @property
    def callers(self) -> IdenticalRequests:
        """Which of identical requests recorded at other points answers a caller."""
        return self._idx.callers

    def flags(self) -> dict[str, Any]:
        """The run's ``run_start`` flags (reads the first frame when not read yet)."""
        idx = self._idx
        while idx.reader.run_start is None and idx.frames is not None:
            if not idx.load_one():
                break
        flags = (self.run_start or {}).get("flags")
        return flags if isinstance(flags, dict) else {}

    @property
    def superseded(self) -> list[int]:
        """Seqs of recorded model steps superseded by a re-ask (``reasked`` notes read)."""
        return self._idx.superseded

    @property
    def run_start(self) -> dict[str, Any] | None:
        """The decoded ``run_start`` payload, once read."""
        return self._idx.reader.run_start

    @property
    def run_end(self) -> dict[str, Any] | None:
        """The decoded ``run_end`` payload, once read."""
        return self._idx.reader.run_end

    @property
    def expander(self) -> Expander:
        """The last full model request per step name (to resolve prefix deltas)."""
        return self._idx.reader.expander

    def _find_issued(
        self,
        turn: int,
        kind: str,
        name: str,
        key: str,
        issue: Issue | None,
        *,
        patient: bool = True,
    ) -> RecordedStep | None:
        """The step of ``turn`` equal to (kind, name, key) that answers the caller at ``issue``.

        Among identical recorded requests, the one recorded at the caller's
        issue position (same parent step, same occurrence) answers it, so each
        concurrent caller gets the outcome it got live, whatever the order the
        calls completed in. Without a recorded position (journals recorded
        before it; tool steps before the ``causal`` run flag), or when none is
        recorded at the caller's position (a retried request), the earliest
        one issued from the caller's point (parent step and spawn path)
        answers; else, in a run recorded before spawn paths (or after a
        re-ask moved positions), the first one recorded. In a run recorded
        with spawn paths, see :meth:`IdenticalRequests.answer`: ``patient``
        (default) leaves a step another flow may still ask for to that flow.
        """
        first = self._idx.find(turn, kind, name, key)
        if first is None and self._idx.causal and self._idx.frames is not None:
            self._idx.load_all()  # causal turns: a later frame may hold an earlier turn's step
            first = self._idx.find(turn, kind, name, key)
        if first is None or issue is None or _position(first) is None:
            return first
        if _position(first) == issue.position:
            return first
        self._idx.load_all()  # concurrent identical requests: look at every one recorded
        alive = [
            s
            for s in self._idx.by_turn_key.get((turn, kind, name, key), ())
            if s.seq in self._idx.steps
        ]
        for step in alive:
            if _position(step) == issue.position:
                return step
        siblings = [s for s in alive if _point(s) == issue.point]
        if siblings:
            return min(siblings, key=lambda s: (_position(s) or (0, (), 0))[2])
        if self._idx.spawn_rule and not self.superseded:
            complete = self.run_end is not None
            return self.callers.answer(alive, issue, patient=patient, complete=complete)
        return first

    def _lookup(
        self,
        head: RecordedStep,
        turn: int | None,
        kind: str,
        name: str,
        key: str,
        issue: Issue | None,
        *,
        patient: bool,
    ) -> tuple[RecordedStep | None, int]:
        """:meth:`_find_issued` in the caller's turn, else in the first unconsumed step's.

        Returns:
            The step found (or None) and the turn it was looked for in last.
        """
        if turn is None:
            turn = head.turn
        match = self._find_issued(turn, kind, name, key, issue, patient=patient)
        adrift = issue is None or issue.adrift
        if match is None and head.turn != turn and (adrift or not self._idx.causal_turns):
            # journals recorded before turns were causal number turns by completion, and so
            # does a thread that lost the run's context; otherwise a step of another turn is
            # another call's (CONTRACT C1: a step moved across a model step diverges)
            turn = head.turn
            match = self._find_issued(turn, kind, name, key, issue, patient=patient)
        return match, turn

    def _take_own(self, kind: str, name: str, key: str) -> RecordedStep | None:
        """The step :meth:`claim_pending` just found at the caller's own position, if still it."""
        own, self._own = self._own, None
        if own is None or own.seq not in self._idx.steps:
            return None
        return own if (own.kind, own.name, own.key) == (kind, name, key) else None

    def claim_pending(
        self, kind: str, name: str, args: Any, key: str, *, turn: int, issue: Issue | None
    ) -> bool:
        """True when the step asked for at ``issue`` waits for another flow to ask first.

        So when nothing is recorded at the caller's own position and point,
        but an identical request is recorded at another flow's point that
        flow may still ask for (:meth:`IdenticalRequests.answer`): it is that flow's
        unless the flow takes another step there. The caller waits a moment
        and asks again (a flow started with it issues at once).
        """
        if issue is None or kind not in ISSUED_KINDS or not self._idx.spawn_rule:
            return False
        if self.superseded or self.policy.rule(kind) == "lenient":
            return False
        if self._ignore:
            key = call_key(name, match_view(args, self._ignore, kind=kind))
        head = self._idx.head()
        if head is None:
            return False
        found = self._lookup(head, turn, kind, name, key, issue, patient=False)[0]
        if found is not None and _position(found) == issue.position:
            self._own = found  # the usual case: :meth:`match` takes it without looking again
            return False
        if found is None:
            return False
        if self.run_end is not None and not self.callers.repeated(kind, name, key):
            return False  # one request of its kind: whoever asks for it is its caller
        return self._lookup(head, turn, kind, name, key, issue, patient=True)[0] is None

    def frontier(self, kind: str, name: str, issue: Issue | None) -> bool:
        """True when model or tool step ``name``, asked at ``issue``, is past its flow's record.

        See :func:`~._frontier.past_flow_record`.
        """
        if issue is None or kind not in ISSUED_KINDS:
            return False
        self._idx.load_all()
        return past_flow_record(
            self._idx, kind, issue, reorders=self._reorders, claimable=self.callers.claimable
        )

    def sibling_pending(self, kind: str, name: str, issue: Issue | None) -> bool:
        """True when only steps of other calls issued from ``issue``'s point block it.

        Such a step may belong to a sibling flow (a thread or task started
        from the same point) that has not asked for it yet: the caller waits
        a moment for it before it calls the drift a divergence. False when a
        step of this very call (same kind, name and position) is recorded
        there: that is drift of its arguments, nothing to wait for; unless the
        caller's flow is shared (:attr:`~._flows.Issue.shared`), whose position
        is only its arrival order: any step recorded there may be a sibling's.
        """
        if issue is None or kind not in ISSUED_KINDS or self.superseded:
            return False
        kinds = self._idx.positioned | {"model"}
        steps = self._from_same_point(
            [s for s in self._idx.order if s.seq in self._idx.steps and s.kind in kinds], issue
        )
        here = issue.position
        if issue.shared:
            return bool(steps)
        return bool(steps) and not any(
            s.kind == kind and s.name == name and _position(s) == here for s in steps
        )

    @staticmethod
    def _from_same_point(steps: list[RecordedStep], issue: Issue) -> list[RecordedStep]:
        """The steps recorded at ``issue``'s point: its parent and spawn path."""
        return [s for s in steps if _point(s) == issue.point]

    @property
    def exhausted(self) -> bool:
        """True when every recorded step was consumed."""
        return self._idx.head() is None

    def nothing_opened_after(self, seq: int) -> bool:
        """True when no unconsumed recorded step was opened after frame ``seq``, and no end.

        Steps opened before it may be left: calls issued together with the
        step whose outcome ``seq`` is (a parallel batch) that the loop has not
        asked for again yet. Loads the rest of the journal.
        """
        self._idx.load_all()
        return self.run_end is None and all(s.seq < seq for s in self.remaining())

    def remaining(self) -> list[RecordedStep]:
        """Return the unconsumed recorded steps (loads the rest of the journal)."""
        return self._idx.remaining()

    # -- matching --------------------------------------------------------------

    def consume(self, step: RecordedStep) -> RecordedStep:
        """Mark ``step`` used; make sure its outcome is known if it looks in flight."""
        self._idx.consume(step)
        self._recent.append(step.describe())
        if self._warns:
            self._replayed.add((step.kind, step.name, step.key))
        return step

    def match(
        self,
        kind: str,
        name: str,
        args: Any,
        key: str,
        *,
        turn: int | None = None,
        issue: Issue | None = None,
        patient: bool = True,
        harmless: bool = False,
    ) -> RecordedStep | None:
        """Return the recorded step that answers this call, or None to go live.

        Args:
            kind: ``"model"``, ``"tool"`` or ``"value"``.
            name: the step name.
            args: the canonical (redacted) arguments.
            key: :func:`~redrive.frames.call_key` of the match view of ``args``.
            turn: the caller's turn (None: the turn of the first unconsumed step).
            issue: where the caller issued a model or tool step (matches
                identical requests to the caller that made them), or None.
            patient: leave a step a sibling flow may still ask for to it (False
                once the caller waited for the sibling: see :meth:`claim_pending`).
            harmless: a tool call declared read-only or restart-safe (a lenient
                rule lets it go live whatever waits).

        Raises:
            DivergenceError: a strict or warn rule found no matching step where
                the record has one; or a lenient rule found none for a
                side-effecting tool call while a recorded side effect waits.
        """
        if self._ignore:
            key = call_key(name, match_view(args, self._ignore, kind=kind))
        rule = self.policy.rule(kind)
        if rule == "lenient":
            found = self._idx.first_alive(self._idx.by_key, (kind, name, key))
            if found is not None and issue is not None and _position(found) is not None:
                # identical requests: the one that is the caller's (see by_content)
                found = by_content(self._idx, kind, name, key, turn, issue)
            if found is None and kind == "tool":
                # no recorded call has these arguments; but a call of this tool whose
                # outcome is unknown must not be silently followed by another one
                found = self._idx.unsettled_side_effect(name)
            if found is None and kind == "tool" and not harmless:
                # no new side effect while a recorded one waits (CONTRACT C4)
                waiting = self._idx.side_effect_waiting()
                if waiting is not None:
                    raise self.divergence(waiting, Found(kind, name, key, args))
            return self.consume(found) if found is not None else None
        head = self._idx.head()
        if head is None:
            return None
        match = self._take_own(kind, name, key)
        if match is None:
            match, turn = self._lookup(head, turn, kind, name, key, issue, patient=patient)
        elif turn is None:
            turn = match.turn
        if match is not None:
            self._check_turn_order(match, kind, name, key, args)
            return self.consume(match)
        if self.frontier(kind, name, issue):
            return None  # this flow's record ends here, other flows' goes on: go live
        window = self._idx.window(turn)
        same_name = [s for s in window if s.kind == kind and s.name == name]
        if rule == "warn" and issue is not None:
            # drift is a call's arguments changing: only the step recorded at the caller's
            # own position drifted; one at another position is another call's (inserted)
            same_name = [s for s in same_name if _position(s) in (None, issue.position)]
        if rule == "warn":  # warn hands back a recorded outcome: one in flight has none
            same_name = [s for s in same_name if s.kind != "tool" or s.end is not None]
        if rule == "warn" and (kind, name, key) in self._replayed:
            # the record has this very request, already replayed: the code makes it again
            # (moved, repeated), which is no drift of the step recorded here (strict)
            same_name = []
        if rule == "warn" and kind == "tool" and same_name:
            # a side-effecting tool never gets another call's outcome: for it drift is
            # strict (the drifted call may be a different call, not yet recorded)
            replayable = [s for s in same_name if s.harmless]
            if not replayable:
                raise self.divergence(same_name[0], Found(kind, name, key, args))
            same_name = replayable
        if rule == "warn" and same_name:
            step = same_name[0]
            self._check_turn_order(step, kind, name, key, args)
            diff = diff_values(step.args, args)
            drift = ReplayDriftWarning(
                f"run {self.run_id!r} seq {step.seq}: {kind} {name} drifted from its record; "
                f"replaying the recorded outcome.\n{format_diff(diff)}"
            )
            drift.run_id, drift.seq, drift.kind, drift.name = self.run_id, step.seq, kind, name
            drift.recorded, drift.replayed, drift.diff = step.args, args, diff
            warnings.warn(drift, stacklevel=4)
            return self.consume(step)
        expected = same_name[0] if same_name else head
        raise self.divergence(expected, Found(kind, name, key, args))

    def key_of(self, kind: str, name: str, args: Any) -> str:
        """The key ``args`` match recorded steps by (the policy's ``ignore`` paths left out)."""
        return call_key(name, match_view(args, self._ignore, kind=kind))

    def waiting_calls(
        self, kind: str, name: str, args: Any, key: str, *, turn: int | None, issue: Issue | None
    ) -> list[RecordedStep]:
        """The unconsumed steps of (kind, name) that may answer a call whose key none has.

        Empty when a step with the call's key is recorded where :meth:`match`
        looks (the usual case). Else the steps of the caller's turn (every
        unconsumed one under a lenient rule), the one recorded at the caller's
        issue position first. Nothing is consumed.
        """
        if self._ignore:
            key = self.key_of(kind, name, args)
        if self.policy.rule(kind) == "lenient":
            if self._idx.first_alive(self._idx.by_key, (kind, name, key)) is not None:
                return []
            pool = [s for s in self._idx.order if s.seq in self._idx.steps]
        else:
            head = self._idx.head()
            if head is None:
                return []
            turns = dict.fromkeys([head.turn if turn is None else turn, head.turn])
            if any(self._find_issued(t, kind, name, key, issue) is not None for t in turns):
                return []
            pool = [s for t in turns for s in self._idx.window(t)]
        here = issue.position if issue is not None else None
        same = [s for s in pool if s.kind == kind and s.name == name]
        return sorted(same, key=lambda s: (_position(s) != here, s.seq))

    def drift_window(self, turn: int) -> tuple[RecordedStep | None, bool]:
        """For a drifted model step of ``turn``: the turn's unconsumed model step, and others.

        Returns:
            ``(model step or None, True when tool or value steps of the turn are unconsumed)``.
        """
        window = self._idx.window(turn)
        model = next((s for s in window if s.kind == "model"), None)
        return model, any(s.kind != "model" for s in window)

    def side_effect_waiting(self) -> RecordedStep | None:
        """The first unconsumed side-effecting tool step, if any (any flow's; CONTRACT C4)."""
        return self._idx.side_effect_waiting()

    def supersede(self, step: RecordedStep) -> None:
        """Drop a recorded model step the run re-asks live (it is never replayed)."""
        self._idx.supersede(step)

    def _check_turn_order(
        self, step: RecordedStep, kind: str, name: str, key: str, args: Any
    ) -> None:
        """Tool and value steps of a turn commute; a model step comes after them.

        ``kind``, ``name``, ``key`` and ``args`` are the step asked for (the
        error's :class:`Found`, built only when it is raised).

        Raises:
            DivergenceError: a model step is asked for while a tool or value
                step recorded before it in its turn is still unconsumed.
        """
        if step.kind != "model":
            return
        issue = step.data.get("issue")
        if isinstance(issue, dict):
            # recorded with its issue position: it follows exactly the tool steps its
            # flow completed before issuing it (concurrent ones commute with it)
            for seq in issue.get("after") or ():
                earlier = self._idx.steps.get(seq) if isinstance(seq, int) else None
                if earlier is not None:
                    raise self.divergence(earlier, Found(kind, name, key, args))
            return
        before = self._idx.first_alive(self._idx.turn_others, step.turn)
        if before is not None and before.seq < step.seq:
            raise self.divergence(before, Found(kind, name, key, args))

    def _closest_same(self, found: Found) -> RecordedStep | None:
        """The first unconsumed recorded step of the same kind and name as ``found``, if any."""
        return next(
            (
                s
                for s in self._idx.order
                if s.seq in self._idx.steps and s.kind == found.kind and s.name == found.name
            ),
            None,
        )

    def divergence(self, step: RecordedStep, found: Found) -> DivergenceError:
        """Build the :class:`DivergenceError` for a recorded step and the step asked for.

        See :func:`~._divergence.divergence_error`; the diff is taken against the
        nearest unconsumed recorded step of the asked-for kind and name when the
        step at this point is of another kind or name.
        """
        same = step.kind == found.kind and step.name == found.name
        return divergence_error(
            self.run_id,
            step,
            found,
            closest=None if same else self._closest_same(found),
            recent=list(self._recent),
        )
