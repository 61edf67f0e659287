"""The cursor over a run's recorded steps, and the matcher (pure: no I/O of its own).

Frames are read lazily from an iterator: a strict replay holds only the
steps of the current turn and a little look-ahead, so memory does not grow
with the journal. A lenient rule needs the whole index and loads it.
"""

from __future__ import annotations

import collections
import shlex
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

from .._advice import divergence_next_steps, render_next_steps
from ..errors import DivergenceError
from ..frames import Frame, Kind, call_key
from ..storage import parse_journal_url
from ._delta import Expander
from ._diff import caller_location, diff_values, format_diff, short
from ._fingerprint import REASKED
from ._policy import ReplayPolicy, match_view
from ._steps import STEP_KINDS, RecordedStep, StepReader

if TYPE_CHECKING:
    from ._state import Issue

__all__ = [
    "CAUSAL_TURNS",
    "Cursor",
    "ISSUED_KINDS",
    "RecordedStep",
    "ReplayDriftWarning",
    "STEP_KINDS",
]


#: The ``turns`` run flag of runs whose model and tool steps record where they were issued.
CAUSAL_TURNS = "causal"
#: The step kinds that record where they were issued (their ``issue`` field).
ISSUED_KINDS = frozenset({"model", "tool"})


class ReplayDriftWarning(UserWarning):
    """A step drifted from its record and was replayed anyway (policy ``"warn"``).

    Attributes:
        run_id: the run.
        seq: the recorded step's seq.
        kind: the step's kind (``"model"``, ``"tool"``, ``"value"``).
        name: the step's name.
        recorded: the recorded canonical arguments.
        replayed: the canonical arguments asked for now (``redrive check --update``
            writes them into an updated fixture).
        diff: ``(path, recorded, replayed)`` leaves.
    """

    run_id: str | None = None
    seq: int | None = None
    kind: str | None = None
    name: str | None = None
    recorded: Any = None
    replayed: Any = None
    diff: list[tuple[str, Any, Any]] | None = None


