"""Which of the unconsumed records of one request a lenient rule hands a caller (pure).

A lenient rule matches by content (:class:`~._policy.ReplayPolicy`): any unconsumed
step recorded with the call's (kind, name, key) may answer it. Among identical
records the choice keeps the record's order and its flows apart:

* a model record answers only once every step recorded before it on its flow's
  path (its parent, the parent's parent, ...) was consumed: it follows them, as a
  model step follows the steps recorded before it under strict;
* a record of a flow the caller starts (a batch member's, at the caller's point)
  is never the caller's own (CONTRACT C8, invariant 11);
* then the caller's turn first, and in it the one at the caller's issue position;
  else the first recorded.
"""

from __future__ import annotations

from ._callers import position, started_by
from ._flows import Issue
from ._recorded import RecordedIndex
from ._steps import RecordedStep

__all__ = ["ByContent"]


class ByContent:
    """The lenient choice among a run's records of one request.

    Args:
        idx: the run's recorded index; loaded whole here (a lenient rule needs all of it).
    """

    def __init__(self, idx: RecordedIndex) -> None:
        idx.load_all()
        self._idx = idx
        #: each positioned recorded step's parent (seq -> seq), consumed or not
        self._parents: dict[int, int] = {}
        for step in idx.order:
            found = position(step)
            if found is not None:
                self._parents[step.seq] = found[0]

    def answer(
        self, kind: str, name: str, key: str, turn: int | None, issue: Issue
    ) -> RecordedStep | None:
        """The unconsumed step recorded as (kind, name, key) that answers the caller.

        Args:
            kind: ``"model"`` or ``"tool"``.
            name: the step name.
            key: the request's key (the policy's ``ignore`` paths left out).
            turn: the caller's turn (None: unknown; no record is then of its turn).
            issue: where the caller issued it.

        Returns:
            The step, or None when the request is recorded only where it is not the
            caller's (the caller then goes live, as for a request never recorded).
        """
        alive = [s for s in self._idx.by_key.get((kind, name, key), ()) if s.seq in self._idx.steps]
        if kind == "model":
            alive = [s for s in alive if self._follows(s)]
        if self._idx.callers.repeated(kind, name, key):
            alive = [s for s in alive if not started_by(s, issue)]
        here = [s for s in alive if s.turn == turn]
        mine = [s for s in here if position(s) == issue.position]
        return next(iter(mine or here or alive), None)

    def _follows(self, step: RecordedStep) -> bool:
        """True when every recorded step on ``step``'s path (its parents, up) was consumed."""
        found = position(step)
        parent = -1 if found is None else found[0]
        while parent in self._parents:
            if parent in self._idx.steps:
                return False
            parent = self._parents[parent]
        return True
