"""The model and value steps of a Run, as the handles recorders open (:mod:`._handle`).

:class:`ModelSteps` replays a recorded model response or prepares a live call
and journals it per ``model_commit``; :class:`ValueSteps` does the same for a
recorded value (``now``, ``uuid4``, ``random``, an approval's decision).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..frames import Kind, call_key, rebuild, store
from ._appender import Appender
from ._context import _boundary, _observe
from ._engine import GoLive, Replay, decide_model, decide_value
from ._faces import off_loop
from ._flows import FlowTracker, Issue
from ._handle import ModelStep, ValueStep
from ._matcher import Matcher
from ._policy import compile_paths, match_view
from ._state import RunState
from ._tools import caller_on_loop
from ._usage import with_usage
from ._writer import JournalWriter, _Adopted

__all__ = ["ModelSteps", "ValueSteps"]

T = TypeVar("T")


class ModelSteps:
    """The model steps of one run.

    Args:
        state: the run's state.
        writer: the run's journal writer.
        flows: the run's flow tracker (where each request is issued).
        matcher: matches requests to the record.
        appender: the durable write path.
    """

    def __init__(
        self,
        state: RunState,
        writer: JournalWriter,
        flows: FlowTracker,
        matcher: Matcher,
        appender: Appender,
    ) -> None:
        self._state = state
        self._config = state.config
        self._writer = writer
        self._flows = flows
        self._matcher = matcher
        self._appender = appender

    @property
    def run_id(self) -> str:
        """The run's id (for the handles' messages)."""
        return self._state.run_id

    def begin(self, name: str, request: Any, *, ignore: tuple[str, ...] = ()) -> ModelStep:
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
        self._state.refuse_if_ended("model", name, self._writer.next_seq)
        self._flows.settle()  # a step the flow left open ends before this one is issued
        handle = self._open(name, request, self._flows.issue(name), ignore)
        self.model_done(handle)
        return handle

    def _open(
        self, name: str, request: Any, issue: Issue, ignore: tuple[str, ...] = ()
    ) -> ModelStep:
        """:meth:`begin_model`'s work, for a step issued at ``issue`` (may run off the loop)."""
        stored = self._writer.prepare(request, "request")
        # stored is canonical (and scrubbed); its match view too: no second walk
        key = call_key(name, match_view(stored, compile_paths(ignore)), tree=True)
        with self._state.lock:
            turn = issue.turn
            step = self._matcher.match("model", name, stored, key, turn=issue.turn, issue=issue)
            decision = decide_model(step, can_write=self._state.can_write)
            if isinstance(decision, Replay):
                self._state.replayed_steps += 1
                self._state.spend.replayed(decision.step)
                _observe("replayed", run_id=self._state.run_id, step=decision.step)
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
            self._matcher.check_live("model", name, stored, key)  # a Miss raises here
            assert isinstance(decision, GoLive)
            unfinished = decision.unfinished
            # the budget check (the only one): before the call, never for a replayed step
            self._state.spend.check(
                name, unfinished.seq if unfinished is not None else self._writer.next_seq
            )
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
        _boundary("model_before", self._state.run_id, self._writer.next_seq, name)
        return handle

    async def abegin(self, name: str, request: Any, *, ignore: tuple[str, ...] = ()) -> ModelStep:
        """The async form of :meth:`begin_model`: the journal work runs off the event loop.

        A step the task left open (a stream it stopped reading) is settled
        first, on the loop: it moves the task past that step before this one
        is issued, as on replay.
        """
        self._state.refuse_if_ended("model", name, self._writer.next_seq)
        self._flows.settle()
        with caller_on_loop():
            handle = await off_loop(self._open, name, request, self._flows.issue(name), ignore)
        self.model_done(handle)
        return handle

    def model_done(self, handle: ModelStep) -> None:
        """Move the calling flow past ``handle`` once it has its response (else: no-op)."""
        if handle.recorded or handle._done:
            self._flows.completed(handle.seq, model=True, turn=handle.turn)

    def record_model(self, step: ModelStep, response: Any, view: Any, partial: bool) -> int:
        """Queue (and per ``model_commit`` write) a live model step; return its request's seq."""
        name = step.name
        _boundary("model_after", self._state.run_id, self._writer.next_seq, name)
        with self._state.lock:
            if step._step is None:
                self._writer.mark_first()  # a resume's note takes its seq first
                seq = self._writer.next_seq
                if self._state.cursor is not None:
                    self._state.requests = self._state.cursor.expander
                request: dict[str, Any] = {"args": step.request, "turn": step.turn, "view": view}
                if step._started is not None:
                    request["started_at"] = step._started  # for durations in `redrive show`
                if step._issue is not None:
                    request["issue"] = step._issue.payload()  # who asked: see Cursor.match
                self._state.places.placed(seq, step._issue)  # a re-ask holds the superseded place
                payload = self._state.requests.stored(name, request)
                # the request is prepare()'s (canonical, scrubbed): not walked again
                self._writer.queue(Kind.MODEL_REQUEST, name, payload, step.key, scrubbed="args")
            else:
                seq = step._step.seq
            outcome: dict[str, Any] = {"step": seq, "response": response, "view": view}
            if partial:
                outcome["partial"] = True
            answered = self._writer.queue(Kind.MODEL_RESPONSE, name, outcome)
            self._state.live_steps += 1
            # its time as the journal has it (redrive.run_usage reads the same)
            took = answered.at - step._started if step._started is not None else 0.0
            if step._step is not None:
                took = 0.0  # a response to a request an earlier execution journaled
            self._state.spend.live(with_usage(view, response), took)
            # the caller's flow moves on here (sync) and again in its own task (async face)
            self._flows.completed(seq, model=True, turn=step.turn)
            if self._config.model_commit != "group":
                # "write": in the journal at once (a killed worker does not pay for this
                # call again), made fully durable by the next synced write; "each": fsynced
                with self._appender.adopting(), contextlib.suppress(_Adopted):
                    self._appender.flush(sync=self._config.model_commit == "each")
        _boundary("model_recorded", self._state.run_id, seq, name)
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
        step = self.begin(name, request)
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
        step = await self.abegin(name, request)
        if step.recorded:
            return decode(step.response)
        response = await step.arecord(encode(await call()))  # moves the caller's flow on
        return decode(response)


