"""The flow tracker: who a run's concurrent callers are, told apart by where they came from.

A *flow* is a thread or asyncio task of a run. Each flow carries, in its
context, a :class:`Flow`: the seq of the last step it completed (its
``parent``) and its *spawn path*, the indexes under which it and its
ancestors were started since that step (the flow that started it, and the
order that flow started its children in). A model or tool step is issued at
an :class:`Issue` position ``(parent, spawn, occ)``: ``occ`` counts the steps
of the same name issued before it at the same ``(parent, spawn)``, so
identical concurrent requests are matched to the caller that made them by
the caller's program (which flow, started in which order), not by the order
the calls reached redrive. That order changes between a cold process (a
first SDK call awaits its platform detection, an import runs) and a warm
one; the spawn order does not.

Where a spawn is seen:

* asyncio tasks created on a loop on which a run was entered (the async
  face, or a sync block entered inside a running loop): a task factory,
  chained to any factory already installed, gives each task created from a
  flow of the run its spawn index before the task's first step
  (:func:`._flow_tasks.watch_tasks`);
* threads of :func:`redrive.executor` (:class:`~._executor.RunExecutor`): in
  ``submit`` order (:func:`start_child_flow`).

A spawn redrive cannot see (a bare thread given ``contextvars.copy_context()``,
``asyncio.to_thread``, a thread pool that copies the context per call, as
LangChain's ``ContextThreadPoolExecutor`` does for a sync ``ToolNode``, a
task created on a loop no run was entered on) keeps its starter's flow: such
siblings are told apart by the order they issue in, as before (the *arrival*
rule), which a resumed run's threads may not repeat. A flow knows the thread
or task it was made in (its *owner*); a step issued from another one is
issued from a *shared* flow (:attr:`Issue.shared`): its position's ``occ``
names no caller, so replay matches it among the steps recorded at its point
by content, and a step recorded there with other arguments may be a
sibling's, not yet asked for: it is waited for before the call is called a
divergence (:meth:`~._cursor.Cursor.sibling_pending`).

Runs recorded before spawn paths (no ``flows`` run flag) keep the arrival
rule for every step, so their journals replay as they were recorded.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from ._faces import flow as _caller
from ._flow_counts import ParentCounts

__all__ = [
    "FLOWS_FLAG",
    "SPAWN_RULE",
    "Flow",
    "FlowTracker",
    "Issue",
    "calling_tracker",
    "start_child_flow",
]

#: The run flag naming the rule its steps' issue positions were taken under.
FLOWS_FLAG = "flows"
#: Its value for runs whose positions carry spawn paths (absent: the arrival rule).
SPAWN_RULE = "spawn"

Rule = Literal["spawn", "arrival"]

#: At most this many completed steps of a turn are named in a model request's ``after``.
AFTER_LIMIT = 32


@attrs.frozen
class Flow:
    """Where one flow (a thread or asyncio task) of a run stands, as its context carries it.

    A flow's turn is causal: the number of model steps completed in this flow
    or in the flow that started it (a task or a thread started from a flow
    inherits its starter's position), never by concurrent siblings. So the
    turn a step is issued in depends on the loop's code, not on which
    concurrent call happened to finish first, and is the same on replay.

    Attributes:
        run: the :class:`FlowTracker` of the flow's run (its identity token).
        turn: the flow's turn (model steps completed along its causal path).
        parent: seq of the last step the flow completed (-1: none yet), which
            names the flow's position in the record, live and on replay.
        after: opening seqs of the tool steps the flow completed in this turn
            (the last :data:`AFTER_LIMIT`), which a model step must follow.
        spawn: the spawn path since ``parent``: the index under which each
            flow from the one standing at ``parent`` down to this one was
            started by its starter (``()``: the flow that completed
            ``parent``, or a flow whose start redrive could not see).
        adrift: the flow descends from a call that lost the run's context (a thread
            redrive did not see start): its turn counts what that thread happened to
            run before, so it is not causal.
        owner: the ``(thread id, task id)`` (:func:`._faces.flow`) that made the flow
            by binding the run or completing a step: another thread or task that
            carries it holds a silent copy of its context (see :attr:`Issue.shared`).
            None: a flow whose owner is not known (a child started for a thread or
            task not running yet, a flow the run never saw).
    """

    run: object
    turn: int = 0
    parent: int = -1
    after: tuple[int, ...] = ()
    spawn: tuple[int, ...] = ()
    adrift: bool = False
    owner: tuple[int, int] | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Issue:
    """Where a model or tool step was issued: what replay matches identical requests by.

    Attributes:
        turn: the issuing flow's turn.
        parent: seq of the last step the issuing flow completed (-1: none).
        occ: how many steps of the same name were issued from ``(parent, spawn)``
            before this one (0 first). Under the arrival rule (runs recorded
            before spawn paths) ``spawn`` is ``()`` and ``occ`` counts the
            run's steps from ``parent``: siblings in the order they arrive.
        after: opening seqs of the tool steps of this turn the flow completed
            before issuing it.
        spawn: the issuing flow's spawn path (see :class:`Flow`).
        adrift: the issuing flow's turn is not causal (see :class:`Flow`); not journaled.
        shared: issued by a thread or task other than the flow's owner (a silent copy
            of its context: a thread pool's call, ``asyncio.to_thread``), so its
            siblings share the flow's point and ``occ`` counts them in the order
            they arrived, which a resume need not repeat; not journaled.
    """

    turn: int
    parent: int
    occ: int
    after: tuple[int, ...]
    spawn: tuple[int, ...] = ()
    adrift: bool = False
    shared: bool = False

    @property
    def position(self) -> tuple[int, tuple[int, ...], int]:
        """``(parent, spawn, occ)``: equal for a step and the recorded step it replays."""
        return self.parent, self.spawn, self.occ

    @property
    def point(self) -> tuple[int, tuple[int, ...]]:
        """``(parent, spawn)``: the flow's point, shared by the steps it issues there."""
        return self.parent, self.spawn

    def payload(self) -> dict[str, Any]:
        """The ``issue`` field of a ``model_request`` or ``tool_start`` payload."""
        payload: dict[str, Any] = {
            "parent": self.parent,
            "occ": self.occ,
            "after": list(self.after),
        }
        if self.spawn:
            payload["spawn"] = list(self.spawn)
        return payload


