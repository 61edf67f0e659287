"""The state a Run carries, and the helpers every kind of step shares."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import difflib
import importlib.metadata
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypedDict

import attrs

from .._advice import after_end_advice
from .._runid import check_run_id
from ..errors import DivergenceError, ReplayMissError, RunEndedError, TerminalRunError
from ..frames import Frame, canonical
from ..storage import Journal, RunRecord, RunStatus
from ._cursor import Cursor, Found, RecordedStep
from ._delta import Expander, expand_frames
from ._diff import caller_location, diff_values, format_diff, short
from ._drift import continue_live, supersede_leftovers
from ._engine import OpenOperations
from ._faces import flow as _flow
from ._lease import LeaseKeeper, lease_for
from ._policy import ReplayPolicy, compile_paths, scrubber
from ._steps import iter_steps
from ._writer import JournalWriter

__all__ = ["Flow", "RunOptions", "RunState"]

_UNSET: Any = object()
_DEFAULT_RETRYABLE: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)


#: At most this many completed steps of a turn are named in a model request's ``after``.
_AFTER_LIMIT = 32


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
            (the last :data:`_AFTER_LIMIT`), which a model step must follow.
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


#: seconds a call waits for a sibling flow to replay a step recorded from the same point
#: before it calls its own drift a divergence (threads started together race to ask)
_SIBLING_WAIT = 2.0

_flow_var: contextvars.ContextVar[Flow | None] = contextvars.ContextVar(
    "redrive_flow_turn", default=None
)


def _version() -> str:
    try:
        return importlib.metadata.version("redrive")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"


def _take_until(frames: Iterator[Frame], limit: int) -> Iterator[Frame]:
    for frame in frames:
        if frame.seq >= limit:
            return
        yield frame


def _check_options(
    *,
    max_attempts: Any,
    lease: Any,
    busy_timeout: Any,
    create: Any,
    live: Any,
    redact: Any,
    retryable: Any,
) -> None:
    """Refuse option values of the wrong type before anything is written (TypeError/ValueError)."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise TypeError(f"max_attempts={max_attempts!r}: use an int of at least 1")
    for option, value in (("lease", lease), ("busy_timeout", busy_timeout)):
        if option == "lease" and (value is None or value == "auto"):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            also = ", 'auto' (the default) or None" if option == "lease" else ""
            raise TypeError(f"{option}={value!r}: use a positive number of seconds{also}")
    for option, value in (("create", create), ("live", live)):
        if not isinstance(value, bool):
            raise TypeError(f"{option}={value!r}: use True or False")
    if isinstance(redact, str) or not all(isinstance(p, str) for p in redact):
        raise TypeError(f"redact={redact!r}: use a tuple of path patterns (strings)")
    if not all(isinstance(t, type) and issubclass(t, BaseException) for t in retryable):
        raise TypeError(f"retryable={retryable!r}: use a tuple of exception types")


class RunOptions(TypedDict, total=False):
    """The keyword options of :func:`redrive.run`, all optional (see it for their meaning).

    ``run(journal, run_id, **options)`` is typed by this dict: a misspelt
    option, or one of the wrong type, fails ``mypy --strict``; at run time it
    raises ``TypeError`` before anything is written.
    """

    input: Any
    replay: Literal["strict", "lenient"] | ReplayPolicy
    on_in_flight: Literal["raise", "tell_model"]
    max_attempts: int
    lease: float | Literal["auto"] | None
    on_busy: Literal["raise", "wait"]
    busy_timeout: float
    create: bool
    live: bool
    redact: tuple[str, ...]
    model_commit: Literal["write", "group", "each"]
    retryable: tuple[type[BaseException], ...]
    entrypoint: str | None
    app_version: str | None
    live_tools: bool | tuple[str, ...] | list[str]


def unknown_live_tools(live_tools: Any, recorded: Iterable[str] = ()) -> str | None:
    """Say which ``live_tools`` names match no tool, or None when every name does.

    A name is known when a tool of that name was defined in this process
    (``@redrive.tool``) or appears in ``recorded``.

    Args:
        live_tools: ``True``/``False`` (never unknown) or the tool names asked for.
        recorded: tool names seen in the journal (steps recorded or called).

    Returns:
        A sentence naming each unknown name, its close matches and the known
        tool names, with the fix; or None.
    """
    if isinstance(live_tools, bool):
        return None
    from ._fingerprint import current_tools

    known = sorted(set(current_tools()) | set(recorded))
    unknown = sorted(set(live_tools) - set(known))
    if not unknown:
        return None
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"live_tools names {', '.join(hints)} match no tool, so no body ran live for them; "
        f"the known tools are {', '.join(map(repr, known)) or 'none'}. Fix the name in "
        "live_tools (redrive.run's option, the redrive marker or --redrive-live-tools)."
    )


