"""Which of the unconsumed records of one request a lenient rule hands a caller (pure).

A lenient rule matches by content (:class:`~._policy.ReplayPolicy`): any unconsumed
step recorded with the call's (kind, name, key) may answer it. Among identical
records the choice keeps the record's flows and turns apart:

* a record of a flow the caller starts (a batch member's, at the caller's point)
  is never the caller's own (CONTRACT C8, invariant 11): with no other record the
  caller goes live, as for a request never recorded;
* then the caller's turn first (the model steps completed along its path), and in
  it the one at the caller's issue position; else the first recorded.
"""

from __future__ import annotations

from ._callers import position, started_by
from ._flows import Issue
from ._recorded import RecordedIndex
from ._steps import RecordedStep

__all__ = ["by_content"]


def by_content(
    idx: RecordedIndex, kind: str, name: str, key: str, turn: int | None, issue: Issue
) -> RecordedStep | None:
    """The unconsumed step recorded as (kind, name, key) that answers the caller.

    Args:
        idx: the run's recorded index (loaded whole: a lenient rule needs all of it).
        kind: ``"model"`` or ``"tool"``.
        name: the step name.
        key: the request's key (the policy's ``ignore`` paths left out).
        turn: the caller's turn (None: unknown; no record is then of its turn).
        issue: where the caller issued it.

    Returns:
        The step, or None when the request is recorded only where it is not the
        caller's (a batch member's of a batch the caller starts).
    """
    alive = [s for s in idx.by_key.get((kind, name, key), ()) if s.seq in idx.steps]
    if idx.callers.repeated(kind, name, key):
        alive = [s for s in alive if not started_by(s, issue)]
    here = [s for s in alive if s.turn == turn]
    mine = [s for s in here if position(s) == issue.position]
    return next(iter(mine or here or alive), None)
