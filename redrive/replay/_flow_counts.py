"""How many live flows stand at each parent seq: a part of :class:`~._flows.FlowTracker`.

A flow (a :class:`~._flows.Flow` value in a caller's context) stands at the
seq of the last step it completed, its *parent*. While any flow stands at a
parent, steps can still be issued there, so the tracker keeps that parent's
issue and spawn counts; once the last flow standing there is collected, the
parent can issue nothing more and its counts are dropped, so a long run's
memory does not grow by one entry per step.

Collection is seen through a weak reference per counted flow that carries
its parent (cheaper than a ``weakref.finalize`` per step). The references
are kept by ``id``: two equal flow values may stand at once, and counting
them by value would lose one and keep its parent forever.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["ParentCounts"]


class _FlowRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a counted flow with the parent seq it stands at."""

    __slots__ = ("parent",)
    parent: int


class ParentCounts:
    """Live flows per parent seq (>= 0); parents whose last flow was collected.

    Not locked of its own: :meth:`count` and :meth:`drain` run under the
    owning tracker's lock. A collection may happen on any thread at any time;
    it only appends to a deque (thread-safe), read by the next :meth:`drain`.
    """

    def __init__(self) -> None:
        self._at: dict[int, int] = {}
        self._gone: collections.deque[int] = collections.deque()
        self._refs: dict[int, _FlowRef] = {}
        self._collected = _collector(self._refs, self._gone)

    def __contains__(self, parent: object) -> bool:
        """Whether a live flow stands at ``parent``."""
        return parent in self._at

    def count(self, flow: Any, parent: int) -> None:
        """Count ``flow`` as standing at ``parent`` until it is collected."""
        self._at[parent] = self._at.get(parent, 0) + 1
        ref = _FlowRef(flow, self._collected)
        ref.parent = parent
        self._refs[id(ref)] = ref

    def drain(self) -> list[int]:
        """Take in the collections seen since the last call; return the parents left empty."""
        emptied: list[int] = []
        gone = self._gone
        while gone:
            parent = gone.popleft()
            left = self._at.get(parent, 0) - 1
            if left > 0:
                self._at[parent] = left
            else:
                self._at.pop(parent, None)
                emptied.append(parent)
        return emptied


def _collector(
    refs: dict[int, _FlowRef], gone: collections.deque[int]
) -> Callable[[_FlowRef], None]:
    """:class:`_FlowRef`'s callback: the flow's parent is gone (no cycle through the owner)."""

    def collected(ref: _FlowRef) -> None:
        gone.append(ref.parent)  # drained under the owner's lock by its next drain()
        refs.pop(id(ref), None)

    return collected