def recorded_position(issue: Any) -> tuple[int, tuple[int, ...], int] | None:
    """The ``(parent, spawn, occ)`` of a recorded ``issue`` field, or None when it has none.

    Args:
        issue: the ``issue`` value of a recorded ``model_request`` or ``tool_start``.

    Returns:
        The position (``spawn`` is ``()`` when not recorded), or None when
        ``issue`` is missing or malformed.
    """
    if not isinstance(issue, dict):
        return None
    parent, occ, spawn = issue.get("parent"), issue.get("occ"), issue.get("spawn", ())
    if not isinstance(parent, int) or not isinstance(occ, int):
        return None
    if not isinstance(spawn, list | tuple) or not all(isinstance(i, int) for i in spawn):
        return None
    return parent, tuple(spawn), occ


_flow_var: contextvars.ContextVar[Flow | None] = contextvars.ContextVar(
    "redrive_flow_turn", default=None
)


class FlowTracker:
    """The identity of a run's concurrent callers: each flow's position and spawn path.

    A Run holds one. Every method is safe from any thread; the ones that
    read or set the caller's flow (:meth:`here`, :meth:`issue`,
    :meth:`completed`, :meth:`start_child`) must run in the caller's own
    thread or task (or a copy of its context), not elsewhere.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rule: Rule = "spawn"
        #: steps issued so far at each parent, by (spawn path, name) (see :meth:`issue`)
        self._issued: dict[int, dict[tuple[tuple[int, ...], str], int]] = {}
        #: flows started so far at each parent, by the starter's spawn path
        self._spawned: dict[int, dict[tuple[int, ...], int]] = {}
        #: live :class:`Flow` objects standing at each parent seq (>= 0), drained by
        #: :meth:`issue`: a parent no flow stands at can issue nothing more, so its counts
        #: are dropped and a long run's memory does not grow by one entry per step
        self._flows_at = ParentCounts()
        #: recorded steps handed to a flow that has not completed them yet
        self._arriving: set[int] = set()
        #: positions ``(parent, spawn, name, occ)`` issued and not yet answered
        self._asking: set[tuple[int, tuple[int, ...], str, int]] = set()
        #: ``before_next_step`` callbacks, by the caller (thread, task) that left its step open
        self._settles: list[tuple[tuple[int, int], Callable[[], None]]] = []
        #: told of each step a flow completes (see :meth:`watch`)
        self._watchers: list[Callable[[int], None]] = []
        #: the run's root flow (bound where its block was entered), and whether it has
        #: completed a step: once it has, it starts no more flows at the root (-1)
        self._root: Flow | None = None
        self._root_moved = False

    # -- the rule -------------------------------------------------------------------

    @property
    def rule(self) -> Rule:
        """``"spawn"`` (new runs) or ``"arrival"`` (runs recorded before spawn paths)."""
        return self._rule

    def run_flags(self) -> dict[str, str]:
        """The ``run_start`` flags a run recorded under this tracker's rule carries."""
        return {FLOWS_FLAG: SPAWN_RULE} if self._rule == "spawn" else {}

    def follow(self, flags: Mapping[str, Any] | None) -> None:
        """Take the rule a resumed run was recorded under from its ``run_start`` flags.

        Call it before the run's first step: every step of one run is issued
        under one rule, the one its record was made with.

        Args:
            flags: the ``flags`` of the run's ``run_start`` (None: none recorded).
        """
        spawn = isinstance(flags, Mapping) and flags.get(FLOWS_FLAG) == SPAWN_RULE
        self._rule = "spawn" if spawn else "arrival"

    # -- the caller's flow ------------------------------------------------------------

    def here(self) -> Flow:
        """This flow's position in the run (a flow the run never saw starts at the root)."""
        found = _flow_var.get()
        return found if found is not None and found.run is self else Flow(self, adrift=True)

    @property
    def turn(self) -> int:
        """The calling flow's turn (see :class:`Flow`)."""
        return self.here().turn

    def bind(self) -> contextvars.Token[Flow | None]:
        """Make the caller's context the run's root flow (where the run's block is entered).

        Returns:
            The token for :meth:`unbind`.
        """
        self._root, self._root_moved = Flow(self, owner=_caller()), False
        return _flow_var.set(self._root)

    @staticmethod
    def unbind(token: contextvars.Token[Flow | None]) -> None:
        """Undo :meth:`bind` in the context it was made in."""
        _flow_var.reset(token)

    def issue(self, name: str) -> Issue:
        """Take the issue position of a model or tool step the calling flow opens now.

        Called in the caller's own thread or task, before any work goes off
        the event loop.

        Args:
            name: the step name.

        Returns:
            Its :class:`Issue`: ``occ`` counts the steps of ``name`` issued
            before at the flow's ``(parent, spawn)`` (arrival rule: at its parent).
        """
        here = self.here()
        spawn = here.spawn if self._rule == "spawn" else ()
        shared = here.owner is not None and here.owner != _caller()
        with self._lock:
            self._drain_gone()
            counts = self._issued.setdefault(here.parent, {})
            occ = counts.get((spawn, name), 0)
            counts[(spawn, name)] = occ + 1
            self._asking.add((here.parent, spawn, name, occ))
        return Issue(here.turn, here.parent, occ, here.after, spawn, here.adrift, shared)

    def completed(self, seq: int | None, *, model: bool, turn: int) -> None:
        """Move the calling flow past a step it completed (``seq``: its opening frame).

        A model step ends the flow's turn ``turn``; a tool step joins the
        steps the flow's next model step follows. A flow that completed a
        step stands alone at it: its spawn path starts again (``()``). Sets
        the caller's context: call it in the caller's thread or task.

        Args:
            seq: the step's opening seq (None: the step has none; the flow stays).
            model: True for a model step.
            turn: the turn the model step was issued in.
        """
        here = self.here()
        if seq is not None and seq in self._arriving:
            with self._lock:
                self._arriving.discard(seq)
        if seq is not None and here is self._root:
            self._root_moved = True  # it stands past the root: it starts no flow there again
        if seq is not None:
            for watcher in tuple(self._watchers):
                watcher(seq)
        if model:
            parent = here.parent if seq is None else seq
            spawn = here.spawn if seq is None else ()
            owner = _caller() if seq is not None else here.owner
            flow = Flow(self, max(here.turn, turn + 1), parent, (), spawn, here.adrift, owner)
        elif seq is not None:
            after = (*here.after, seq)[-AFTER_LIMIT:]
            flow = Flow(self, here.turn, seq, after, (), here.adrift, _caller())
        else:
            return
        _flow_var.set(self._track(flow))

    def began(self, seq: int) -> bool:
        """Tell the watchers of a tool step the calling flow begins (``seq``: its opening frame).

        Called once the step is claimed or matched, before its body runs or its
        recorded outcome is handed back, in the caller's thread or task: a
        watcher's queued note then reaches the journal with the step's end,
        before the caller sees the outcome (see :func:`._segments.watch_steps`).

        Returns:
            Whether any watcher was told (the caller makes what they queued durable).
        """
        watchers = tuple(self._watchers)
        for watcher in watchers:
            watcher(seq)
        return bool(watchers)

    def watch(self, watcher: Callable[[int], None]) -> Callable[[], None]:
        """Call ``watcher(seq)`` for each model or tool step a flow of the run completes.

        ``seq`` is the step's opening seq, recorded or live; the call is made in
        the completing flow's own thread or task (or a copy of its context), so
        the watcher can read that flow's context (which framework task asked).
        A step may be reported twice (the async face completes it twice).

        Returns:
            A function that stops the watching.
        """
        self._watchers.append(watcher)
        return lambda: self._watchers.remove(watcher) if watcher in self._watchers else None

    def start_child(self, context: contextvars.Context) -> None:
        """Make ``context`` a new flow started by the calling flow (its next spawn index).

        Call it in the starter's thread or task, in the order the starter
        starts its children (task creation, ``submit``): that order is the
        starter's program order, the same in every process.

        Args:
            context: the context the child will run in (a copy of the starter's).
        """
        here = self.here()
        with self._lock:
            started = self._spawned.setdefault(here.parent, {})
            index = started.get(here.spawn, 0)
            started[here.spawn] = index + 1
        spawn = (*here.spawn, index)
        child = Flow(self, here.turn, here.parent, here.after, spawn, here.adrift)
        context.run(_flow_var.set, self._track(child))

    def may_still_issue(self, parent: int, spawn: tuple[int, ...], name: str, occ: int) -> bool:
        """True when a flow of the run may still issue step ``name`` at ``(parent, spawn, occ)``.

        So when fewer than ``occ + 1`` steps of ``name`` were issued at that
        point so far, and a flow stands at ``parent`` (or was handed that
        step, see :meth:`arriving`) to issue it or to start the flow that will;
        at the root (-1), when ``spawn`` names a flow the root started, or may
        still start (it has not completed a step yet).

        Args:
            parent: the position's parent seq.
            spawn: its spawn path.
            name: the step name.
            occ: its occurrence.
        """
        with self._lock:
            self._drain_gone()
            if (parent, spawn, name, occ) in self._asking:
                return True  # issued, and its flow is being answered now
            if self._issued.get(parent, {}).get((spawn, name), 0) > occ:
                return False
            if parent < 0:
                # a flow the root started (or will, until it completes a step): it may ask;
                # the root's own point is also where calls that lost their context land,
                # whose flow means nothing
                started = self._spawned.get(parent, {}).get((), 0)
                return bool(spawn) and (not self._root_moved or spawn[0] < started)
            return parent in self._flows_at or parent in self._arriving

    def answered(self, issue: Issue, name: str, *, arriving: int | None = None) -> None:
        """The step ``name`` issued at ``issue`` was matched to the record or went live.

        ``arriving``: the recorded step's seq it was matched to (see :meth:`arriving`).
        """
        with self._lock:
            self._asking.discard((issue.parent, issue.spawn, name, issue.occ))
            if arriving is not None:
                self._arriving.add(arriving)

    def arriving(self, seq: int) -> None:
        """A flow was handed recorded step ``seq``: it will stand there once it completes it.

        Until then :meth:`may_still_issue` counts a flow at ``seq`` (its steps
        recorded after ``seq`` are its own, not another caller's).
        """
        with self._lock:
            self._arriving.add(seq)

    @property
    def parents_held(self) -> int:
        """How many parent seqs the tracker keeps counts for (bounded by the live flows)."""
        with self._lock:
            return len(self._issued.keys() | self._spawned.keys())

    # -- steps a flow left open -------------------------------------------------------

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

    # -- bookkeeping ------------------------------------------------------------------

    def _drain_gone(self) -> None:
        """Drop the counts of parents no flow stands at any more (under the lock)."""
        for parent in self._flows_at.drain():
            self._issued.pop(parent, None)
            self._spawned.pop(parent, None)

    def _track(self, flow: Flow) -> Flow:
        """Count ``flow`` as standing at its parent until it is collected; return it.

        Flows at parent -1 (the root, or a flow the run never saw) are not
        counted: that parent's counts are kept.
        """
        if flow.parent >= 0:
            with self._lock:
                self._flows_at.count(flow, flow.parent)
        return flow


def start_child_flow(context: contextvars.Context, tracker: FlowTracker | None = None) -> None:
    """Make ``context`` a child flow of the calling flow, when the caller is in a run.

    Args:
        context: the context the child will run in (a copy of the caller's).
        tracker: the run the child joins (default: the calling flow's run;
            nothing happens when the caller is in none).
    """
    tracker = tracker or calling_tracker()
    if tracker is not None:
        tracker.start_child(context)


def calling_tracker() -> FlowTracker | None:
    """The flow tracker of the calling flow's run, or None when the caller is in no run."""
    flow = _flow_var.get()
    return flow.run if flow is not None and isinstance(flow.run, FlowTracker) else None