def live_tool_names(live_tools: Any) -> bool | frozenset[str]:
    """Check and normalize ``live_tools``: True/False, or the set of tool names.

    Raises:
        TypeError: neither a bool nor a sequence of tool names (a bare string is
            refused: ``live_tools="send_email"`` would read as its letters).
    """
    if isinstance(live_tools, bool):
        return live_tools
    if isinstance(live_tools, str) or not isinstance(live_tools, tuple | list | frozenset | set):
        raise TypeError(
            f"live_tools={live_tools!r}: use True (every tool), False (none) or a list of "
            "tool names such as ['create_refund']"
        )
    if not all(isinstance(n, str) and n for n in live_tools):
        raise TypeError(f"live_tools={live_tools!r}: every tool name must be a non-empty string")
    return frozenset(live_tools)


class RunState:
    """Options, counters and the frame queue of a Run, and the matching helpers.

    The first part of a Run (see :mod:`._run` for the others); it owns the
    run's lease keeper (:mod:`._lease`) and journal writer (:mod:`._writer`).
    """

    def __init__(
        self,
        journal: Journal,
        run_id: str,
        *,
        input: Any = _UNSET,
        replay: str | ReplayPolicy = "strict",
        on_in_flight: Literal["raise", "tell_model"] = "raise",
        max_attempts: int = 3,
        lease: float | Literal["auto"] | None = "auto",
        on_busy: Literal["raise", "wait"] = "raise",
        busy_timeout: float = 30.0,
        create: bool = True,
        live: bool = True,
        redact: tuple[str, ...] = (),
        model_commit: Literal["write", "group", "each"] = "write",
        retryable: tuple[type[BaseException], ...] = _DEFAULT_RETRYABLE,
        entrypoint: str | None = None,
        app_version: str | None = None,
        live_tools: bool | tuple[str, ...] | list[str] = False,
    ) -> None:
        check_run_id(run_id)
        if on_in_flight not in ("raise", "tell_model"):
            raise ValueError(f"on_in_flight={on_in_flight!r}: use 'raise' or 'tell_model'")
        if on_busy not in ("raise", "wait"):
            raise ValueError(f"on_busy={on_busy!r}: use 'raise' or 'wait'")
        if model_commit not in ("write", "group", "each"):
            raise ValueError(
                f"model_commit={model_commit!r}: use 'write' (default), 'group' or 'each'"
            )
        _check_options(
            max_attempts=max_attempts,
            lease=lease,
            busy_timeout=busy_timeout,
            create=create,
            live=live,
            redact=redact,
            retryable=retryable,
        )
        self.journal = journal
        self.run_id = run_id
        self.policy = ReplayPolicy.of(replay)
        self.on_in_flight = on_in_flight
        self.max_attempts = max_attempts
        #: the lease length this run takes, in seconds (None: none); "auto" resolved
        self.lease = lease_for(lease, journal, live=live)
        self.on_busy = on_busy
        self.busy_timeout = busy_timeout
        self.create = create
        self.live = live
        self.model_commit = model_commit
        self.retryable = tuple(retryable)
        self.entrypoint = entrypoint
        if app_version is not None and (not isinstance(app_version, str) or not app_version):
            raise TypeError(f"app_version={app_version!r}: use a non-empty string or None")
        self.app_version = app_version
        #: tools whose bodies run on replay, their results checked against the record
        self.live_tools = live_tool_names(live_tools)
        self._input = input
        self._redact = compile_paths(redact)
        self._lock = threading.RLock()
        self._sibling_wait = threading.Condition(self._lock)
        self._flow_id = object()
        #: steps issued so far from each parent, by name (see :meth:`_issue`)
        self._issued: dict[int, dict[str, int]] = {}
        #: live :class:`Flow` objects positioned at each parent seq (>= 0), and parents
        #: whose Flow objects were collected since (drained by :meth:`_issue`): a parent
        #: no flow stands at can issue nothing more, so its counts are dropped and a long
        #: run's memory does not grow by one entry per step
        self._flows_at: dict[int, int] = {}
        self._flows_gone: collections.deque[int] = collections.deque()
        self._cursor: Cursor | None = None
        self._requests = Expander()
        self._token: contextvars.Token[Any] | None = None
        self._finished_record: RunRecord | None = None
        self._output: Any = None
        self._output_set = False
        self._short_circuited = False
        self._settles: list[tuple[tuple[int, int], Callable[[], None]]] = []
        self._lease = LeaseKeeper(journal, run_id, self.lease, on_busy, busy_timeout)
        self._writer = JournalWriter(journal, run_id, self._lease, scrubber(redact))
        self._adoptable = False
        self._known_seq = 0
        self._failed_keys: dict[tuple[str, str], int] = {}
        #: the run's open logical operations: what a same-arguments retry continues
        self._open_operations = OpenOperations()
        #: seqs of steps whose presumed holder this run waited out (async face)
        self._gave_up_steps: set[int] = set()
        self.status = RunStatus.RUNNING.value
        #: None while this execution may start steps; once the run was cancelled during it
        #: (by :meth:`cancel`, or from outside, learned at a refused write): who and why
        #: (``"cancelled by BY: REASON"``)
        self._ended_why: str | None = None
        #: None while the run's block has not ended; then ``(status, next seq)`` at its end
        self._block_ended: tuple[str, int] | None = None
        self.replayed_steps = 0
        self.live_steps = 0
        self.resumed = False
        #: the ``reasked`` notes this execution journaled (model steps re-asked live)
        self.reasked: list[dict[str, Any]] = []
        self._resumed_at = 0
        self.entered = False

    def __repr__(self) -> str:
        return (
            f"<redrive.Run {self.run_id!r} status={self.status} replayed={self.replayed_steps} "
            f"live={self.live_steps}>"
        )

    @property
    def finished(self) -> bool:
        """True when the run had already succeeded before this execution."""
        return self._finished_record is not None

    @property
    def _can_write(self) -> bool:
        """True when this execution may record steps (live, and not already succeeded)."""
        return self.live and self._finished_record is None

    @property
    def output(self) -> Any:
        """The run's output: recorded (finished run) or set by :meth:`finish`."""
        if self._finished_record is not None and not self._output_set:
            return self._finished_record.output_value()
        return self._output

    def _check_live(self, kind: str, name: str, args: Any, key: str) -> None:
        self._lease.check()
        if self._finished_record is not None or not self.live:
            cursor = self._cursor
            closest = []
            if cursor is not None:
                closest = [
                    f"{s.describe()} args {short(s.args)}"
                    for s in cursor.remaining()
                    if s.kind == kind
                ][:3]
            why = (
                "the run already succeeded, so its journal is complete"
                if self._finished_record is not None
                else "this run replays only (live=False)"
            )
            again = self._replayed_twin(kind, name, key)
            caller = caller_location()
            raise ReplayMissError(
                f"run {self.run_id!r}: the loop asked for {kind} {name!r} with arguments "
                f"{short(args)}, which no recorded step answers, and {why}.\n"
                + (
                    f"  an identical {kind} step at seq {again} was already replayed: the "
                    "record has this call once, the code now makes it again\n"
                    if again is not None
                    else ""
                )
                + (f"  called from: {caller}\n" if caller is not None else "")
                + (
                    "  closest recorded steps:\n    " + "\n    ".join(closest)
                    if closest
                    else "  no unconsumed recorded step of that kind"
                )
                + "\nWhat to do: find the code change that added this call (redrive show / "
                "redrive diff); if it is intended, record a new run only where its side "
                "effects may run again (a test fixture: redrive check --update).",
                run_id=self.run_id,
                seq=self._writer.next_seq,
                kind=kind,
                name=name,
                found=args,
                closest=closest,
            )

    def _close_writes(self) -> None:
        """The run's block ended: from now on every step, note and write of this Run raises.

        Called under the run's lock right after its last write (its ``run_end``,
        or the flush of an interrupted block), so no thread appends after it.
        """
        with self._lock:
            if self._block_ended is None:
                self._block_ended = (self.status, self._writer.next_seq)
                self._writer.refuse = self._refuse_after_end

    def _refuse_after_end(self, what: str) -> None:
        """Raise ``RunEndedError`` for ``what`` (``"tool 'charge'"``...) once the block ended.

        An attribute check, no I/O; any thread or task may call it.

        Raises:
            RunEndedError: the run's ``with`` block has ended.
        """
        ended = self._block_ended
        if ended is None:
            return
        status, seq = ended
        thread = threading.current_thread().name
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        asker = f"thread {thread!r}" + (f", task {task.get_name()!r}" if task else "")
        how = (
            f"ended {status} (its run_end is seq {seq - 1})"
            if RunStatus(status).terminal
            else f"stopped with status {status} (resumable from seq {seq})"
        )
        raise RunEndedError(
            f"run {self.run_id!r}: {what} was asked for from {asker} after the run's block "
            f"ended: the run {how}. Nothing was written and nothing ran. A thread or task "
            "that outlives its run must be joined or awaited inside the run's block; to "
            f"continue the run, resume it in a new redrive.run(journal, {self.run_id!r}) block.",
            run_id=self.run_id,
            seq=seq,
            status=status,
            step=what,
            thread=thread,
        )

    def _replayed_twin(self, kind: str, name: str, key: str) -> int | None:
        """The seq of a recorded step identical to the one asked for that was already used.

        Read only on the error path (a replay miss): the journal is scanned once,
        so replaying keeps holding only a few steps at once.
        """
        cursor = self._cursor
        unused = {s.seq for s in cursor.remaining()} if cursor is not None else set()
        frames = self.journal.frames(self.run_id)
        for step in iter_steps(frames, self.run_id, verify=False):
            if (step.kind, step.name, step.key) == (kind, name, key) and step.seq not in unused:
                return step.seq
        return None

    def _recorded_tool_names(self) -> set[str]:
        """The names of the tool steps in this run's journal (a scan; for run-end checks)."""
        frames = self.journal.frames(self.run_id)
        return {s.name for s in iter_steps(frames, self.run_id, verify=False) if s.kind == "tool"}

    def _refuse_if_ended(self, kind: str, name: str) -> None:
        """Refuse a step of a run that ended during this execution, before any call goes out.

        An attribute check, no I/O: :meth:`cancel` ends the run at once; a
        cancel from outside (``journal.cancel``) is learned at this execution's
        next write (a tool's claim, a model step's record under
        ``model_commit="write"``), so the one model call between an outside
        cancel and that write still goes out (its record is refused).

        Args:
            kind: ``"model"``, ``"tool"`` or ``"value"``: the step asked for.
            name: its step name.

        Raises:
            RunEndedError: the run's ``with`` block has ended (from a thread or
                task that outlived it).
            TerminalRunError: the run was cancelled during this execution (the
                message names who cancelled it and why).
        """
        self._refuse_after_end(f"{kind} {name!r}")
        if self._ended_why is None:
            return
        raise TerminalRunError(
            f"run {self.run_id!r} was {self._ended_why} during this execution; "
            f"{kind} {name!r} was not started: no call goes out after a cancel. "
            + after_end_advice(self.run_id),
            run_id=self.run_id,
            seq=self._writer.next_seq,
            status=self.status,
        )

    # -- flows and turns -------------------------------------------------------------

    def _flow(self) -> Flow:
        """This flow's position in the run (a flow the run never saw starts at turn 0)."""
        found = _flow_var.get()
        return found if found is not None and found.run is self._flow_id else Flow(self._flow_id)

    @property
    def _turn(self) -> int:
        """The calling flow's turn (see :class:`Flow`)."""
        return self._flow().turn

    def _issue(self, name: str) -> Issue:
        """Take the issue position of a model or tool step the calling flow opens now.

        Called in the caller's own thread or task, before any work goes off
        the event loop, so siblings started in order take positions in order.
        """
        here = self._flow()
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

    def _completed(self, seq: int | None, *, model: bool, turn: int) -> None:
        """Move the calling flow past a step it completed (``seq``: its opening frame).

        A model step ends the flow's turn ``turn``; a tool step joins the
        steps the flow's next model step follows. Sets the caller's context:
        call it in the caller's thread or task, not off the event loop.
        """
        here = self._flow()
        parent = here.parent if seq is None else seq
        if model:
            _flow_var.set(self._track(Flow(self._flow_id, max(here.turn, turn + 1), parent)))
        elif seq is not None:
            after = (*here.after, seq)[-_AFTER_LIMIT:]
            _flow_var.set(self._track(Flow(self._flow_id, here.turn, parent, after)))

    def _track(self, flow: Flow) -> Flow:
        """Count ``flow`` as standing at its parent until it is collected; return it.

        Flows at parent -1 (a flow the run never saw) are made afresh by
        :meth:`_flow` and not counted: that parent's counts are kept.
        """
        if flow.parent >= 0:
            with self._lock:
                self._flows_at[flow.parent] = self._flows_at.get(flow.parent, 0) + 1
            weakref.finalize(flow, self._flows_gone.append, flow.parent)
        return flow

    def _match(
        self, kind: str, name: str, args: Any, key: str, issue: Issue | None = None
    ) -> RecordedStep | None:
        cursor = self._cursor
        if cursor is None:
            return None
        turn = issue.turn if issue is not None else self._turn
        waited_until: float | None = None
        while True:
            try:
                step = cursor.match(kind, name, args, key, turn=turn, issue=issue)
                if step is None and self.policy.rule(kind) != "lenient" and not cursor.exhausted:
                    if cursor.frontier(kind, name, issue):
                        return None  # this flow's record ends here, other flows' goes on: live
                    raise cursor.divergence(cursor.remaining()[0], Found(kind, name, key, args))
            except DivergenceError as exc:
                if cursor.sibling_pending(kind, name, issue):
                    # the step recorded from this point may be a sibling flow's, not yet
                    # asked for: give it a moment (the lock is released while waiting)
                    now = time.monotonic()
                    waited_until = waited_until or now + _SIBLING_WAIT
                    if now < waited_until:
                        self._sibling_wait.wait(0.005)
                        continue
                if not continue_live(self, cursor, kind, name, turn, key, exc):
                    raise
                return None
            return step

    @property
    def redacting(self) -> bool:
        """True when the run was given ``redact`` path patterns."""
        return bool(self._redact)

    def redact(self, value: Any) -> Any:
        """Return canonical ``value`` with every ``redact`` path replaced by ``[REDACTED]``.

        Recorders apply it to what they journal besides requests (e.g. a JSON
        response body, as ``{"body": ...}``, so ``$.body...`` patterns match).
        """
        return self._writer.scrubber.value(canonical(value, "value"))

    def _prepare(self, args: Any, path: str) -> Any:
        # scrubbed as journaled (redrive._scrub): keys are made on this form
        return self._writer.scrubber.value(canonical(args, path))

    def _check_fully_replayed(self, exc: BaseException | None) -> None:
        if exc is not None or self._cursor is None:
            return
        if not isinstance(self.live_tools, bool):
            problem = unknown_live_tools(self.live_tools, self._recorded_tool_names())
            if problem:
                raise ValueError(f"run {self.run_id!r}: {problem}")
        # a lenient rule lets recorded steps of its kind go unasked (removed calls)
        left = [s for s in self._cursor.remaining() if self.policy.rule(s.kind) != "lenient"]
        if left and self._cursor.superseded and supersede_leftovers(self, left):
            return
        if left:
            step = left[0]
            counterpart = self._live_counterpart(step)
            diff = counterpart[1] if counterpart is not None else []
            called = (
                f" The loop called {step.kind} {step.name!r} live at seq {counterpart[0]} "
                f"with other arguments (recorded -> live):\n{format_diff(diff)}\n"
                if counterpart is not None and diff
                else " "
            )
            raise DivergenceError(
                f"run {self.run_id!r}: the loop finished but the journal has more steps, from "
                f"seq {step.seq} ({step.kind} {step.name}); the code took a shorter path than "
                f"the record. {len(left)} recorded step(s) were not asked for.{called}If the "
                "change is intended, record a new run.",
                run_id=self.run_id,
                seq=step.seq,
                kind=step.kind,
                name=step.name,
                found_kind=None,
                found_name=None,
                expected=step.args,
                found=None,
                expected_key=step.key,
                found_key=None,
                diff=diff,
                context=[s.describe() for s in left],
            )

    def _live_counterpart(self, step: RecordedStep) -> tuple[int, list[Any]] | None:
        """The first step of ``step``'s kind and name this execution made live, and their diff.

        Read only when a resumed run ends with recorded steps unused (the error
        path), so a changed argument is named even though the loop went live.
        """
        opening = {"tool": "tool_start", "model": "model_request"}.get(step.kind)
        if opening is None or not self.resumed:
            return None
        for frame, data in expand_frames(self.journal.frames(self.run_id)):
            if frame.seq < self._resumed_at or frame.kind != opening or frame.name != step.name:
                continue
            if isinstance(data, dict):
                return frame.seq, diff_values(step.args, data.get("args"))
        return None

    def before_next_step(self, settle: Callable[[], None]) -> None:
        """Run ``settle()`` before the next step of this thread or task begins, or at a clean end.

        For recorders whose step can be left open by the loop (a stream it
        stopped reading without closing): ``settle`` journals what the loop
        saw, in order, before anything that follows it. Steps of other
        threads or tasks do not settle it (parallel calls stay independent).
        """
        with self._lock:
            self._settles.append((_flow(), settle))

    def _settle(self, *, everyone: bool = False) -> None:
        """Run the pending ``before_next_step`` callbacks of this flow (or of all flows)."""
        if not self._settles:
            return
        me = _flow()
        with self._lock:
            mine = [f for key, f in self._settles if everyone or key == me]
            self._settles = [(k, f) for k, f in self._settles if not (everyone or k == me)]
        for settle in mine:
            settle()
