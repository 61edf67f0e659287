"""The tool-step part of a Run: replay a recorded outcome, or claim the step and run the body.

:class:`ToolSteps` matches a tool call to its record, asks the step engine
(:mod:`._engine`) what to do, and carries the decision out: hand back the
recorded outcome, claim the step (a durable ``tool_start`` before the body
runs), wait for another worker, or settle an in-flight step. What happens once
the body ran, and to a step in flight, is :mod:`._tool_outcomes`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from ..errors import DivergenceError
from ..frames import Kind, call_key, rebuild
from ._appender import Appender
from ._blocked import retry_limit_error
from ._context import _boundary, _current, _current_fence, _current_key, _observe
from ._diff import caller_location
from ._engine import (
    AskRecover,
    Block,
    Claim,
    Miss,
    Replay,
    Rerun,
    RetryLimit,
    StopBusy,
    ToolAsk,
    WaitForWorker,
    decide_in_flight,
    decide_tool,
    replays_whatever_asked,
)
from ._faces import off_loop
from ._flows import FlowTracker, Issue
from ._handle import ToolStep
from ._lease import LeaseKeeper
from ._matcher import Matcher
from ._operations import OperationLedger
from ._policy import match_view
from ._samecall import as_recorded
from ._state import RunState
from ._steps import RecordedStep
from ._tool_outcomes import ToolOutcomes
from ._toolspec import ToolPlan, ToolSpec, mark_retryable, rebuild_error
from ._writer import JournalWriter, _Adopted

__all__ = ["ToolSteps", "body_context", "caller_on_loop"]

T = TypeVar("T")


class ToolSteps:
    """The tool steps of one run (see the module docstring).

    Args:
        state: the run's state.
        writer: the run's journal writer.
        lease: the run's lease keeper (a body starts only under it).
        flows: the run's flow tracker (where each call is issued).
        ledger: the run's logical operations.
        matcher: matches calls to the record.
        appender: the durable write path.
    """

    def __init__(
        self,
        state: RunState,
        writer: JournalWriter,
        lease: LeaseKeeper,
        flows: FlowTracker,
        ledger: OperationLedger,
        matcher: Matcher,
        appender: Appender,
    ) -> None:
        self._state = state
        self._config = state.config
        self._writer = writer
        self._lease = lease
        self._flows = flows
        self._ledger = ledger
        self._matcher = matcher
        self._appender = appender
        self._outcomes = ToolOutcomes(state, writer, ledger, appender)

    def begin(self, spec: ToolSpec, arguments: dict[str, Any]) -> ToolStep:
        """Open a tool step: its recorded outcome, or (live) claim it before the body runs.

        Args:
            spec: the tool's resume behaviour.
            arguments: the call's arguments by parameter name (canonically encodable).

        Returns:
            A :class:`ToolStep`: ``.recorded`` with ``.outcome()``, or claimed
            (``tool_start`` durable): run the body with ``.idempotency_key``, then
            ``.record(result)`` or ``.fail(exc)``.

        Raises:
            DivergenceError, SideEffectRetryBlockedError, RetryLimitExceededError,
            ReplayMissError, RunBusyError, LeaseLostError: see :mod:`redrive.errors`.
            TerminalRunError: the run was cancelled during this execution (the body
                does not run).
        """
        self._state.refuse_if_ended("tool", spec.name, self._writer.next_seq)
        self._flows.settle()  # a step the flow left open ends before this one is issued
        return self._open(spec, arguments, self._flows.issue(spec.name))

    async def abegin(self, spec: ToolSpec, arguments: dict[str, Any]) -> ToolStep:
        """The async form of :meth:`begin`: the journal work runs off the event loop.

        Where the step is issued is taken in the caller's task, before the
        work moves off the loop, so sibling tasks take positions in the order
        the loop starts them.
        """
        self._state.refuse_if_ended("tool", spec.name, self._writer.next_seq)
        self._flows.settle()
        with caller_on_loop():
            return await off_loop(self._open, spec, arguments, self._flows.issue(spec.name))

    def _open(self, spec: ToolSpec, arguments: dict[str, Any], issue: Issue) -> ToolStep:
        """:meth:`begin`'s work, for a step issued at ``issue`` (may run off the loop)."""
        plan = self._begin(spec, arguments, issue)
        return ToolStep(
            spec.name,
            plan.seq,
            plan.key,
            plan.replayed,
            plan.value,
            plan.error,
            self._outcomes,
            spec,
            plan,
            fencing_token=plan.fencing_token,
        )

    def tool_step(self, spec: ToolSpec, arguments: dict[str, Any], body: Callable[[str], T]) -> Any:
        """Run one tool step: replay its outcome, or claim it and run ``body(idempotency_key)``.

        Args:
            spec: the tool's resume behaviour.
            arguments: the call's arguments by parameter name (canonically encodable).
            body: runs the tool; receives the step's idempotency key.

        Returns:
            The tool's result as journaled (canonical plain data), or the
            not-safely-resumable outcome dict under ``on_in_flight="tell_model"``.

        Raises:
            DivergenceError, SideEffectRetryBlockedError, ReplayMissError,
            RunBusyError, LeaseLostError: see :mod:`redrive.errors`.
            Any exception the tool raised (or its recorded twin on replay).
        """
        with self._state.tool_open():
            step = self.begin(spec, arguments)
            try:
                if self._flows.began(step.seq) and step.recorded:
                    self._appender.flush()  # what a watcher queued, before the outcome is seen
                if step.recorded:
                    return step.outcome()
                with body_context(step.idempotency_key, step.fencing_token):
                    try:
                        value = body(step.idempotency_key)
                    except BaseException as exc:
                        step.fail(exc)
                        raise
                return step.record(value)
            finally:
                self._flows.completed(step.seq, model=False, turn=self._flows.turn)

    async def atool_step(
        self, spec: ToolSpec, arguments: dict[str, Any], body: Callable[[str], Awaitable[T]]
    ) -> Any:
        """The async form of :meth:`tool_step` (``body`` returns an awaitable).

        The journal work runs off the event loop; the body runs on it.
        """
        with self._state.tool_open():
            step = await self.abegin(spec, arguments)
            try:
                if self._flows.began(step.seq) and step.recorded:
                    await off_loop(self._appender.flush)  # what a watcher queued, durable first
                if step.recorded:
                    return step.outcome()
                if not self._lease.surely_held():  # the loop was slow to come back to this task
                    await off_loop(self._lease.fence, step.seq, spec.name)
                with body_context(step.idempotency_key, step.fencing_token):
                    try:
                        value = await body(step.idempotency_key)
                    except BaseException as exc:
                        await step.afail(exc)
                        raise
                return await step.arecord(value)
            finally:
                self._flows.completed(step.seq, model=False, turn=self._flows.turn)

    def _step_key(self, step: RecordedStep, name: str) -> str:
        """The idempotency key a recorded tool step's body received (as its ``tool_start`` says)."""
        return step.idempotency_key or f"{self._state.run_id}:{step.seq}:{name}"

    def _begin(self, spec: ToolSpec, arguments: dict[str, Any], issue: Issue) -> ToolPlan:
        # A lost claim under on_busy="wait" adopts the winner's frames (_adopt) and
        # matches the step again: now it replays the winner's outcome. (The caller,
        # begin_tool / abegin_tool, settled the flow's open steps first.)
        while True:
            with self._appender.adopting():
                try:
                    plan = self._begin_once(spec, arguments, issue)
                except _Adopted:
                    continue
            if not plan.replayed:
                # the claim committed: the body starts only if this worker still holds
                # the run's lease (fencing reaches the body, not only the journal)
                plan.fencing_token = self._lease.fence(plan.seq, spec.name)
            return plan

    def _ask(self, spec: ToolSpec, step: RecordedStep | None, key: str) -> ToolAsk:
        """What the engine needs to decide this tool step (read under the run's lock)."""
        cursor = self._state.cursor
        return ToolAsk(
            step=step,
            restart_safe=spec.restart_safe or spec.read_only,
            has_recover=spec.recover is not None,
            can_write=self._state.can_write,
            # only ended_run reads it, and only for a step that ended in an error: the
            # check reads the rest of the journal, so no other step pays for it
            exhausted=cursor is not None
            and step is not None
            and step.end is not None
            and step.end.kind == Kind.TOOL_ERROR
            and cursor.nothing_opened_after(step.end.seq),
            failed_at=self._ledger.blocked_at(spec.name, key),
            retry_requested=self._ledger.retry_requested(spec.name, key),
            max_attempts=self._config.max_attempts,
            known_seq=self._state.known_seq,
            may_wait=self._state.adoptable,
            leased=self._config.lease is not None,
            claim_age=time.time() - step.start.at if step is not None else 0.0,
            busy_timeout=self._config.busy_timeout,
        )

    def _begin_once(self, spec: ToolSpec, arguments: dict[str, Any], issue: Issue) -> ToolPlan:
        stored = prepared = self._writer.prepare(arguments, "args")
        key = call_key(spec.name, match_view(stored, kind="tool"), tree=True)  # stored: canonical
        with self._state.lock:
            turn = issue.turn
            harmless = spec.read_only or spec.restart_safe
            cursor = self._state.cursor
            if spec.params.defaults and cursor is not None:
                # a parameter added since the record at its default keeps the recorded call
                stored, key = as_recorded(
                    cursor,
                    spec.name,
                    stored,
                    key,
                    spec.params.defaults,
                    turn=turn,
                    issue=issue,
                    scrub=lambda value: self._writer.prepare(value, "args"),
                )
            step = self._matcher.match(
                "tool", spec.name, stored, key, turn=turn, issue=issue, harmless=harmless
            )
            if replays_whatever_asked(step):  # a recorded result: the rest of the ask is moot
                return self._replay(spec, step, key)
            ask = self._ask(spec, step, key)
            decision = decide_tool(ask)
            if isinstance(decision, Replay):
                return self._replay(spec, decision.step, key)
            if isinstance(decision, StopBusy | WaitForWorker):
                self._appender.wait_for_worker(decision)  # returns: presumed live, it was not
                decision = decide_in_flight(ask)
            if isinstance(decision, Block) and decision.retry:
                # the block names the key of the operation the call would have retried
                idem = self._ledger.peek(spec.name, key) or (
                    f"{self._state.run_id}:{decision.seq}:{spec.name}"
                )
                if not decision.write:
                    raise self._outcomes.blocked_error(
                        spec, decision.seq, stored, idem, 1, retry=True
                    )
                return self._outcomes.blocked(
                    spec, decision.seq, stored, key, turn, 1, idem, retry=True, issue=issue
                )
            if step is not None:
                assert not isinstance(decision, Claim | Replay | StopBusy | WaitForWorker)
                return self._in_flight(spec, step, stored, key, decision)
            self._matcher.check_live("tool", spec.name, stored, key)
            self._writer.mark_first()  # a resume's note takes its seq first
            seq = self._writer.next_seq
            self._state.places.placed(seq, issue)  # a live call that holds a recorded place
            # a retry of an operation whose last attempt failed retryably keeps its key
            idem = self._ledger.take(spec.name, key) or f"{self._state.run_id}:{seq}:{spec.name}"
            with self._writer.unqueue_on_failure():
                self._writer.queue(
                    Kind.TOOL_START,
                    spec.name,
                    {
                        "args": stored,
                        "turn": turn,
                        "restart_safe": spec.restart_safe,
                        "read_only": spec.read_only,
                        "idempotency_key": idem,
                        "issue": issue.payload(),  # who asked: see Cursor.match
                    },
                    key,
                    scrubbed="args" if stored is prepared else "",  # not walked twice
                )
                self._appender.flush()
            self._state.live_steps += 1
        _boundary("tool_claimed", self._state.run_id, seq, spec.name)
        return ToolPlan(seq=seq, key=idem, name=spec.name, turn=turn, match_key=key)

    def _replay(self, spec: ToolSpec, step: RecordedStep, key: str) -> ToolPlan:
        """The plan of a tool step the engine replays (its body runs again under ``live_tools``)."""
        self._state.replayed_steps += 1
        plan = self._replayed(spec, step, key)
        if self._runs_live(spec.name, step):
            plan.replayed, plan.check = False, step
        else:
            _observe("replayed", run_id=self._state.run_id, step=step)
        return plan

    def _runs_live(self, name: str, step: RecordedStep) -> bool:
        """True when the recorded tool step ``name`` runs its body again (``live_tools``).

        Only a step that ended (a result or an error) runs: a blocked retry or an
        outcome settled by ``recover()`` is handed back as recorded.
        """
        chosen = self._config.live_tools
        wanted = chosen is True or (not isinstance(chosen, bool) and name in chosen)
        return wanted and step.end is not None and not step.data.get("blocked")

    def _replayed(self, spec: ToolSpec, step: RecordedStep, key: str) -> ToolPlan:
        outcome = step.decode_outcome()
        idem = self._step_key(step, spec.name)
        plan = ToolPlan(seq=step.seq, key=idem, name=spec.name, turn=step.turn, replayed=True)
        assert step.end is not None
        if not step.data.get("blocked"):  # a blocked retry was no attempt of its operation
            self._ledger.began(spec.name, key, idem)
        if step.end.kind == Kind.TOOL_ERROR:
            error = outcome.get("error") or {}
            plan.error = rebuild_error(self._state.run_id, step.seq, spec.name, error)
            mark_retryable(plan.error, bool(error.get("retryable")))
            self._ledger.note_failure(
                spec.name,
                key,
                step.seq,
                idem,
                side_effecting=not (spec.restart_safe or spec.read_only),
                retryable=error.get("retryable") is True,
                asked_again=error.get("retry_requested") is True,
            )
        else:
            where = f"run {self._state.run_id!r} seq {step.seq}: tool {spec.name!r} result"
            plan.value = rebuild(outcome.get("result"), where=where)
        return plan

    def _in_flight(
        self,
        spec: ToolSpec,
        step: RecordedStep,
        stored: Any,
        key: str,
        decision: Miss | RetryLimit | AskRecover | Rerun | Block,
    ) -> ToolPlan:
        idem = self._step_key(step, spec.name)  # every attempt of the step keeps its key
        self._matcher.check_live("tool", spec.name, stored, key)  # a Miss raises here
        self._ledger.began(spec.name, key, idem)
        if step.args is not None:
            stored = step.args  # errors and recover() speak of the call that was in flight
        if isinstance(decision, RetryLimit):
            raise retry_limit_error(
                run_id=self._state.run_id,
                tool=spec.name,
                seq=step.seq,
                arguments=stored,
                idempotency_key=idem,
                attempts=step.attempts,
                max_attempts=self._config.max_attempts,
                restart_safe=spec.restart_safe or spec.read_only,
            )
        if isinstance(decision, AskRecover):
            return self._outcomes.recover(spec, step, stored, key, idem)
        if isinstance(decision, Rerun):
            return self._outcomes.rerun(spec, step, idem, key)
        assert isinstance(decision, Block)
        return self._outcomes.blocked(
            spec,
            step.seq,
            stored,
            key,
            step.turn,
            step.attempts,
            idem,
            cause=decision.cause,
            resolvable=step.end is None,
        )


