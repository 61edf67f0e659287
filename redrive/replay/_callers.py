"""Identical requests recorded by concurrent flows: which one answers which caller.

In a run recorded with spawn paths (:mod:`._flows`) each flow's steps are
recorded at its own point ``(parent, spawn)``. A caller is answered by the
step recorded at its own position; when none is recorded there, a step of
the same request recorded at another point answers it only when no other
flow may still ask for that step (the code moved the call: it started its
flows in another order, reordered a flow's tool calls of one turn, or the
call lost its context). In a complete record a request recorded once is
its asker's, whoever asks: only identical requests need their callers told
apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ._flows import recorded_position
from ._steps import RecordedStep

if TYPE_CHECKING:
    from ._flows import Issue

__all__ = ["Claimable", "IdenticalRequests", "point", "position", "started_by"]

#: ``claimable(parent, spawn, name, occ)``: True when a flow of the running run may still
#: ask for step ``name`` at that position (:meth:`FlowTracker.may_still_issue`).
Claimable = Callable[[int, tuple[int, ...], str, int], bool]


_NONE: tuple[()] = ()


def position(step: RecordedStep) -> tuple[int, tuple[int, ...], int] | None:
    """A model or tool step's recorded issue position ``(parent, spawn, occ)``, or None.

    Parsed once per step (kept on the step): matching asks for it several times.
    """
    cached = step.position_cache
    if cached is None:
        found = recorded_position(step.data.get("issue"))
        step.position_cache = cached = _NONE if found is None else found
    return cached or None


def point(step: RecordedStep) -> tuple[int, tuple[int, ...]] | None:
    """A model or tool step's recorded point ``(parent, spawn)``, or None."""
    found = position(step)
    return None if found is None else found[:2]


def _identity(kind: str, name: str, key: str) -> int:
    """A small stand-in for a request's ``(kind, name, key)`` (sets of many of them)."""
    return hash((kind, name, key))


def started_by(step: RecordedStep, issue: Issue) -> bool:
    """True when ``step`` was recorded by a flow the caller at ``issue`` starts.

    So at the caller's parent, on a spawn path that extends the caller's (a batch member
    the caller starts, or one of its descendants): among identical requests, never the
    caller's own (CONTRACT C8: callers are told apart by the flow that started them).
    """
    found = point(step)
    if found is None:
        return False
    parent, spawn = found
    mine = issue.spawn
    return parent == issue.parent and len(spawn) > len(mine) and spawn[: len(mine)] == mine


class IdenticalRequests:
    """The requests a cursor read more than once, and which copy answers which caller.

    Holds two sets of ints (one per distinct request read), not the steps.

    Attributes:
        claimable: who may still ask for a recorded position (set by the Run
            from its flow tracker); None: nobody (every step is free).
    """

    def __init__(self) -> None:
        self.claimable: Claimable | None = None
        #: seqs of steps any caller may take (their positions were taken in another
        #: execution's task structure: see :meth:`release`)
        self._released: set[int] = set()
        self._seen: set[int] = set()
        self._repeated: set[int] = set()

    def read(self, step: RecordedStep) -> None:
        """Note a positioned model or tool step the cursor read."""
        identity = _identity(step.kind, step.name, step.key)
        if identity in self._seen:
            self._repeated.add(identity)
        self._seen.add(identity)

    def repeated(self, kind: str, name: str, key: str) -> bool:
        """True when the request was recorded more than once (among the steps read)."""
        return _identity(kind, name, key) in self._repeated

    def answer(
        self, alive: list[RecordedStep], issue: Issue, *, patient: bool, complete: bool
    ) -> RecordedStep | None:
        """Which of ``alive`` (one request, recorded at other points than ``issue``'s) answers.

        A step another flow may still ask for (:attr:`claimable`: a sibling
        that has not asked yet, a flow that stands, or is about to stand, at
        the step's parent) is left to that flow while ``patient``: the caller
        waits a moment for it (:meth:`Cursor.claim_pending`), then goes live
        past its own record or diverges. Once the caller waited, the first is
        taken. Steps recorded by siblings (same parent step) come first.

        Args:
            alive: the unconsumed recorded steps of the request, in seq order.
            issue: where the caller issued it.
            patient: False once the caller waited for the other flows.
            complete: the record has the run's end: a request recorded once is
                then its asker's, whoever asks (in a record cut short, another
                flow's copy may be the one that was lost).

        Returns:
            The step that answers the caller, or None.
        """
        if not alive:
            return None
        first = alive[0]
        if complete and not self.repeated(first.kind, first.name, first.key):
            return first  # one request of its kind: whoever asks for it is its caller
        if self.repeated(first.kind, first.name, first.key):
            # a copy recorded by a flow the caller starts (at its point, deeper spawn path)
            # is that flow's: a main-flow call never takes a batch member's answer
            alive = [s for s in alive if not started_by(s, issue)]
            if not alive:
                return None
        siblings = [s for s in alive if (point(s) or (None, ()))[0] == issue.parent]
        for group in (siblings, [s for s in alive if s not in siblings]):
            free = [s for s in group if not self._claimable(s)]
            if free:
                return free[0]
            if group:
                return None if patient else group[0]
        return None

    def release(self, seq: int) -> None:
        """Let any caller take recorded step ``seq``: no flow is waited for at its position.

        For steps a framework asks again in an execution shaped otherwise than
        the one that recorded them (a LangGraph resume runs the interrupted
        task without the tasks that ran before it), so their recorded spawn
        paths name no flow of this execution.
        """
        self._released.add(seq)

    def _claimable(self, step: RecordedStep) -> bool:
        """True when a flow of the run may still ask for ``step`` at its recorded position."""
        found = position(step)
        if found is None or self.claimable is None or step.seq in self._released:
            return False
        parent, spawn, occ = found
        return self.claimable(parent, spawn, step.name, occ)
