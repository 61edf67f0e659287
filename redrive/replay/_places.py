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

if TYPE_CHECKING:
    from ._state import Issue

__all__ = ["Places"]


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