class body_context:
    """Run a tool body as a black box: calls inside it are part of its one outcome.

    Models, tools and values it calls are not steps of the run (no run is
    current), :func:`redrive.idempotency_key` returns the step's key and
    :func:`redrive.fencing_token` its fencing token. A class, not a generator
    context manager: one per tool step, at half the cost.
    """

    __slots__ = ("_fence", "_key", "_tokens")

    def __init__(self, key: str, fence: int | None = None) -> None:
        self._key, self._fence = key, fence

    def __enter__(self) -> None:
        self._tokens = (
            _current_key.set(self._key),
            _current.set(None),
            _current_fence.set(self._fence),
        )

    def __exit__(self, *exc: object) -> None:
        token, outer, fenced = self._tokens
        _current_fence.reset(fenced)
        _current.reset(outer)
        _current_key.reset(token)


@contextlib.contextmanager
def caller_on_loop() -> Iterator[None]:
    """Name the user's frame in a DivergenceError raised off the loop (its thread has none).

    Taken here, in the caller's task: the awaiting coroutine's frames are the
    user's call chain.
    """
    try:
        yield
    except DivergenceError as exc:
        if exc.caller is None:
            exc.caller = caller_location()
            exc.message = _with_caller(exc.message, exc.caller)
            exc.args = (exc.message,)
        raise


def _with_caller(message: str, caller: str | None) -> str:
    """Insert the ``called from`` line after a divergence message's ``replayed:`` line."""
    if caller is None:
        return message
    lines = message.split("\n")
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("  replayed:")), 1)
    lines.insert(at, f"  called from: {caller}")
    return "\n".join(lines)
