"""The flow tracker: who asked for which step, among a run's concurrent callers.

A *flow* is a thread or asyncio task of a run. Each flow carries its
position in the run in its context (:class:`Flow`): the turn it is in, the
last step it completed (its *parent*) and the tool steps of the turn it
completed. A step a flow opens is *issued* at a position (:class:`Issue`):
replay matches identical requests by it, so each concurrent caller gets the
outcome it got live (DESIGN invariant 11).
"""

from __future__ import annotations

import collections
import contextvars
import threading
import weakref
from collections.abc import Callable
from typing import Any

import attrs

from ._faces import flow as _caller

__all__ = ["Flow", "FlowTracker", "Issue"]

#: At most this many completed steps of a turn are named in a model request's ``after``.
AFTER_LIMIT = 32


@attrs.frozen
class Flow:
    """Where one flow (a thread or asyncio task) of a run stands, as its context carries it.

    A flow's turn is causal: the number of model steps completed in this flow
    or in the flow that started it (a task or a thread with a copied context
    inherits its starter's position), never by concurrent siblings. So the
    turn a step is issued in depends on the loop's code, not on which
    concurrent call happened to finish first, and is the same on replay.

    Attributes:
        run: the run's identity token.
        turn: the flow's turn (model steps completed along its causal path).
        parent: seq of the last step the flow completed (-1: none yet), which
            names the flow's position in the record, live and on replay.
        after: opening seqs of the tool steps the flow completed in this turn
            (the last :data:`AFTER_LIMIT`), which a model step must follow.
    """

    run: object
    turn: int = 0
    parent: int = -1
    after: tuple[int, ...] = ()


@attrs.frozen
class Issue:
    """Where a model or tool step was issued: what replay matches identical requests by.

    Attributes:
        turn: the issuing flow's turn.
        parent: seq of the last step the issuing flow completed (-1: none).
        occ: how many steps of the same name the run issued from ``parent``
            before this one (0 first): siblings started from one point issue
            in the order the loop starts them.
        after: opening seqs of the tool steps of this turn the flow completed
            before issuing it.
    """

    turn: int
    parent: int
    occ: int
    after: tuple[int, ...]

    def payload(self) -> dict[str, Any]:
        """The ``issue`` field of a ``model_request`` or ``tool_start`` payload."""
        return {"parent": self.parent, "occ": self.occ, "after": list(self.after)}


_flow_var: contextvars.ContextVar[Flow | None] = contextvars.ContextVar(
    "redrive_flow_turn", default=None
)


class FlowTracker:
    """The flows of one run: their positions, the steps issued from each, their open settles.

    Args:
        lock: the run's lock (counts are updated under it).

    The counts of steps issued from each parent are dropped once no flow
    stands at that parent any more (it can issue nothing more), so a long
    run's memory does not grow by one entry per step.
    """

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._id = object()
        #: steps issued so far from each parent, by name (see :meth:`issue`)
        self._issued: dict[int, dict[str, int]] = {}
        #: live :class:`Flow` objects positioned at each parent seq (>= 0), and parents
        #: whose Flow objects were collected since (drained by :meth:`issue`)
        self._flows_at: dict[int, int] = {}
        self._flows_gone: collections.deque[int] = collections.deque()
        self._settles: list[tuple[tuple[int, int], Callable[[], None]]] = []

    @property
    def parents_tracked(self) -> int:
        """How many parent positions hold issue counts now (bounded by the live flows)."""
        return len(self._issued)

    def here(self) -> Flow:
        """The calling flow's position (a flow the run never saw starts at turn 0)."""
        found = _flow_var.get()
        return found if found is not None and found.run is self._id else Flow(self._id)

    @property
    def turn(self) -> int:
        """The calling flow's turn (see :class:`Flow`)."""
        return self.here().turn

    def issue(self, name: str) -> Issue:
        """Take the issue position of a model or tool step the calling flow opens now.

        Called in the caller's own thread or task, before any work goes off
        the event loop, so siblings started in order take positions in order.
        """
        here = self.here()
        with self._lock:
            gone = self._flows_gone
            while gone:
                parent = gone.popleft()
                left = self._flows_at.get(parent, 0) - 1
                if left > 0:
                    self._flows_at[parent] = left
                else:
                    self._flows_at.pop(parent, None)
                    self._issued.pop(parent, None)
            counts = self._issued.setdefault(here.parent, {})
            occ = counts.get(name, 0)
            counts[name] = occ + 1
        return Issue(turn=here.turn, parent=here.parent, occ=occ, after=here.after)

    def completed(self, seq: int | None, *, model: bool, turn: int) -> None:
        """Move the calling flow past a step it completed (``seq``: its opening frame).

        A model step ends the flow's turn ``turn``; a tool step joins the
        steps the flow's next model step follows. Sets the caller's context:
        call it in the caller's thread or task, not off the event loop.
        """
        here = self.here()
        parent = here.parent if seq is None else seq
        if model:
            _flow_var.set(self._track(Flow(self._id, max(here.turn, turn + 1), parent)))
        elif seq is not None:
            after = (*here.after, seq)[-AFTER_LIMIT:]
            _flow_var.set(self._track(Flow(self._id, here.turn, parent, after)))

    def _track(self, flow: Flow) -> Flow:
        """Count ``flow`` as standing at its parent until it is collected; return it.

        Flows at parent -1 (a flow the run never saw) are made afresh by
        :meth:`here` and not counted: that parent's counts are kept.
        """
        if flow.parent >= 0:
            with self._lock:
                self._flows_at[flow.parent] = self._flows_at.get(flow.parent, 0) + 1
            weakref.finalize(flow, self._flows_gone.append, flow.parent)
        return flow

    def before_next_step(self, settle: Callable[[], None]) -> None:
        """Run ``settle()`` before the next step of this thread or task begins, or at a clean end.

        For recorders whose step can be left open by the loop (a stream it
        stopped reading without closing): ``settle`` journals what the loop
        saw, in order, before anything that follows it. Steps of other
        threads or tasks do not settle it (parallel calls stay independent).
        """
        with self._lock:
            self._settles.append((_caller(), settle))

    def settle(self, *, everyone: bool = False) -> None:
        """Run the pending ``before_next_step`` callbacks of this flow (or of all flows)."""
        if not self._settles:
            return
        me = _caller()
        with self._lock:
            mine = [f for key, f in self._settles if everyone or key == me]
            self._settles = [(k, f) for k, f in self._settles if not (everyone or k == me)]
        for settle in mine:
            settle()