class ValueSteps:
    """The recorded values of one run (``now``, ``uuid4``, ``random``, approvals).

    Args:
        state: the run's state.
        writer: the run's journal writer.
        flows: the run's flow tracker (values are matched within the caller's turn).
        matcher: matches values to the record.
    """

    def __init__(
        self, state: RunState, writer: JournalWriter, flows: FlowTracker, matcher: Matcher
    ) -> None:
        self._state = state
        self._writer = writer
        self._flows = flows
        self._matcher = matcher

    def begin(self, name: str, label: str, *, extra: Any = None) -> ValueStep:
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
        self._state.refuse_if_ended("value", name, self._writer.next_seq)
        args: dict[str, Any] = {"label": label}
        if extra is not None:
            args["extra"] = self._writer.prepare(extra, "extra")
        key = call_key(name, args)
        self._flows.settle()
        with self._state.lock:
            step = self._matcher.match("value", name, args, key, turn=self._flows.turn)
            decision = decide_value(step, can_write=self._state.can_write)
            if isinstance(decision, Replay):
                self._state.replayed_steps += 1
                where = f"run {self._state.run_id!r} seq {decision.step.seq}: value {name!r}"
                value = rebuild(decision.step.data.get("value"), where=where)
                return ValueStep(name, label, True, value, self, args, key)
            self._matcher.check_live("value", name, args, key)  # a Miss raises here
        return ValueStep(name, label, False, None, self, args, key)

    def record_value(self, step: ValueStep, value: Any) -> Any:
        try:
            packed, value = store(value, "value")  # the loop gets what a replay hands back
        except TypeError as exc:
            raise TypeError(
                f"run {self._state.run_id!r}: recorded value {step.name!r} ({step.label!r}) "
                "cannot be "
                f"journaled: {exc}"
            ) from None
        with self._state.lock:
            payload = {"args": step._args, "turn": self._flows.turn, "value": packed}
            self._writer.queue(Kind.VALUE, step.name, payload, step._key)
            self._state.live_steps += 1
        step.value = value
        return value

    def value_step(
        self, name: str, label: str, make: Callable[[], Any], *, extra: Any = None
    ) -> Any:
        """Return a recorded value or make and record one (one call of :meth:`begin_value`)."""
        step = self.begin(name, label, extra=extra)
        if step.recorded:
            return step.value
        return step.record(make())
