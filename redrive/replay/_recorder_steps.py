"""The steps recorders open: each as a typed handle, replayed or recorded live.

``begin_model`` / ``begin_tool`` / ``begin_value`` return the handles of
:mod:`._handle`; the one-call forms (``model_step``, ``amodel_step``,
``tool_step``, ``atool_step``, ``value_step``) are thin uses of them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from ..errors import DivergenceError
from ..frames import Kind, call_key, rebuild, store
from ._context import _boundary, _current, _current_fence, _current_key, _observe
from ._diff import caller_location
from ._engine import GoLive, Replay, decide_model, decide_value
from ._faces import off_loop
from ._handle import ModelStep, ToolStep, ValueStep
from ._policy import compile_paths, match_view
from ._state import Issue
from ._tools import ToolSpec, ToolSteps
from ._writer import _Adopted

__all__ = ["RecorderSteps"]

T = TypeVar("T")


class RecorderSteps(ToolSteps):
    """The steps recorders open: model, tool and value steps, as handles or in one call."""

    def begin_model(self, name: str, request: Any, *, ignore: tuple[str, ...] = ()) -> ModelStep:
        """Open a model step: match it against the journal, or prepare to record it live.

        Args:
            name: the step name (``"model:gpt-4o"``...).
            request: the request's arguments (canonically encodable).
            ignore: path patterns of the stored request left out of its match key
                (a recorder's provider knowledge: where the model mints ids), on
                top of the generic rule of :func:`~._policy.match_view`.

        Returns:
            A :class:`ModelStep`: ``.recorded`` with ``.response``, or live:
            make the call and ``.record(response)``.

        Raises:
            TypeError: the request cannot be encoded canonically.
            ValueError: an ``ignore`` pattern is malformed.
            DivergenceError: strict replay, and the journal's next step differs.
            ReplayMissError: no recorded step answers it and the run cannot go live.
            LeaseLostError: the run's lease was lost.
            TerminalRunError: the run was cancelled during this execution (no call goes out).
        """
        self._refuse_if_ended("model", name)
        self._settle()  # a step the flow left open ends before this one is issued
        handle = self._open_model(name, request, self._issue(name), ignore)
        self._model_done(handle)
        return handle

    def _open_model(
        self, name: str, request: Any, issue: Issue, ignore: tuple[str, ...] = ()
    ) -> ModelStep:
        """:meth:`begin_model`'s work, for a step issued at ``issue`` (may run off the loop)."""
        stored = self._prepare(request, "request")
        # stored is canonical (and scrubbed); its match view too: no second walk
        key = call_key(name, match_view(stored, compile_paths(ignore)), tree=True)
        with self._lock:
            turn = issue.turn
            step = self._match("model", name, stored, key, issue)
            decision = decide_model(step, can_write=self._can_write)
            if isinstance(decision, Replay):
                self.replayed_steps += 1
                _observe("replayed", run_id=self.run_id, step=decision.step)
                return ModelStep(
                    name,
                    stored,
                    True,
                    False,
                    decision.step.seq,
                    max(turn, decision.step.turn),
                    self,
                    key,
                    step,
                )
            self._check_live("model", name, stored, key)  # a Miss raises here
            assert isinstance(decision, GoLive)
            unfinished = decision.unfinished
            handle = ModelStep(
                name,
                stored,
                False,
                unfinished is not None,
                unfinished.seq if unfinished is not None else None,
                turn,
                self,
                key,
                unfinished,
                started=time.time(),
                issue=issue,
            )
        _boundary("model_before", self.run_id, self._writer.next_seq, name)
        return handle

    async def abegin_model(
        self, name: str, request: Any, *, ignore: tuple[str, ...] = ()
    ) -> ModelStep:
        """The async form of :meth:`begin_model`: the journal work runs off the event loop.

        A step the task left open (a stream it stopped reading) is settled
        first, on the loop: it moves the task past that step before this one
        is issued, as on replay.
        """
        self._refuse_if_ended("model", name)
        self._settle()
        with _caller_on_loop():
            handle = await off_loop(self._open_model, name, request, self._issue(name), ignore)
        self._model_done(handle)
        return handle

    def _model_done(self, handle: ModelStep) -> None:
        """Move the calling flow past ``handle`` once it has its response (else: no-op)."""
        if handle.recorded or handle._done:
            self._completed(handle.seq, model=True, turn=handle.turn)

    def _record_model(self, step: ModelStep, response: Any, view: Any, partial: bool) -> int:
        """Queue (and per ``model_commit`` write) a live model step; return its request's seq."""
        name = step.name
        _boundary("model_after", self.run_id, self._writer.next_seq, name)
        with self._lock:
            if step._step is None:
                seq = self._writer.next_seq
                if self._cursor is not None:
                    self._requests = self._cursor.expander
                request: dict[str, Any] = {"args": step.request, "turn": step.turn, "view": view}
                if step._started is not None:
                    request["started_at"] = step._started  # for durations in `redrive show`
                if step._issue is not None:
                    request["issue"] = step._issue.payload()  # who asked: see Cursor.match
                self._places.placed(seq, step._issue)  # a re-ask holds the superseded place
                payload = self._requests.stored(name, request)
                self._writer.queue(Kind.MODEL_REQUEST, name, payload, step.key)
            else:
                seq = step._step.seq
            outcome: dict[str, Any] = {"step": seq, "response": response, "view": view}
            if partial:
                outcome["partial"] = True
            self._writer.queue(Kind.MODEL_RESPONSE, name, outcome)
            self.live_steps += 1
            # the caller's flow moves on here (sync) and again in its own task (async face)
            self._completed(seq, model=True, turn=step.turn)
            if self.model_commit != "group":
                # "write": in the journal at once (a killed worker does not pay for this
                # call again), made fully durable by the next synced write; "each": fsynced
                with self._adopting(), contextlib.suppress(_Adopted):
                    self._flush(sync=self.model_commit == "each")
        _boundary("model_recorded", self.run_id, seq, name)
        return seq

    def model_step(
        self,
        name: str,
        request: Any,
        call: Callable[[], T],
        *,
        encode: Callable[[T], Any] = lambda value: value,
        decode: Callable[[Any], Any] = lambda value: value,
    ) -> Any:
        """Run one model step: replay the recorded response, or call and record.

        Args:
            name: the step name (``"model:gpt-4o"``...).
            request: the request's arguments (canonically encodable).
            call: makes the live call and returns the response.
            encode: turns a live response into canonical plain data.
            decode: turns recorded plain data into what the caller gets.

        Returns:
            ``decode(encode(response))`` (the same shape live and replayed).
        """
        step = self.begin_model(name, request)
        if step.recorded:
            return decode(step.response)
        return decode(step.record(encode(call())))

    async def amodel_step(
        self,
        name: str,
        request: Any,
        call: Callable[[], Awaitable[T]],
        *,
        encode: Callable[[T], Any] = lambda value: value,
        decode: Callable[[Any], Any] = lambda value: value,
    ) -> Any:
        """The async form of :meth:`model_step` (journal work off the loop, ``call`` on it)."""
        step = await self.abegin_model(name, request)
        if step.recorded:
            return decode(step.response)
        response = await step.arecord(encode(await call()))  # moves the caller's flow on
        return decode(response)

    def begin_value(self, name: str, label: str, *, extra: Any = None) -> ValueStep:
        """Open a recorded value (``now``, ``uuid4``, ``random``, an approval...).

        Values are matched by ``(name, label)`` within the turn, in order, so
        adding or removing a call with another label never shifts the values
        of unrelated calls. ``extra`` (canonical data, e.g. an approval's
        payload) is matched too when given.

        Returns:
            A :class:`ValueStep`: ``.recorded`` with ``.value``, or live:
            make the value and ``.record(value)``.

        Raises:
            DivergenceError, ReplayMissError, LeaseLostError, TerminalRunError: as
                :meth:`begin_model`.
        """
        self._refuse_if_ended("value", name)
        args: dict[str, Any] = {"label": label}
        if extra is not None:
            args["extra"] = self._prepare(extra, "extra")
        key = call_key(name, args)
        self._settle()
        with self._lock:
            step = self._match("value", name, args, key)
            decision = decide_value(step, can_write=self._can_write)
            if isinstance(decision, Replay):
                self.replayed_steps += 1
                where = f"run {self.run_id!r} seq {decision.step.seq}: value {name!r}"
                value = rebuild(decision.step.data.get("value"), where=where)
                return ValueStep(name, label, True, value, self, args, key)
            self._check_live("value", name, args, key)  # a Miss raises here
        return ValueStep(name, label, False, None, self, args, key)

    def _record_value(self, step: ValueStep, value: Any) -> Any:
        try:
            packed, value = store(value, "value")  # the loop gets what a replay hands back
        except TypeError as exc:
            raise TypeError(
                f"run {self.run_id!r}: recorded value {step.name!r} ({step.label!r}) cannot be "
                f"journaled: {exc}"
            ) from None
        with self._lock:
            payload = {"args": step._args, "turn": self._turn, "value": packed}
            self._writer.queue(Kind.VALUE, step.name, payload, step._key)
            self.live_steps += 1
        step.value = value
        return value

    def value_step(
        self, name: str, label: str, make: Callable[[], Any], *, extra: Any = None
    ) -> Any:
        """Return a recorded value or make and record one (one call of :meth:`begin_value`)."""
        step = self.begin_value(name, label, extra=extra)
        if step.recorded:
            return step.value
        return step.record(make())

    def begin_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> ToolStep:
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
        self._refuse_if_ended("tool", spec.name)
        self._settle()  # a step the flow left open ends before this one is issued
        return self._open_tool(spec, arguments, self._issue(spec.name))

    async def abegin_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> ToolStep:
        """The async form of :meth:`begin_tool`: the journal work runs off the event loop.

        Where the step is issued is taken in the caller's task, before the
        work moves off the loop, so sibling tasks take positions in the order
        the loop starts them.
        """
        self._refuse_if_ended("tool", spec.name)
        self._settle()
        with _caller_on_loop():
            return await off_loop(self._open_tool, spec, arguments, self._issue(spec.name))

    def _open_tool(self, spec: ToolSpec, arguments: dict[str, Any], issue: Issue) -> ToolStep:
        """:meth:`begin_tool`'s work, for a step issued at ``issue`` (may run off the loop)."""
        plan = self._tool_begin(spec, arguments, issue)
        return ToolStep(
            spec.name,
            plan.seq,
            plan.key,
            plan.replayed,
            plan.value,
            plan.error,
            self,
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
        step = self.begin_tool(spec, arguments)
        try:
            if step.recorded:
                return step.outcome()
            with _body_context(step.idempotency_key, step.fencing_token):
                try:
                    value = body(step.idempotency_key)
                except BaseException as exc:
                    step.fail(exc)
                    raise
            return step.record(value)
        finally:
            self._completed(step.seq, model=False, turn=self._turn)

    async def atool_step(
        self, spec: ToolSpec, arguments: dict[str, Any], body: Callable[[str], Awaitable[T]]
    ) -> Any:
        """The async form of :meth:`tool_step` (``body`` returns an awaitable).

        The journal work runs off the event loop; the body runs on it.
        """
        step = await self.abegin_tool(spec, arguments)
        try:
            if step.recorded:
                return step.outcome()
            if not self._lease.surely_held():  # the loop was slow to come back to this task
                await off_loop(self._lease.fence, step.seq, spec.name)
            with _body_context(step.idempotency_key, step.fencing_token):
                try:
                    value = await body(step.idempotency_key)
                except BaseException as exc:
                    await step.afail(exc)
                    raise
            return await step.arecord(value)
        finally:
            self._completed(step.seq, model=False, turn=self._turn)


@contextlib.contextmanager
def _body_context(key: str, fence: int | None = None) -> Iterator[None]:
    """Run a tool body as a black box: calls inside it are part of its one outcome.

    Models, tools and values it calls are not steps of the run (no run is
    current), :func:`redrive.idempotency_key` returns the step's key and
    :func:`redrive.fencing_token` its fencing token.
    """
    token, outer = _current_key.set(key), _current.set(None)
    fenced = _current_fence.set(fence)
    try:
        yield
    finally:
        _current_fence.reset(fenced)
        _current.reset(outer)
        _current_key.reset(token)


@contextlib.contextmanager
def _caller_on_loop() -> Iterator[None]:
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