@attrs.frozen
class Found:
    """The step the replayed loop asked for."""

    kind: str
    name: str
    key: str
    args: Any


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
        self._frames: Iterator[Frame] | None = frames
        self._ignore = policy.ignore_patterns
        self._reader = StepReader(run_id)
        #: the unconsumed steps read so far, by seq
        self._steps = self._reader.steps
        self._order: collections.deque[RecordedStep] = collections.deque()
        # indexes over the loaded, unconsumed steps; consumed steps leave them eagerly
        # when at the front (the usual, in-order case) and lazily otherwise
        self._by_turn: dict[int, collections.deque[RecordedStep]] = {}
        self._by_turn_key: dict[tuple[int, str, str, str], collections.deque[RecordedStep]] = {}
        self._turn_others: dict[int, collections.deque[RecordedStep]] = {}
        self._by_key: dict[tuple[str, str, str], collections.deque[RecordedStep]] = {}
        self._max_loaded_turn = -1
        #: the step kinds whose opening frames record where they were issued: both for a
        #: run flagged ``turns: causal``; for runs recorded before the flag, the kinds seen
        #: with an ``issue`` field (model requests only, in journals of 2026-11)
        self._positioned: set[str] = set()
        self._saw_model = False
        self._recent: collections.deque[str] = collections.deque(maxlen=5)
        #: seqs of recorded model steps superseded by a re-ask (``reasked`` notes read)
        self.superseded: list[int] = []
        if "lenient" in (policy.tool, policy.model, policy.value):
            self._load_all()

    # -- loading -------------------------------------------------------------

    def _load_one(self) -> bool:
        if self._frames is None:
            return False
        frame = next(self._frames, None)
        if frame is None:
            self._frames = None
            return False
        step = self._reader.feed(frame)
        if step is None:
            if frame.kind == Kind.RUN_START.value:
                self._read_flags()
            elif frame.kind == Kind.NOTE.value and frame.name == REASKED:
                # a model step re-asked live after a code change: its record is superseded
                ref = frame.data().get("step")
                if isinstance(ref, int):
                    self._reader.forget(ref)
                    self.superseded.append(ref)
            return True
        if self._ignore:
            step.key = call_key(step.name, match_view(step.args, self._ignore, kind=step.kind))
        self._order.append(step)
        self._by_turn.setdefault(step.turn, collections.deque()).append(step)
        self._by_turn_key.setdefault(
            (step.turn, step.kind, step.name, step.key), collections.deque()
        ).append(step)
        if step.kind != "model":
            self._turn_others.setdefault(step.turn, collections.deque()).append(step)
        self._by_key.setdefault((step.kind, step.name, step.key), collections.deque()).append(step)
        self._max_loaded_turn = max(self._max_loaded_turn, step.turn)
        if step.kind == "model":
            self._saw_model = True
        if step.kind in ISSUED_KINDS and "issue" in step.data:
            self._positioned.add(step.kind)
        return True

    def _read_flags(self) -> None:
        """Know the run's turn rule up front from its ``run_start`` flags."""
        flags = (self.run_start or {}).get("flags")
        if isinstance(flags, dict) and flags.get("turns") == CAUSAL_TURNS:
            self._positioned.update(ISSUED_KINDS)

    @property
    def _causal(self) -> bool:
        """True when steps record where they were issued: turns are causal.

        A later frame may then belong to an earlier turn, so a miss looks
        through the whole record.
        """
        return bool(self._positioned)

    @property
    def run_start(self) -> dict[str, Any] | None:
        """The decoded ``run_start`` payload, once read."""
        return self._reader.run_start

    @property
    def run_end(self) -> dict[str, Any] | None:
        """The decoded ``run_end`` payload, once read."""
        return self._reader.run_end

    @property
    def frames_read(self) -> int:
        """How many frames were read so far."""
        return self._reader.frames_read

    @property
    def expander(self) -> Expander:
        """The last full model request per step name (to resolve prefix deltas)."""
        return self._reader.expander

    def _load_all(self) -> None:
        while self._load_one():
            pass

    def _head(self) -> RecordedStep | None:
        while True:
            while self._order and self._order[0].seq not in self._steps:
                self._order.popleft()
            if self._order:
                return self._order[0]
            if not self._load_one():
                return None

    def _window(self, turn: int) -> list[RecordedStep]:
        """Every unconsumed step of ``turn`` (loads the whole turn; the slow path)."""
        while self._frames is not None and (self._causal or self._max_loaded_turn <= turn):
            self._load_one()
        return [s for s in self._by_turn.get(turn, ()) if s.seq in self._steps]

    def _first_alive(
        self, index: dict[Any, collections.deque[RecordedStep]], key: Any
    ) -> RecordedStep | None:
        queue = index.get(key)
        while queue and queue[0].seq not in self._steps:
            queue.popleft()
        if not queue:
            index.pop(key, None)
            return None
        return queue[0]

    def _find(self, turn: int, kind: str, name: str, key: str) -> RecordedStep | None:
        """The first unconsumed step of ``turn`` equal to (kind, name, key), loading lazily.

        Loads only as far as needed: for a loop that replays in order the match
        is the next step, so memory stays bounded however long the journal.
        """
        while True:
            step = self._first_alive(self._by_turn_key, (turn, kind, name, key))
            if step is not None or self._frames is None or self._max_loaded_turn > turn:
                return step
            self._load_one()

    def _find_issued(
        self, turn: int, kind: str, name: str, key: str, issue: Issue | None
    ) -> RecordedStep | None:
        """The step of ``turn`` equal to (kind, name, key) that answers the caller at ``issue``.

        Among identical recorded requests, the one recorded at the caller's
        issue position (same parent step, same occurrence) answers it, so each
        concurrent caller gets the outcome it got live, whatever the order the
        calls completed in. Without a recorded position (journals recorded
        before it; tool steps before the ``causal`` run flag), or when none is
        recorded at the caller's position (a retried request), the earliest
        one issued from the caller's parent step answers, else the first one
        recorded.
        """
        first = self._find(turn, kind, name, key)
        if first is None and self._causal and self._frames is not None:
            self._load_all()  # causal turns: a later frame may hold an earlier turn's step
            first = self._find(turn, kind, name, key)
        if first is None or issue is None or _position(first) is None:
            return first
        if _position(first) == (issue.parent, issue.occ):
            return first
        self._load_all()  # concurrent identical requests: look at every one recorded
        alive = [
            s for s in self._by_turn_key.get((turn, kind, name, key), ()) if s.seq in self._steps
        ]
        for step in alive:
            if _position(step) == (issue.parent, issue.occ):
                return step
        siblings = [s for s in alive if (_position(s) or (None, 0))[0] == issue.parent]
        if siblings:
            return min(siblings, key=lambda s: (_position(s) or (0, 0))[1])
        return first

    def frontier(self, kind: str, name: str, issue: Issue | None) -> bool:
        """True when model or tool step ``name``, asked at ``issue``, is past its flow's record.

        A worker that stopped mid-run leaves each flow's record ending where
        that flow was, and steps of other flows may be recorded after it: a
        flow past its own record goes live although other flows' steps are
        still to be replayed. That is so when the run did not end (no
        ``run_end``), its steps were recorded with issue positions (journals
        recorded before them keep the strict rule: before the ``causal`` run
        flag, only model steps had positions, so only they may go live here),
        and none is recorded at this one (one there with other arguments is a
        divergence). Threads that race to issue from one point take their
        positions in the order they reach it, so for them a position names
        the flow only when the loop orders their first calls.
        """
        if issue is None or kind not in ISSUED_KINDS:
            return False
        self._load_all()
        if self.superseded:
            # a model step was re-asked live (on_drift="continue_live"): the steps after it
            # carry other issue positions than their record, so no flow's record can be told
            # to end here; a step that matches nothing diverges (a drifted tool never runs)
            return False
        if self.run_end is not None or (self._saw_model and "model" not in self._positioned):
            return False
        if kind != "model" and kind not in self._positioned:
            return False
        kinds = self._positioned | {"model"}
        steps = [s for s in self._order if s.seq in self._steps and s.kind in kinds]
        if any(_position(s) is None for s in steps):
            return False
        # any step recorded from this flow's point and not yet replayed keeps it from going
        # live: a renamed or dropped call must diverge, not run the calls after it live
        return not self._from_same_point(steps, issue)

    def sibling_pending(self, kind: str, name: str, issue: Issue | None) -> bool:
        """True when only steps of other calls issued from ``issue``'s point block it.

        Such a step may belong to a sibling flow (a thread or task started
        from the same point) that has not asked for it yet: the caller waits
        a moment for it before it calls the drift a divergence. False when a
        step of this very call (same kind, name and position) is recorded
        there: that is drift of its arguments, nothing to wait for.
        """
        if issue is None or kind not in ISSUED_KINDS or self.superseded:
            return False
        kinds = self._positioned | {"model"}
        steps = self._from_same_point(
            [s for s in self._order if s.seq in self._steps and s.kind in kinds], issue
        )
        here = (issue.parent, issue.occ)
        return bool(steps) and not any(
            s.kind == kind and s.name == name and _position(s) == here for s in steps
        )

    @staticmethod
    def _from_same_point(steps: list[RecordedStep], issue: Issue) -> list[RecordedStep]:
        return [s for s in steps if (_position(s) or (None, 0))[0] == issue.parent]

    @property
    def exhausted(self) -> bool:
        """True when every recorded step was consumed."""
        return self._head() is None

    def nothing_opened_after(self, seq: int) -> bool:
        """True when no unconsumed recorded step was opened after frame ``seq``, and no end.

        Steps opened before it may be left: calls issued together with the
        step whose outcome ``seq`` is (a parallel batch) that the loop has not
        asked for again yet. Loads the rest of the journal.
        """
        self._load_all()
        return self.run_end is None and all(s.seq < seq for s in self.remaining())

    def remaining(self) -> list[RecordedStep]:
        """Return the unconsumed recorded steps (loads the rest of the journal)."""
        self._load_all()
        return [s for s in self._order if s.seq in self._steps]

    # -- matching --------------------------------------------------------------

    def consume(self, step: RecordedStep) -> RecordedStep:
        """Mark ``step`` used; make sure its outcome is known if it looks in flight."""
        # its outcome usually follows within a few frames; a step truly in flight
        # (the crash point) reads to the end once
        while not step.settled and step.kind != "value" and self._load_one():
            pass
        self._reader.forget(step.seq)
        for index, key in (
            (self._by_turn, step.turn),
            (self._by_turn_key, (step.turn, step.kind, step.name, step.key)),
            (self._turn_others, step.turn),
            (self._by_key, (step.kind, step.name, step.key)),
        ):
            self._first_alive(index, key)  # drops consumed steps from the front
        self._recent.append(step.describe())
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

        Raises:
            DivergenceError: a strict or warn rule found no matching step where
                the record has one.
        """
        if self._ignore:
            key = call_key(name, match_view(args, self._ignore, kind=kind))
        rule = self.policy.rule(kind)
        if rule == "lenient":
            found = self._first_alive(self._by_key, (kind, name, key))
            if found is not None and issue is not None and _position(found) is not None:
                # identical requests in flight together: the one its caller issued
                found = next(
                    (
                        s
                        for s in self._by_key[(kind, name, key)]
                        if s.seq in self._steps and _position(s) == (issue.parent, issue.occ)
                    ),
                    found,
                )
            if found is None and kind == "tool":
                # no recorded call has these arguments; but a call of this tool whose
                # outcome is unknown must not be silently followed by another one
                found = self._unsettled_side_effect(name)
            return self.consume(found) if found is not None else None
        head = self._head()
        if head is None:
            return None
        if turn is None:
            turn = head.turn
        match = self._find_issued(turn, kind, name, key, issue)
        if match is None and head.turn != turn:
            # journals recorded before turns were causal number turns by completion
            turn = head.turn
            match = self._find_issued(turn, kind, name, key, issue)
        if match is not None:
            self._check_turn_order(match, Found(kind, name, key, args))
            return self.consume(match)
        if self.frontier(kind, name, issue):
            return None  # this flow's record ends here, other flows' goes on: go live
        window = self._window(turn)
        same_name = [s for s in window if s.kind == kind and s.name == name]
        if rule == "warn" and kind == "tool" and same_name:
            # a side-effecting tool never gets another call's outcome: for it drift is
            # strict (the drifted call may be a different call, not yet recorded)
            harmless = [s for s in same_name if _harmless(s)]
            if not harmless:
                raise self.divergence(same_name[0], Found(kind, name, key, args))
            same_name = harmless
        if rule == "warn" and same_name:
            step = same_name[0]
            self._check_turn_order(step, Found(kind, name, key, args))
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

    def drift_window(self, turn: int) -> tuple[RecordedStep | None, bool]:
        """For a drifted model step of ``turn``: the turn's unconsumed model step, and others.

        Returns:
            ``(model step or None, True when tool or value steps of the turn are unconsumed)``.
        """
        window = self._window(turn)
        model = next((s for s in window if s.kind == "model"), None)
        return model, any(s.kind != "model" for s in window)

    def supersede(self, step: RecordedStep) -> None:
        """Drop a recorded model step the run re-asks live (it is never replayed)."""
        self._reader.forget(step.seq)
        for index, key in (
            (self._by_turn, step.turn),
            (self._by_turn_key, (step.turn, step.kind, step.name, step.key)),
            (self._by_key, (step.kind, step.name, step.key)),
        ):
            self._first_alive(index, key)
        self.superseded.append(step.seq)

    def _unsettled_side_effect(self, name: str) -> RecordedStep | None:
        """An unconsumed in-flight call of tool ``name`` that is not restart safe, if any."""
        return next(
            (
                s
                for s in self._order
                if s.seq in self._steps
                and s.kind == "tool"
                and s.name == name
                and s.end is None
                and not _harmless(s)
            ),
            None,
        )

    def _show_command(self) -> str:
        """The CLI command that shows this run's record."""
        if parse_journal_url(self.source).scheme == "rdj":
            return f"redrive show {shlex.quote(self.source)}"
        if self.source and self.source not in ("runs.duckdb", ":memory:"):
            return f"redrive --journal {shlex.quote(self.source)} show {shlex.quote(self.run_id)}"
        return f"redrive show {shlex.quote(self.run_id)}"

    def _check_turn_order(self, step: RecordedStep, found: Found) -> None:
        """Tool and value steps of a turn commute; a model step comes after them.

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
                earlier = self._steps.get(seq) if isinstance(seq, int) else None
                if earlier is not None:
                    raise self.divergence(earlier, found)
            return
        before = self._first_alive(self._turn_others, step.turn)
        if before is not None and before.seq < step.seq:
            raise self.divergence(before, found)

    def _closest_same(self, found: Found) -> RecordedStep | None:
        """The first unconsumed recorded step of the same kind and name as ``found``, if any."""
        return next(
            (
                s
                for s in self._order
                if s.seq in self._steps and s.kind == found.kind and s.name == found.name
            ),
            None,
        )

    def divergence(self, step: RecordedStep, found: Found) -> DivergenceError:
        """Build the :class:`DivergenceError` for a recorded step and the step asked for.

        When the step asked for is of another kind or name than the recorded
        one at this point, the diff is taken against the nearest unconsumed
        recorded step of the asked-for kind and name (if the journal has one),
        so a changed tool argument is named (``$.amount``) even when an
        unconsumed step of another kind (a model step a lenient rule left
        behind) comes first. The error's ``caller`` is the user's frame that
        asked for the step (``file:line in function``), when it can be told.
        """
        same = step.kind == found.kind and step.name == found.name
        closest = None if same else self._closest_same(found)
        if same:
            diff = diff_values(step.args, found.args)
        elif closest is not None:
            diff = diff_values(closest.args, found.args)
        else:
            diff = []
        caller = caller_location()
        lines = [
            f"run {self.run_id!r} diverged from its journal at seq {step.seq}: "
            + (
                f"the {step.kind} step {step.name!r} was called with different arguments."
                if same
                else f"the loop asked for {found.kind} {found.name!r} where the journal has "
                f"{step.kind} {step.name!r}."
            ),
            f"  recorded: {step.kind} {step.name} key {step.key}",
            f"  replayed: {found.kind} {found.name} key {found.key}",
        ]
        if caller is not None:
            lines.append(f"  called from: {caller}")
        if diff and closest is not None:
            lines.append(
                f"  differences from the nearest recorded {closest.kind} {closest.name!r} "
                f"(seq {closest.seq}; recorded -> replayed):"
            )
            lines.append(format_diff(diff))
        elif diff:
            lines.append("  differences (recorded -> replayed):")
            lines.append(format_diff(diff))
        elif not same:
            lines.append(f"  replayed arguments: {short(found.args)}")
        if self._recent:
            lines.append("  last matching steps: " + "; ".join(self._recent))
        else:
            lines.append("  no step matched before this one")
        advice = divergence_next_steps(
            run_id=self.run_id,
            seq=step.seq,
            kind=step.kind,
            side_effects_from=self._side_effects_from(step.seq),
            show=self._show_command(),
        )
        lines.append(render_next_steps(advice))
        return DivergenceError(
            "\n".join(lines),
            run_id=self.run_id,
            seq=step.seq,
            kind=step.kind,
            name=step.name,
            found_kind=found.kind,
            found_name=found.name,
            expected=step.args,
            found=found.args,
            expected_key=step.key,
            found_key=found.key,
            diff=diff,
            context=list(self._recent),
            caller=caller,
            next_steps=advice,
        )

    def _side_effects_from(self, seq: int) -> list[int]:
        """Seqs of the side-effecting tool steps recorded at or after ``seq`` (a fork's loss).

        Reads the rest of the journal (an error path). Consumed steps leave the
        order only from its front, so every step after an unconsumed one is here.
        """
        self._load_all()
        return [
            s.seq for s in self._order if s.seq >= seq and s.kind == "tool" and not _harmless(s)
        ]


def _position(step: RecordedStep) -> tuple[int, int] | None:
    """A model or tool step's recorded issue position ``(parent seq, occurrence)``, or None."""
    issue = step.data.get("issue")
    if not isinstance(issue, dict):
        return None
    parent, occ = issue.get("parent"), issue.get("occ")
    if not isinstance(parent, int) or not isinstance(occ, int):
        return None
    return parent, occ


def _harmless(step: RecordedStep) -> bool:
    """True for a recorded tool call declared read-only or restart-safe."""
    return bool(step.data.get("read_only") or step.data.get("restart_safe"))


def decode_outcome(step: RecordedStep) -> dict[str, Any]:
    """Return the decoded payload of a finished step's outcome frame.

    An alias of :meth:`RecordedStep.decode_outcome`, kept while callers move to it.
    """
    return step.decode_outcome()
