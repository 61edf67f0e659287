"""Where a live step stands in the record: the place it took (pure bookkeeping, no I/O).

A flow's issue position names its last completed step by seq. A step that
goes live in a resumed run gets a new seq, which the record has never seen;
when it takes the place of a recorded step (a model step re-asked live under
a lenient rule or ``on_drift="continue_live"`` supersedes the recorded one)
or slots in before recorded steps that still wait (a read-only call the new
code inserted), the steps the flow asks for next must still be matched where
the record has them (CONTRACT C2). :class:`Places` maps each such live seq to
the recorded seq whose place it holds, and translates an issue position to
the record's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ._engine import decide_unrecorded_tool

if TYPE_CHECKING:
    from ._cursor import Cursor
    from ._policy import ReplayPolicy
    from ._state import Issue

__all__ = ["Places", "hold_place", "inserted_live"]


class Places:
    """The live steps of this execution that hold a recorded step's place."""

    def __init__(self) -> None:
        #: live opening seq -> the recorded seq whose place it holds
        self._alias: dict[int, int] = {}
        #: issued steps that will hold a place once their opening seq is known
        self._pending: dict[Issue, int] = {}

    def in_record(self, issue: Issue | None) -> Issue | None:
        """``issue`` with its parent translated to the record's (itself when not aliased)."""
        if issue is None:
            return None
        parent = self._alias.get(issue.parent)
        return issue if parent is None else attrs.evolve(issue, parent=parent)

    def take(self, issue: Issue | None, recorded: int) -> None:
        """The step issued at ``issue`` goes live in the place of recorded seq ``recorded``."""
        if issue is not None:
            self._pending[issue] = recorded

    def placed(self, seq: int, issue: Issue | None) -> None:
        """The live step issued at ``issue`` opened at ``seq``: it now holds its place."""
        if issue is not None:
            recorded = self._pending.pop(issue, None)
            if recorded is not None:
                self._alias[seq] = recorded


def inserted_live(
    cursor: Cursor, policy: ReplayPolicy, kind: str, harmless: bool, *, can_write: bool
) -> bool:
    """A tool call the record has nowhere goes live before the steps that wait (True)?

    See :func:`~._engine.decide_unrecorded_tool` (CONTRACT C4).

    Args:
        cursor: the run's cursor (what still waits).
        policy: the run's replay policy.
        kind: the kind of the step asked for (only tools are inserted here).
        harmless: the tool is declared read-only or restart-safe.
        can_write: the run is live and not already finished.
    """
    if kind != "tool":
        return False
    return decide_unrecorded_tool(
        rule=policy.rule(kind),
        on_drift=policy.on_drift,
        can_write=can_write,
        harmless=harmless,
        side_effect_waits=cursor.side_effect_waiting() is not None,
    )


def hold_place(
    places: Places,
    cursor: Cursor,
    policy: ReplayPolicy,
    kind: str,
    name: str,
    issue: Issue | None,
    at: Issue | None,
    superseded: int | None = None,
) -> None:
    """A step about to go live takes a place in the record (CONTRACT C2).

    The place of the recorded step it supersedes (``superseded``: a re-ask
    under ``on_drift="continue_live"``; or, under a lenient model rule, the
    recorded model step at its position, superseded here), else, when
    recorded steps still wait at the flow's point, that point itself (a step
    the new code inserted). Either way the flow's next steps are matched
    where the record has them. Nothing is taken for a flow past its record
    (nothing waits at its point).

    Args:
        places: the run's places.
        cursor: the run's cursor.
        policy: the run's replay policy.
        kind: the step's kind.
        name: the step's name.
        issue: where the flow issued it (as the run numbers steps), or None.
        at: ``issue`` translated to the record (:meth:`Places.in_record`).
        superseded: the recorded seq a re-ask superseded, if any.
    """
    if issue is None or at is None:
        return
    if superseded is None and kind == "model" and policy.rule(kind) == "lenient":
        old = cursor.take_place(name, at)
        superseded = old.seq if old is not None else None
    if superseded is not None:
        places.take(issue, superseded)
    elif cursor.waiting_here(at):
        places.take(issue, at.parent)
