"""The recorded steps of a run not yet replayed, read lazily, and the indexes over them.

:class:`RecordedIndex` is what the cursor (:mod:`._cursor`) matches against:
frames are read from an iterator as far as a match needs, so a strict replay
holds only the steps of the current turn and a little look-ahead.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from re import Pattern
from typing import Any

from ..frames import Frame, Kind, call_key
from ._callers import IdenticalRequests, position
from ._fingerprint import REASKED
from ._flows import FLOWS_FLAG, SPAWN_RULE
from ._policy import match_view
from ._steps import RecordedStep, StepReader

__all__ = ["CAUSAL_TURNS", "ISSUED_KINDS", "RecordedIndex"]

#: Kinds as plain strings (a frame's kind is a str; an enum member read off its class
#: costs several times the comparison)
_RUN_START = Kind.RUN_START.value
_NOTE = Kind.NOTE.value
#: The ``turns`` run flag of runs whose model and tool steps record where they were issued.
CAUSAL_TURNS = "causal"
#: The step kinds that record where they were issued (their ``issue`` field).
ISSUED_KINDS = frozenset({"model", "tool"})


class RecordedIndex:
    """The unconsumed recorded steps of one run read so far, indexed by turn, key and order.

    Args:
        run_id: the run.
        frames: its frames in seq order (consumed lazily).
        ignore: compiled ``ignore`` paths of the replay policy (left out of keys).

    Consumed steps leave the indexes eagerly when at the front (the usual,
    in-order case) and lazily otherwise.
    """

    def __init__(
        self, run_id: str, frames: Iterator[Frame], ignore: tuple[Pattern[str], ...]
    ) -> None:
        self.frames: Iterator[Frame] | None = frames
        self.ignore = ignore
        self.reader = StepReader(run_id)
        #: the unconsumed steps read so far, by seq
        self.steps = self.reader.steps
        self.order: collections.deque[RecordedStep] = collections.deque()
        self.by_turn: dict[int, collections.deque[RecordedStep]] = {}
        self.by_turn_key: dict[tuple[int, str, str, str], collections.deque[RecordedStep]] = {}
        self.turn_others: dict[int, collections.deque[RecordedStep]] = {}
        self.by_key: dict[tuple[str, str, str], collections.deque[RecordedStep]] = {}
        self.max_loaded_turn = -1
        #: the step kinds whose opening frames record where they were issued: both for a
        #: run flagged ``turns: causal``; for runs recorded before the flag, the kinds seen
        #: with an ``issue`` field (model requests only, in journals of 2026-11)
        self.positioned: set[str] = set()
        self.saw_model = False
        #: seqs of recorded model steps superseded by a re-ask (``reasked`` notes read)
        self.superseded: list[int] = []
        #: True for a run whose steps' positions carry spawn paths (``flows: spawn`` flag):
        #: a step recorded at another flow's point never answers a caller
        self.spawn_rule = False
        #: True for a run flagged ``turns: causal``: a step's turn counts the model steps
        #: along its own flow's path, the same in every execution of unchanged code
        self.causal_turns = False
        #: which of identical requests recorded at other points answers a caller
        self.callers = IdenticalRequests()
        #: the flow that issued each positioned step, as the branch points ``(parent seq,
        #: spawn index)`` from the root down to it (consumed or not; a step of the root's
        #: own flow, ``()``, is not kept): tells a flow's own record, issued from a later
        #: point of its starter, from a sibling's (see :mod:`._frontier`)
        self.lineage: dict[int, tuple[tuple[int, int], ...]] = {}
        #: the seq of the last frame read (a larger seq is a step of this execution)
        self.read_to = -1

    def load_one(self) -> bool:
        if self.frames is None:
            return False
        frame = next(self.frames, None)
        if frame is None:
            self.frames = None
            return False
        step = self.reader.feed(frame)
        self.read_to = frame.seq
        if step is None:
            if frame.kind == _RUN_START:
                self.read_flags()
            elif frame.kind == _NOTE and frame.name == REASKED:
                # a model step re-asked live after a code change: its record is superseded
                ref = frame.data().get("step")
                if isinstance(ref, int):
                    self.reader.forget(ref)
                    self.superseded.append(ref)
            return True
        if self.ignore:
            step.key = call_key(step.name, match_view(step.args, self.ignore, kind=step.kind))
        self.order.append(step)
        turn, kind = step.turn, step.kind
        # each index's queue made only when missing (setdefault built a deque every time)
        indexes: tuple[tuple[dict[Any, collections.deque[RecordedStep]] | None, Any], ...] = (
            (self.by_turn, turn),
            (self.by_turn_key, (turn, kind, step.name, step.key)),
            (self.turn_others if kind != "model" else None, turn),
            (self.by_key, (kind, step.name, step.key)),
        )
        for index, key in indexes:
            if index is not None:
                queue = index.get(key)
                if queue is None:
                    queue = index[key] = collections.deque()
                queue.append(step)
        if kind == "model":
            self.saw_model = True
        if turn > self.max_loaded_turn:
            self.max_loaded_turn = turn
        if step.kind in ISSUED_KINDS and "issue" in step.data:
            self.positioned.add(step.kind)
            found = position(step)
            if found is not None:
                parent, spawn, _occ = found
                lineage = self.lineage.get(parent, ()) + tuple((parent, i) for i in spawn)
                if lineage:
                    self.lineage[step.seq] = lineage
            if self.spawn_rule:
                self.callers.read(step)
        return True

    def read_flags(self) -> None:
        """Know the run's turn rule up front from its ``run_start`` flags."""
        flags = (self.run_start or {}).get("flags")
        if isinstance(flags, dict) and flags.get("turns") == CAUSAL_TURNS:
            self.positioned.update(ISSUED_KINDS)
            self.causal_turns = True
        if isinstance(flags, dict) and flags.get(FLOWS_FLAG) == SPAWN_RULE:
            self.spawn_rule = True

    @property
    def causal(self) -> bool:
        """True when steps record where they were issued: turns are causal.

        A later frame may then belong to an earlier turn, so a miss looks
        through the whole record.
        """
        return bool(self.positioned)

    @property
    def run_start(self) -> dict[str, Any] | None:
        """The decoded ``run_start`` payload, once read."""
        return self.reader.run_start

    def load_all(self) -> None:
        while self.load_one():
            pass

    def head(self) -> RecordedStep | None:
        while True:
            while self.order and self.order[0].seq not in self.steps:
                self.order.popleft()
            if self.order:
                return self.order[0]
            if not self.load_one():
                return None

    def window(self, turn: int) -> list[RecordedStep]:
        """Every unconsumed step of ``turn`` (loads the whole turn; the slow path)."""
        while self.frames is not None and (self.causal or self.max_loaded_turn <= turn):
            self.load_one()
        return [s for s in self.by_turn.get(turn, ()) if s.seq in self.steps]

    def first_alive(
        self, index: dict[Any, collections.deque[RecordedStep]], key: Any
    ) -> RecordedStep | None:
        queue = index.get(key)
        while queue and queue[0].seq not in self.steps:
            queue.popleft()
        if not queue:
            index.pop(key, None)
            return None
        return queue[0]

    def find(self, turn: int, kind: str, name: str, key: str) -> RecordedStep | None:
        """The first unconsumed step of ``turn`` equal to (kind, name, key), loading lazily.

        Loads only as far as needed: for a loop that replays in order the match
        is the next step, so memory stays bounded however long the journal.
        """
        while True:
            step = self.first_alive(self.by_turn_key, (turn, kind, name, key))
            if step is not None or self.frames is None or self.max_loaded_turn > turn:
                return step
            self.load_one()

    def consume(self, step: RecordedStep) -> None:
        """Mark ``step`` used; read on until its outcome is known if it looks in flight."""
        # its outcome usually follows within a few frames; a step truly in flight
        # (the crash point) reads to the end once
        while not step.settled and step.kind != "value" and self.load_one():
            pass
        self.reader.forget(step.seq)
        for index, key in (
            (self.by_turn, step.turn),
            (self.by_turn_key, (step.turn, step.kind, step.name, step.key)),
            (self.turn_others, step.turn),
            (self.by_key, (step.kind, step.name, step.key)),
        ):
            self.first_alive(index, key)  # drops consumed steps from the front

    def supersede(self, step: RecordedStep) -> None:
        """Drop a recorded model step the run re-asks live (it is never replayed)."""
        self.reader.forget(step.seq)
        for index, key in (
            (self.by_turn, step.turn),
            (self.by_turn_key, (step.turn, step.kind, step.name, step.key)),
            (self.by_key, (step.kind, step.name, step.key)),
        ):
            self.first_alive(index, key)
        self.superseded.append(step.seq)

    def side_effect_waiting(self) -> RecordedStep | None:
        """The first unconsumed side-effecting tool step (finished or in flight), if any.

        Any flow's: a new side effect is refused while one waits (CONTRACT C4;
        a step of a concurrent flow is counted too, which errs on the side of
        stopping).
        """
        return next((s for s in self.remaining() if s.kind == "tool" and not s.harmless), None)

    def unsettled_side_effect(self, name: str) -> RecordedStep | None:
        """An unconsumed in-flight call of tool ``name`` that is not restart safe, if any."""
        return next(
            (
                s
                for s in self.order
                if s.seq in self.steps
                and s.kind == "tool"
                and s.name == name
                and s.end is None
                and not s.harmless
            ),
            None,
        )

    def remaining(self) -> list[RecordedStep]:
        """The unconsumed recorded steps (loads the rest of the journal)."""
        self.load_all()
        return [s for s in self.order if s.seq in self.steps]
