"""The Run: starts or resumes a run, replays recorded steps, records live ones.

The decision logic (match, resume policy, frame building) is shared by the
sync and async paths; they differ only in how they call the step's body. The
Run is assembled from :mod:`._state` (options, frame queue, matching),
:mod:`._tools` (tool steps), :mod:`._claims` (claims, adoption, leases) and
this module (lifecycle, model and value steps).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from ..errors import (
    AppendConflictError,
    ReplayError,
    RunInputMismatchError,
    TerminalRunError,
    UnknownRunError,
)
from ..frames import FORMAT_VERSION, Frame, Kind, call_key, canonical, fingerprint, make_frame
from ..storage import Journal, RunRecord, RunStatus, RunUpdate
from ._claims import Claims
from ._context import (
    _boundary,
    _current,
    _enter,
    _leave,
    current_run,
    idempotency_key,
    set_boundary_hook,
)
from ._cursor import Cursor, RecordedStep, decode_outcome
from ._policy import match_view
from ._state import _UNSET, _Adopted, _flow, _take_until, _version
from ._tools import Recovery, ToolSpec, ToolSteps, rebuild_error, tool_error_retryable

__all__ = [
    "Recovery",
    "Run",
    "ToolSpec",
    "current_run",
    "idempotency_key",
    "rebuild_error",
    "run",
    "set_boundary_hook",
]

T = TypeVar("T")


class Run(ToolSteps, Claims):
    """One execution (first or resumed) of a run; use through :func:`run`.

    Attributes:
        run_id: the run's id.
        journal: where its frames live.
        status: the run's status (a :class:`~redrive.storage.RunStatus` value string).
        replayed_steps: steps answered from the journal so far.
        live_steps: steps executed live (and recorded) so far.
        resumed: True when the run already existed in the journal.
        output: the recorded output of a finished run, or what :meth:`finish` set.
    """

    def finish(self, output: Any) -> Any:
        """Set the run's output, recorded in ``run_end`` when the block exits cleanly.

        Returns ``output`` (for a finished run replayed, the recorded output).

        Raises:
            TypeError: ``output`` cannot be encoded canonically.
        """
        canonical(output, "output")
        if self._finished_record is not None:
            return self._finished_record.output_value()
        self._output = output
        self._output_set = True
        return output

    def _open(self) -> None:
        if self.entered:
            raise RuntimeError(f"run {self.run_id!r}: this Run object was already entered")
        self.entered = True
        record = self.journal.get_run(self.run_id)
        if record is None:
            if not self.create or not self.live:
                raise UnknownRunError(
                    f"no run {self.run_id!r} in journal {self.journal.url}; "
                    + (
                        "a replay-only run needs a recorded run: check the run id and journal"
                        if not self.live
                        else "pass create=True to start it"
                    ),
                    run_id=self.run_id,
                )
            record = self._start_new()
        if record is not None:
            self._resume(record)
        if self.lease is not None and self.live and not self.finished:
            self._take_lease()
        elif record is not None and self.live and not self.finished:
            self._wait_for_lease_holder()
        # frames from here on were written while this Run was alive (a step in flight
        # there belongs to a live worker, not to a crash)
        self._known_seq = self._next_seq
        self._token = _current.set(self)
        _enter(self)

    def _stored_input(self) -> Any:
        """The run's input as journaled: canonical, with ``redact`` paths replaced."""
        if self._input is _UNSET:
            return None
        try:
            return self._prepare(self._input, "input")
        except TypeError as exc:
            raise TypeError(
                f"run {self.run_id!r}: the run's input cannot be journaled: {exc}"
            ) from None

    def recorded_output(self) -> Any:
        """Return a finished run's recorded output without re-driving its loop.

        Exiting the block then skips the check that every recorded step was
        asked for (``@redrive.durable`` uses this when called again after success).

        Raises:
            RuntimeError: the run has not finished (there is no recorded output).
        """
        if self._finished_record is None:
            raise RuntimeError(
                f"run {self.run_id!r} has not succeeded yet (status {self.status}): there is "
                "no recorded output; run the loop"
            )
        self._short_circuited = True
        return self._finished_record.output_value()

    def _start_new(self) -> RunRecord | None:
        inp = self._stored_input()
        input_fp = fingerprint(inp)
        payload: dict[str, Any] = {
            "input": inp,
            "input_fp": input_fp,
            "entrypoint": self.entrypoint,
            "flags": {
                "format": FORMAT_VERSION,
                "redrive": _version(),
                "model_commit": self.model_commit,
                "turns": "model-response",
            },
        }
        try:
            first = make_frame(
                run_id=self.run_id,
                seq=0,
                kind=Kind.RUN_START,
                name="run",
                payload=payload,
                prev_chain="0" * 32,
            )
        except TypeError as exc:
            raise TypeError(
                f"run {self.run_id!r}: the run's input cannot be journaled: {exc}"
            ) from None
        now = time.time()
        record = RunRecord(
            run_id=self.run_id,
            input_fp=input_fp,
            entrypoint=self.entrypoint,
            created_at=now,
            updated_at=now,
        )
        if self.journal.create_run(record, first):
            self._next_seq = 1
            self._last_chain = first.chain
            self._cursor = None
            return None
        return self.journal.get_run(self.run_id)  # lost a creation race: resume it

    def _resume(self, record: RunRecord) -> None:
        self.resumed = True
        if self._input is not _UNSET and fingerprint(self._stored_input()) != record.input_fp:
            start = next(iter(self.journal.frames(self.run_id)), None)
            recorded = start.data().get("input") if start is not None else None
            from ._diff import diff_values, format_diff

            diff = diff_values(recorded, self._stored_input())
            raise RunInputMismatchError(
                f"run {self.run_id!r} was started with another input; resuming it with this "
                "one would replay answers to a different question.\n"
                f"  differences (recorded -> given):\n{format_diff(diff)}\n"
                "What to do: pass the original input, or use a new run_id for the new input.",
                run_id=self.run_id,
                expected=recorded,
                found=self._input,
                diff=diff,
            )
        self.status = record.status
        status = RunStatus(record.status)
        if status is RunStatus.SUCCEEDED:
            self._finished_record = record
        elif status.terminal and self.live:
            raise TerminalRunError(
                f"run {self.run_id!r} already ended with status {record.status}"
                + (f" ({record.error})" if record.error else "")
                + "; it cannot execute again. Replay it read-only with live=False, fork it with "
                "redrive.fork(), or start a new run_id.",
                run_id=self.run_id,
                status=record.status,
            )
        limit = record.next_seq
        frames = (f for f in self.journal.frames(self.run_id) if f.seq < limit)
        self._cursor = Cursor(
            self.run_id, _take_until(frames, limit), self.policy, source=self.journal.url
        )
        self._next_seq = record.next_seq
        self._last_chain = record.last_chain
        self._resumed_at = record.next_seq
        if record.status == RunStatus.SUSPENDED.value and self.live:
            self.status = RunStatus.RUNNING.value
            # running again: a crash from here on leaves it among interrupted_runs()
            with contextlib.suppress(AppendConflictError):
                self.journal.append(
                    self.run_id,
                    [],
                    expected_seq=record.next_seq,
                    update=RunUpdate(status=RunStatus.RUNNING.value),
                )

    def _close(self, exc: BaseException | None) -> None:
        try:
            if self._finished_record is not None:
                if not self._short_circuited:
                    self._check_fully_replayed(exc)
                return
            if self._lease_lost is not None:
                return
            if not self.live:  # a replay-only run never writes
                if exc is None:
                    self._check_fully_replayed(None)
                return
            if exc is None:
                self._settle(everyone=True)
                self._check_fully_replayed(None)
                try:
                    with self._adopting():
                        self._end(RunStatus.SUCCEEDED, output=self._output)
                except _Adopted:
                    self._ended_elsewhere()
            elif isinstance(exc, SystemExit):
                self._flush()  # a deploy's SIGTERM handler: like a crash, stay resumable
            elif isinstance(exc, KeyboardInterrupt | asyncio.CancelledError | GeneratorExit):
                self._end(RunStatus.CANCELLED, error=f"cancelled: {type(exc).__name__}")
            elif isinstance(exc, _Suspended):
                self._flush(update=RunUpdate(status=RunStatus.SUSPENDED.value))
                self.status = RunStatus.SUSPENDED.value
            elif self._resumable(exc):
                self._flush()
            else:
                self._end(RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        finally:
            self._stop_renew.set()
            if self._epoch is not None:
                with contextlib.suppress(Exception):  # the lease lapses by itself
                    self.journal.release_lease(self.run_id, self._owner, self._epoch)
            if self._token is not None:
                _current.reset(self._token)
                self._token = None
            _leave(self)

    def _resumable(self, exc: BaseException) -> bool:
        if isinstance(exc, ReplayError):
            return not isinstance(exc, TerminalRunError)
        retryable = tool_error_retryable(exc)
        if retryable is not None:
            return retryable
        flag = getattr(exc, "retryable", None)
        if flag is True or getattr(exc, "is_retryable", None) is True:
            return True
        if isinstance(exc, self.retryable):
            return True
        if flag is False:
            return False  # a recorded error replayed: trying again gives the same answer
        return transient_api_error(exc)

    def _end(self, status: RunStatus, *, output: Any = None, error: str | None = None) -> None:
        payload: dict[str, Any] = {"status": status.value, "output": output, "error": error}
        try:
            out_bytes = None if status is not RunStatus.SUCCEEDED else _encode(output, "output")
        except TypeError as exc:
            payload = {"status": RunStatus.FAILED.value, "output": None, "error": str(exc)}
            status, out_bytes, error = RunStatus.FAILED, None, str(exc)
        with self._lock:
            self._queue(Kind.RUN_END, "run", payload)
            self._flush(
                update=RunUpdate(status=status.value, output=out_bytes, error=error),
            )
        self.status = status.value

    def __enter__(self) -> Run:
        self._open()
        return self

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> bool:
        self._close(exc)
        return isinstance(exc, _Suspended)  # suspended: the block ends, status says why

    async def __aenter__(self) -> Run:
        self._open()
        return self

    async def __aexit__(self, et: Any, exc: BaseException | None, tb: Any) -> bool:
        self._close(exc)
        return isinstance(exc, _Suspended)

    def model_begin(self, name: str, request: Any) -> tuple[RecordedStep | None, Any, str, int]:
        """Match a model step; return ``(recorded step or None, stored request, key, turn)``.

        Recorders call this, then either decode the recorded response or call
        the model and :meth:`model_record` its response.

        Raises:
            DivergenceError, ReplayMissError, LeaseLostError.
        """
        self._settle()
        stored = self._prepare(request, "request")
        key = call_key(name, match_view(stored))
        with self._lock:
            turn = self._turn
            step = self._match("model", name, stored, key)
            if step is not None and step.end is not None:
                self.replayed_steps += 1
                self._turn += 1
                return step, stored, key, turn
            self._check_live("model", name, stored, key)
            self._model_started[(_flow(), name)] = time.time()
        _boundary("model_before", self.run_id, self._next_seq, name)
        return step, stored, key, turn

    def model_record(
        self,
        name: str,
        stored_request: Any,
        key: str,
        turn: int,
        response: Any,
        *,
        view: Any = None,
        unfinished: RecordedStep | None = None,
    ) -> None:
        """Journal a live model step's request and response (group commit by default).

        Args:
            name, stored_request, key, turn: as returned by :meth:`model_begin`.
            response: the response payload (canonically encodable).
            view: the decoded semantic view (provider, model, messages, tool calls, usage).
            unfinished: the recorded request this response completes, if any.
        """
        _boundary("model_after", self.run_id, self._next_seq, name)
        with self._lock:
            if unfinished is None:
                seq = self._next_seq
                if self._cursor is not None:
                    self._requests = self._cursor.expander
                started = self._model_started.pop((_flow(), name), None)
                request: dict[str, Any] = {"args": stored_request, "turn": turn, "view": view}
                if started is not None:
                    request["started_at"] = started  # for durations in `redrive show`
                payload = self._requests.stored(name, request)
                self._queue(Kind.MODEL_REQUEST, name, payload, key)
            else:
                seq = unfinished.seq
            self._queue(
                Kind.MODEL_RESPONSE, name, {"step": seq, "response": response, "view": view}
            )
            self.live_steps += 1
            self._turn += 1
            if self.model_commit != "group":
                # "write": in the journal at once (a killed worker does not pay for this
                # call again), made fully durable by the next synced write; "each": fsynced
                with self._adopting(), contextlib.suppress(_Adopted):
                    self._flush(sync=self.model_commit == "each")
        _boundary("model_recorded", self.run_id, seq, name)

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
        step, stored, key, turn = self.model_begin(name, request)
        if step is not None and step.end is not None:
            return decode(decode_outcome(step).get("response"))
        value = call()
        data = canonical(encode(value), "response")
        self.model_record(name, stored, key, turn, data, unfinished=step)
        return decode(data)

    async def amodel_step(
        self,
        name: str,
        request: Any,
        call: Callable[[], Awaitable[T]],
        *,
        encode: Callable[[T], Any] = lambda value: value,
        decode: Callable[[Any], Any] = lambda value: value,
    ) -> Any:
        """The async form of :meth:`model_step`."""
        step, stored, key, turn = self.model_begin(name, request)
        if step is not None and step.end is not None:
            return decode(decode_outcome(step).get("response"))
        value = await call()
        data = canonical(encode(value), "response")
        self.model_record(name, stored, key, turn, data, unfinished=step)
        return decode(data)

    def value_step(
        self, name: str, label: str, make: Callable[[], Any], *, extra: Any = None
    ) -> Any:
        """Return a recorded value (``now``, ``uuid4``, ``random``...) or make and record one.

        Values are matched by ``(name, label)`` within the turn, in order, so
        adding or removing a call with another label never shifts the values
        of unrelated calls. ``extra`` (canonical data, e.g. an approval's
        payload) is matched too when given.
        """
        args: dict[str, Any] = {"label": label}
        if extra is not None:
            args["extra"] = self._prepare(extra, "extra")
        key = call_key(name, args)
        self._settle()
        with self._lock:
            step = self._match("value", name, args, key)
            if step is not None:
                self.replayed_steps += 1
                return step.data.get("value")
            self._check_live("value", name, args, key)
            value = make()
            self._queue(Kind.VALUE, name, {"args": args, "turn": self._turn, "value": value}, key)
            self.live_steps += 1
            return value

    def note(self, name: str, data: Any) -> None:
        """Journal a note (not a step; never matched on replay)."""
        with self._lock:
            if self._finished_record is not None or not self.live:
                return
            self._queue(Kind.NOTE, name, {"data": self.redact(data)})

    def resume_note(self) -> str:
        """Return a plain-text note on the tool calls recorded before this execution resumed.

        For loops that rebuild their own prompt on resume: it lists the calls
        that completed (with short results), failed, or were interrupted with
        an unknown outcome (with their idempotency keys). ``""`` for a run that
        is not resumed or had no tool call.
        """
        if not self.resumed:
            return ""
        from ._note import render_resume_note

        frames = _take_until(self.journal.frames(self.run_id), self._resumed_at)
        return render_resume_note(frames, self.run_id)

    def frames(self) -> Iterator[Frame]:
        """Yield the run's journaled frames (pending ones are flushed first)."""
        self._flush()
        return self.journal.frames(self.run_id)


#: HTTP statuses a model API answers when trying again later may succeed.
TRANSIENT_STATUSES = frozenset({408, 409, 429})
_TRANSIENT_CLASSES = frozenset({"APIConnectionError", "APITimeoutError"})


def transient_api_error(exc: BaseException) -> bool:
    """True for a model SDK error that a later attempt may not meet (the run stays resumable).

    That is an error carrying an HTTP ``status_code`` of 408, 409, 429 or 5xx
    (OpenAI's and Anthropic's ``APIStatusError`` family), or a connection or
    timeout error of those SDKs (``APIConnectionError``, ``APITimeoutError``),
    matched by class name so that no SDK is imported. These are the statuses
    both SDKs retry by default (their ``_should_retry``).
    """
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and (status in TRANSIENT_STATUSES or status >= 500):
        return True
    return any(cls.__name__ in _TRANSIENT_CLASSES for cls in type(exc).__mro__)


class _Suspended(BaseException):
    """Raised to stop a run that waits for an approval (status ``suspended``).

    The run's exit records the status and swallows it, so the ``with`` block
    simply ends; ``run.status`` is ``"suspended"``.
    """


def _encode(value: Any, path: str) -> bytes:
    from ..frames import encode

    return encode(value, path)


def run(journal: Journal | str, run_id: str, **options: Any) -> Run:
    """Start or resume the run ``run_id``; use as ``with`` or ``async with``.

    Args:
        journal: a journal, or a URL (opened once per process and reused:
            :func:`redrive.storage.shared_journal`).
        run_id: the caller-chosen id, e.g. ``"support:{job.id}"`` (the job's
            id, never a session's).
        input: the run's input; fingerprinted, and a resume with a different
            input raises ``RunInputMismatchError``. Omit it to skip the check.
        replay: ``"strict"`` (default), ``"lenient"`` or a :class:`ReplayPolicy`.
        on_in_flight: ``"raise"`` (default) or ``"tell_model"``.
        max_attempts: starts allowed for one in-flight step (default 3).
        lease: hold a run lease of this many seconds (renewed in the background).
        on_busy: ``"raise"`` (``RunBusyError``) or ``"wait"`` (up to ``busy_timeout`` s).
        create: start the run when missing (default True; False raises UnknownRunError).
        live: False replays only: any step not in the journal raises ReplayMissError.
        redact: path patterns of argument fields never written to the journal.
        model_commit: how a live model step's frames are written: ``"write"``
            (default: appended at once without an fsync of their own; they survive
            the worker being killed, and the next durable write covers a machine
            crash), ``"group"`` (held in memory until the next durable write: a
            killed worker pays for the call again) or ``"each"`` (fsynced at once).
        retryable: exception types after which the run stays resumable.

    Returns:
        A :class:`Run`; entering it starts or resumes the run.

    Raises (on entering):
        RunInputMismatchError, TerminalRunError, UnknownRunError, RunBusyError,
        JournalCorruptError.
    """
    unknown = sorted(set(options) - _RUN_OPTIONS)
    if unknown:
        raise TypeError(
            f"redrive.run() got unknown option(s) {', '.join(map(repr, unknown))}; the options "
            f"are {', '.join(sorted(_RUN_OPTIONS))}"
        )
    if isinstance(journal, str):
        from ..storage import shared_journal

        journal = shared_journal(journal)
    return Run(journal, run_id, **options)


#: The keyword options of :func:`run` (those of the Run's constructor).
_RUN_OPTIONS = frozenset(inspect.signature(Run.__init__).parameters) - {"self", "journal", "run_id"}
