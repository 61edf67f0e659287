"""The Run: starts or resumes a run, replays recorded steps, records live ones.

The decision logic (match, resume policy, frame building) is shared by the
sync and async paths; they differ only in how they call the step's body.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.metadata
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal, TypeVar

import attrs

from ..errors import (
    AppendConflictError,
    DivergenceError,
    LeaseLostError,
    RecordedToolError,
    ReplayError,
    ReplayMissError,
    RetryLimitExceededError,
    RunBusyError,
    RunInputMismatchError,
    SideEffectRetryBlockedError,
    TerminalRunError,
    UnknownRunError,
)
from ..frames import FORMAT_VERSION, Frame, Kind, call_key, canonical, fingerprint, make_frame
from ..storage import Journal, RunRecord, RunStatus, RunUpdate
from ._cursor import STEP_KINDS, Cursor, Found, RecordedStep, decode_outcome
from ._delta import Expander
from ._diff import short
from ._policy import ReplayPolicy, compile_paths, match_view, redact_paths

__all__ = [
    "Recovery",
    "Run",
    "ToolSpec",
    "current_run",
    "idempotency_key",
    "run",
    "set_boundary_hook",
]

T = TypeVar("T")
_UNSET: Any = object()

_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("redrive_run", default=None)
_current_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "redrive_idempotency_key", default=None
)

#: Called at every step boundary when set (tests use it to crash at a point).
_boundary_hook: Callable[[str, dict[str, Any]], None] | None = None


def set_boundary_hook(hook: Callable[[str, dict[str, Any]], None] | None) -> None:
    """Install ``hook(boundary, info)``, called at each step boundary (None removes it).

    Boundaries: ``model_before`` (about to call the model), ``model_after``
    (response received, before its frames are queued), ``tool_claimed``
    (``tool_start`` durable, body not started), ``tool_body_done`` (body
    returned or raised, outcome not yet journaled), ``tool_recorded``
    (outcome durable, result not yet returned). ``info`` has ``run_id``,
    ``seq``, ``name``. Used by crash tests; see :mod:`redrive.testing`.
    """
    global _boundary_hook
    _boundary_hook = hook


def _boundary(point: str, run: Run, seq: int, name: str) -> None:
    hook = _boundary_hook
    if hook is not None:
        hook(point, {"run_id": run.run_id, "seq": seq, "name": name})


def current_run() -> Run | None:
    """Return the run active in this context (thread / asyncio task), or None."""
    return _current.get()


def idempotency_key() -> str | None:
    """Return the idempotency key of the tool step executing now, or None.

    The key is ``"{run_id}:{seq}:{tool}"`` (seq of the step's ``tool_start``),
    the same on every resume of the run; pass it to a payment or email API so
    that a re-executed step is deduplicated downstream. None outside a tool
    body run by redrive.
    """
    return _current_key.get()


@attrs.frozen
class Recovery:
    """What a tool's ``recover(args, idempotency_key)`` found about an in-flight call.

    Build with :meth:`done`, :meth:`not_done` or :meth:`unknown`.
    """

    state: Literal["done", "not_done", "unknown"]
    result: Any = None
    reason: str = ""

    @classmethod
    def done(cls, result: Any) -> Recovery:
        """The call completed with ``result``: journal it, do not run the body."""
        return cls("done", result)

    @classmethod
    def not_done(cls) -> Recovery:
        """The call never took effect: run the body now."""
        return cls("not_done")

    @classmethod
    def unknown(cls, reason: str = "") -> Recovery:
        """The outcome cannot be told: block the step."""
        return cls("unknown", reason=reason)


@attrs.frozen(kw_only=True)
class ToolSpec:
    """How a tool behaves on resume (built by :func:`redrive.tool`).

    Attributes:
        name: the tool's step name.
        restart_safe: True when re-running an in-flight call is harmless.
        read_only: the tool has no side effect (implies restart safe).
        recover: ``fn(args: dict, idempotency_key: str) -> Recovery`` or None.
        retryable: exception types after which the run stays resumable.
        declared: whether ``restart_safe`` was declared (False: the name heuristic decided).
    """

    name: str
    restart_safe: bool = False
    read_only: bool = False
    recover: Callable[[dict[str, Any], str], Recovery] | None = None
    retryable: tuple[type[BaseException], ...] = ()
    declared: bool = True


@attrs.define
class _Plan:
    seq: int
    key: str
    name: str
    turn: int
    replayed: bool = False
    value: Any = None
    error: BaseException | None = None
    match_key: str = ""


_DEFAULT_RETRYABLE: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)


def _version() -> str:
    try:
        return importlib.metadata.version("redrive")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"


def _error_payload(exc: BaseException, retryable: bool) -> dict[str, Any]:
    cls = type(exc)
    try:
        args = canonical(list(exc.args), "error.args")
    except TypeError:
        args = None
    return {
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "module": cls.__module__,
        "qualname": cls.__qualname__,
        "message": str(exc),
        "args": args,
        "retryable": retryable,
    }


def rebuild_error(run_id: str, seq: int, tool: str, error: dict[str, Any]) -> BaseException:
    """Rebuild a recorded tool exception as its own type, or a RecordedToolError.

    The type is only looked up in modules already imported (a journal never
    causes an import), must be an Exception subclass, and must accept the
    recorded ``args``.
    """
    module = sys.modules.get(str(error.get("module")))
    obj: Any = module
    for part in str(error.get("qualname", "")).split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    args = error.get("args")
    if isinstance(obj, type) and issubclass(obj, Exception) and isinstance(args, list):
        try:
            rebuilt = obj(*args)
        except Exception:
            rebuilt = None
        if rebuilt is not None and str(rebuilt) == error.get("message"):
            return rebuilt
    return RecordedToolError(
        f"run {run_id!r} seq {seq}: tool {tool!r} raised {error.get('type')}: "
        f"{error.get('message')} when it was recorded (the type cannot be rebuilt here, so it "
        "is replayed as this error)",
        run_id=run_id,
        seq=seq,
        tool=tool,
        error_type=error.get("type"),
        error_message=error.get("message"),
    )


class Run:
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

    def __init__(
        self,
        journal: Journal,
        run_id: str,
        *,
        input: Any = _UNSET,
        replay: str | ReplayPolicy = "strict",
        on_in_flight: Literal["raise", "tell_model"] = "raise",
        max_attempts: int = 3,
        lease: float | None = None,
        on_busy: Literal["raise", "wait"] = "raise",
        busy_timeout: float = 30.0,
        create: bool = True,
        live: bool = True,
        redact: tuple[str, ...] = (),
        model_commit: Literal["group", "each"] = "group",
        retryable: tuple[type[BaseException], ...] = _DEFAULT_RETRYABLE,
        entrypoint: str | None = None,
    ) -> None:
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run_id must be a non-empty string, not {run_id!r}")
        if on_in_flight not in ("raise", "tell_model"):
            raise ValueError(f"on_in_flight={on_in_flight!r}: use 'raise' or 'tell_model'")
        if on_busy not in ("raise", "wait"):
            raise ValueError(f"on_busy={on_busy!r}: use 'raise' or 'wait'")
        if model_commit not in ("group", "each"):
            raise ValueError(f"model_commit={model_commit!r}: use 'group' or 'each'")
        if lease is not None and lease <= 0:
            raise ValueError(f"lease={lease!r}: a lease is a positive number of seconds")
        self.journal = journal
        self.run_id = run_id
        self.policy = ReplayPolicy.of(replay)
        self.on_in_flight = on_in_flight
        self.max_attempts = max_attempts
        self.lease = lease
        self.on_busy = on_busy
        self.busy_timeout = busy_timeout
        self.create = create
        self.live = live
        self.model_commit = model_commit
        self.retryable = tuple(retryable)
        self.entrypoint = entrypoint
        self._input = input
        self._redact = compile_paths(redact)
        self._lock = threading.RLock()
        self._pending: list[Frame] = []
        self._next_seq = 0
        self._last_chain = ""
        self._turn = 0
        self._cursor: Cursor | None = None
        self._requests = Expander()
        self._token: contextvars.Token[Run | None] | None = None
        self._finished_record: RunRecord | None = None
        self._output: Any = None
        self._output_set = False
        self._epoch: int | None = None
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._renewer: threading.Thread | None = None
        self._stop_renew = threading.Event()
        self._lease_lost: LeaseLostError | None = None
        self._adoptable = False
        self._known_seq = 0
        self._failed_keys: dict[tuple[str, str], int] = {}
        self._tool_errors: dict[int, bool] = {}
        self.status = RunStatus.RUNNING.value
        self.replayed_steps = 0
        self.live_steps = 0
        self.resumed = False
        self._resumed_at = 0
        self.entered = False

    # -- lifecycle -----------------------------------------------------------

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
    def output(self) -> Any:
        """The run's output: recorded (finished run) or set by :meth:`finish`."""
        if self._finished_record is not None and not self._output_set:
            return self._finished_record.output_value()
        return self._output

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
        # frames from here on were written while this Run was alive (a step in flight
        # there belongs to a live worker, not to a crash)
        self._known_seq = self._next_seq
        self._token = _current.set(self)

    def _start_new(self) -> RunRecord | None:
        inp = None if self._input is _UNSET else self._input
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
        if self._input is not _UNSET and fingerprint(self._input) != record.input_fp:
            start = next(iter(self.journal.frames(self.run_id)), None)
            recorded = start.data().get("input") if start is not None else None
            from ._diff import diff_values, format_diff

            diff = diff_values(recorded, canonical(self._input, "input"))
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
        self._cursor = Cursor(self.run_id, _take_until(frames, limit), self.policy)
        self._next_seq = record.next_seq
        self._last_chain = record.last_chain
        self._resumed_at = record.next_seq
        if record.status == RunStatus.SUSPENDED.value and self.live:
            self.status = RunStatus.RUNNING.value
            # running again: a crash from here on leaves it among interrupted_runs()
            with contextlib.suppress(AppendConflictError):
                self.journal.append(
                    self.run_id, [], expected_seq=record.next_seq,
                    update=RunUpdate(status=RunStatus.RUNNING.value),
                )

    def _take_lease(self) -> None:
        assert self.lease is not None
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                self._epoch = self.journal.acquire_lease(self.run_id, self._owner, self.lease)
                break
            except RunBusyError:
                if self.on_busy == "raise" or time.monotonic() > deadline:
                    raise
                time.sleep(min(0.05, self.lease / 10))
        # the run may have moved while we waited for the lease: re-read it
        try:
            record = self.journal.get_run(self.run_id)
            assert record is not None
            if record.next_seq != self._next_seq:
                self._cursor = None
                self._finished_record = None
                self._resume(record)
        except BaseException:
            # entering fails (ended elsewhere, input mismatch...): do not sit on the lease
            with contextlib.suppress(Exception):
                self.journal.release_lease(self.run_id, self._owner, self._epoch)
            raise
        self._renewer = threading.Thread(
            target=self._renew_loop, name=f"redrive-lease-{self.run_id}", daemon=True
        )
        self._renewer.start()

    def _renew_loop(self) -> None:
        assert self.lease is not None and self._epoch is not None
        while not self._stop_renew.wait(self.lease / 3):
            try:
                self.journal.renew_lease(self.run_id, self._owner, self._epoch, self.lease)
            except LeaseLostError as exc:
                self._lease_lost = exc
                return
            except Exception:  # a transient database error: try again next period
                continue

    def _close(self, exc: BaseException | None) -> None:
        try:
            if self._finished_record is not None:
                self._check_fully_replayed(exc)
                return
            if self._lease_lost is not None:
                return
            if exc is None:
                self._check_fully_replayed(None)
                try:
                    with self._adopting():
                        self._end(RunStatus.SUCCEEDED, output=self._output)
                except _Adopted:
                    self._ended_elsewhere()
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

    def _resumable(self, exc: BaseException) -> bool:
        if isinstance(exc, ReplayError):
            return not isinstance(exc, TerminalRunError)
        retryable = self._tool_errors.get(id(exc))
        if retryable is not None:
            return retryable
        if getattr(exc, "retryable", None) is True or getattr(exc, "is_retryable", None) is True:
            return True
        return isinstance(exc, self.retryable)

    def _check_fully_replayed(self, exc: BaseException | None) -> None:
        if exc is not None or self._cursor is None:
            return
        # a lenient rule lets recorded steps of its kind go unasked (removed calls)
        left = [s for s in self._cursor.remaining() if self.policy.rule(s.kind) != "lenient"]
        if left:
            step = left[0]
            raise DivergenceError(
                f"run {self.run_id!r}: the loop finished but the journal has more steps, from "
                f"seq {step.seq} ({step.kind} {step.name}); the code took a shorter path than "
                f"the record. {len(left)} recorded step(s) were not asked for. If the change is "
                "intended, record a new run.",
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
                diff=[],
                context=[s.describe() for s in left[:5]],
            )

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

    # -- frames ----------------------------------------------------------------

    def _queue(self, kind: Kind, name: str, payload: Any, key: str = "") -> Frame:
        frame = make_frame(
            run_id=self.run_id,
            seq=self._next_seq,
            kind=kind,
            name=name,
            key=key,
            payload=payload,
            prev_chain=self._last_chain,
            epoch=self._epoch or 0,
        )
        self._pending.append(frame)
        self._next_seq += 1
        self._last_chain = frame.chain
        return frame

    def _flush(self, update: RunUpdate | None = None) -> None:
        """Append every queued frame in one durable transaction (group commit)."""
        with self._lock:
            if not self._pending and update is None:
                return
            if self._lease_lost is not None:
                raise self._lease_lost
            frames = self._pending
            first = frames[0].seq if frames else self._next_seq
            try:
                self.journal.append(
                    self.run_id, frames, expected_seq=first, update=update, epoch=self._epoch
                )
            except LeaseLostError as exc:
                self._lease_lost = exc
                raise
            except ReplayError as exc:
                if type(exc).__name__ == "AppendConflictError" and self._adoptable:
                    self._adopt(frames, first, exc)
                    raise _Adopted() from None
                if type(exc).__name__ == "AppendConflictError":
                    raise RunBusyError(
                        f"run {self.run_id!r}: another worker appended to this run at seq "
                        f"{first} while this one was executing it; this worker stops to avoid "
                        "running a step twice. Use a run lease (lease=seconds) so only one "
                        "worker executes a run, and resume later.",
                        run_id=self.run_id,
                        seq=first,
                    ) from exc
                raise
            self._pending = []

    @contextlib.contextmanager
    def _adopting(self) -> Iterator[None]:
        """Let a lost append race adopt the winner's frames (on_busy="wait") in this block."""
        with self._lock:
            before, self._adoptable = self._adoptable, self.on_busy == "wait"
            try:
                yield
            finally:
                self._adoptable = before

    def _adopt(
        self,
        pending: list[Frame],
        first: int,
        cause: BaseException | None,
        *,
        reopen: int | None = None,
        deadline: float | None = None,
    ) -> None:
        """Wait for the worker that won the append at seq ``first``, then continue from its frames.

        This worker's ``pending`` frames are dropped. Each step they opened must
        be in the winner's frames with the same outcome (a model that answered
        differently means this loop cannot continue); the step the caller asks
        for again (the lost claim) must have an outcome. The cursor is rebuilt
        over the journal as it stands, with the steps this loop already used
        consumed, so the caller's retry replays the winner's outcome.

        Raises:
            RunBusyError: ``busy_timeout`` passed first, or the winner's frames
                do not agree with what this worker already handed its loop.
        """
        if reopen is None:
            reopen = _reopened_step(pending)
        own_outcomes: dict[int, Frame] = {}
        opened: list[Frame] = []
        for frame in pending:
            if frame.kind in STEP_KINDS and not (
                frame.kind == Kind.TOOL_START.value and frame.seq == reopen
            ):
                opened.append(frame)
            elif frame.kind == Kind.MODEL_RESPONSE.value:
                own_outcomes[int(frame.data().get("step", -1))] = frame
        keep = {s.seq for s in self._cursor.remaining()} if self._cursor is not None else set()
        if deadline is None:
            deadline = time.monotonic() + self.busy_timeout
        delay = 0.005
        while True:
            record = self.journal.get_run(self.run_id)
            assert record is not None
            cursor = Cursor(
                self.run_id,
                _take_until(self.journal.frames(self.run_id), record.next_seq),
                self.policy,
            )
            ready = self._fast_forward(cursor, first, reopen, keep, opened, own_outcomes)
            if ready or RunStatus(record.status).terminal:
                break
            if time.monotonic() > deadline:
                raise RunBusyError(
                    f"run {self.run_id!r}: another worker claimed seq "
                    f"{first if reopen is None else reopen} and has not recorded its outcome "
                    f"within busy_timeout={self.busy_timeout} s (it may have died mid-step). "
                    "Resume the run later; a lease (lease=seconds) lets "
                    "another worker take over a dead one's run.",
                    run_id=self.run_id,
                    seq=first,
                    timed_out=True,
                ) from cause
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        self._cursor = cursor
        self._pending = []
        self._next_seq = record.next_seq
        self._last_chain = record.last_chain
        if RunStatus(record.status).terminal:
            self.status = record.status
            if record.status == RunStatus.SUCCEEDED.value:
                self._finished_record = record

    def _busy_step(self, step: RecordedStep) -> bool:
        """Handle an in-flight ``step`` that may belong to a live worker.

        A claim written while this Run was alive is another live worker's: wait
        for its outcome (on_busy="wait": the retry replays it) or raise
        ``RunBusyError``. Without a lease, under on_busy="wait", a claim found at
        entry that is younger than ``busy_timeout`` is presumed live too: wait
        until ``busy_timeout`` after the claim, and then (return True) treat it
        as interrupted. Returns False for a step that is simply in flight.
        """
        live = step.seq >= self._known_seq
        presumed = (
            not live
            and self._adoptable
            and self.lease is None
            and time.time() - step.start.at < self.busy_timeout
        )
        if not live and not presumed:
            return False
        if not self._adoptable:
            raise RunBusyError(
                f"run {self.run_id!r}: another worker claimed seq {step.seq} ({step.kind} "
                f"{step.name}) while this one was executing the run; this worker stops so the "
                "step runs once. Resume later, or pass on_busy='wait' to wait for its outcome.",
                run_id=self.run_id,
                seq=step.seq,
            )
        try:
            self._adopt(
                [], self._next_seq, None, reopen=step.seq,
                deadline=time.monotonic() + self.busy_timeout - (time.time() - step.start.at)
                if presumed else None,
            )
        except RunBusyError as exc:
            if presumed and getattr(exc, "timed_out", False):
                return True
            raise
        raise _Adopted()

    def _fast_forward(
        self,
        cursor: Cursor,
        first: int,
        reopen: int | None,
        keep: set[int],
        opened: list[Frame],
        own_outcomes: dict[int, Frame],
    ) -> bool:
        """Consume in ``cursor`` what this loop already used; True when the reopened step ended."""
        steps = cursor.remaining()
        for step in steps:
            if step.seq < first and step.seq not in keep and step.seq != reopen:
                cursor.consume(step)
        new = iter([s for s in steps if s.seq >= first])
        for frame in opened:
            found = next(new, None)
            if found is None or found.end is None:
                return False
            step = found
            if (step.kind, step.name, step.key) != (STEP_KINDS[frame.kind], frame.name, frame.key):
                raise self._disagree(frame, step)
            if frame.kind == Kind.MODEL_REQUEST.value:
                own = own_outcomes.get(frame.seq)
                theirs = decode_outcome(step).get("response")
                if own is None or own.data().get("response") != theirs:
                    raise self._disagree(frame, step)
            elif frame.kind == Kind.VALUE.value and (
                frame.data().get("value") != step.data.get("value")
            ):
                raise self._disagree(frame, step)
            cursor.consume(step)
        if reopen is None:
            return True
        if reopen >= first:
            target = next(new, None)
        else:
            target = next((s for s in steps if s.seq == reopen), None)
        return target is not None and target.end is not None

    def _disagree(self, frame: Frame, step: RecordedStep) -> RunBusyError:
        return RunBusyError(
            f"run {self.run_id!r}: another worker executed this run at the same time, and its "
            f"step at seq {step.seq} ({step.kind} {step.name}) differs from what this worker "
            f"already handed its loop ({frame.kind} {frame.name}); this worker stops. The run "
            "continues in the other worker; resume it later to continue from its journal.",
            run_id=self.run_id,
            seq=step.seq,
        )

    def _ended_elsewhere(self) -> None:
        """After losing the race to write ``run_end``: accept the other worker's ending."""
        if self._finished_record is not None:
            self._check_fully_replayed(None)
            return
        raise RunBusyError(
            f"run {self.run_id!r}: this worker's loop finished, but another worker is still "
            f"executing the run (status {self.status}); its ending is not recorded by this "
            "worker. Resume the run later to read its outcome.",
            run_id=self.run_id,
            seq=self._next_seq,
        )

    def _check_live(self, kind: str, name: str, args: Any, key: str) -> None:
        if self._lease_lost is not None:
            raise self._lease_lost
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
            raise ReplayMissError(
                f"run {self.run_id!r}: the loop asked for {kind} {name!r} with arguments "
                f"{short(args)}, which no recorded step answers, and {why}.\n"
                + (
                    "  closest recorded steps:\n    " + "\n    ".join(closest)
                    if closest
                    else "  no unconsumed recorded step of that kind"
                )
                + "\nWhat to do: re-record the run, or find the code change that added this "
                "call (redrive show / redrive diff).",
                run_id=self.run_id,
                seq=self._next_seq,
                kind=kind,
                name=name,
                found=args,
                closest=closest,
            )

    def _match(self, kind: str, name: str, args: Any, key: str) -> RecordedStep | None:
        cursor = self._cursor
        if cursor is None:
            return None
        step = cursor.match(kind, name, args, key)
        if step is None and self.policy.rule(kind) != "lenient" and not cursor.exhausted:
            raise cursor.divergence(cursor.remaining()[0], Found(kind, name, key, args))
        if step is not None and step.kind == "model":
            self._turn = max(self._turn, step.turn)
        return step

    def _prepare(self, args: Any, path: str) -> Any:
        return redact_paths(canonical(args, path), self._redact)

    # -- tool steps --------------------------------------------------------------

    def _tool_begin(self, spec: ToolSpec, arguments: dict[str, Any]) -> _Plan:
        # A lost claim under on_busy="wait" adopts the winner's frames (_adopt) and
        # matches the step again: now it replays the winner's outcome.
        while True:
            with self._adopting():
                try:
                    return self._tool_begin_once(spec, arguments)
                except _Adopted:
                    continue

    def _tool_begin_once(self, spec: ToolSpec, arguments: dict[str, Any]) -> _Plan:
        stored = self._prepare(arguments, "args")
        key = call_key(spec.name, match_view(stored))
        with self._lock:
            turn = self._turn
            step = self._match("tool", spec.name, stored, key)
            if step is not None and step.end is not None and not self._ended_run(step):
                self.replayed_steps += 1
                return self._tool_replayed(spec, step, key)
            if step is not None and step.end is None and self._busy_step(step):
                return self._tool_in_flight(spec, step, stored, key)  # presumed live: it was not
            if step is not None:
                # in flight, or a retryable error that ended the last execution: unsettled
                return self._tool_in_flight(spec, step, stored, key)
            self._check_live("tool", spec.name, stored, key)
            failed_at = self._failed_keys.get((spec.name, key))
            if failed_at is not None and not (spec.restart_safe or spec.read_only):
                return self._blocked(spec, failed_at, stored, key, turn, attempts=1, retry=True)
            seq = self._next_seq
            idem = f"{self.run_id}:{seq}:{spec.name}"
            self._queue(
                Kind.TOOL_START,
                spec.name,
                {
                    "args": stored,
                    "turn": turn,
                    "restart_safe": spec.restart_safe,
                    "read_only": spec.read_only,
                    "idempotency_key": idem,
                },
                key,
            )
            self._flush()
            self.live_steps += 1
        _boundary("tool_claimed", self, seq, spec.name)
        return _Plan(seq=seq, key=idem, name=spec.name, turn=turn, match_key=key)

    def _ended_run(self, step: RecordedStep) -> bool:
        """True for a retryable tool error that ended the last execution (no step after it).

        Such a step is not settled: resuming re-attempts it under the in-flight
        rules (restart safe: run again; recover(); else block or tell the model),
        so a retryable error leaves a run that makes progress when resumed.
        """
        if step.end is None or step.end.kind != Kind.TOOL_ERROR.value:
            return False
        if not self.live or self._finished_record is not None or self._cursor is None:
            return False
        error = decode_outcome(step).get("error") or {}
        return bool(error.get("retryable")) and self._cursor.exhausted

    def _tool_replayed(self, spec: ToolSpec, step: RecordedStep, key: str) -> _Plan:
        outcome = decode_outcome(step)
        idem = f"{self.run_id}:{step.seq}:{spec.name}"
        plan = _Plan(seq=step.seq, key=idem, name=spec.name, turn=step.turn, replayed=True)
        assert step.end is not None
        if step.end.kind == Kind.TOOL_ERROR.value:
            error = outcome.get("error") or {}
            plan.error = rebuild_error(self.run_id, step.seq, spec.name, error)
            self._tool_errors[id(plan.error)] = bool(error.get("retryable"))
            if not (spec.restart_safe or spec.read_only):
                self._failed_keys[(spec.name, key)] = step.seq
        else:
            plan.value = outcome.get("result")
        return plan

    def _tool_in_flight(
        self, spec: ToolSpec, step: RecordedStep, stored: Any, key: str
    ) -> _Plan:
        idem = f"{self.run_id}:{step.seq}:{spec.name}"
        self._check_live("tool", spec.name, stored, key)
        if step.attempts >= self.max_attempts:
            raise RetryLimitExceededError(
                f"run {self.run_id!r} seq {step.seq}: tool {spec.name!r} was started "
                f"{step.attempts} times without finishing (limit {self.max_attempts}); the run "
                "stops instead of looping. Find out why the worker dies in this tool, settle the "
                "outcome by hand, then fork the run or raise max_attempts.",
                run_id=self.run_id,
                seq=step.seq,
                tool=spec.name,
                arguments=stored,
                idempotency_key=idem,
                attempts=step.attempts,
            )
        if spec.recover is not None:
            try:
                found = spec.recover(dict(stored), idem)
            except Exception as exc:
                raise self._blocked_error(spec, step.seq, stored, idem, step.attempts,
                                          cause=f"its recover() raised {type(exc).__name__}: {exc}"
                                          ) from exc
            if not isinstance(found, Recovery):
                raise TypeError(
                    f"tool {spec.name!r}: recover() returned {found!r}; return "
                    "redrive.Recovery.done(result), .not_done() or .unknown()"
                )
            if found.state == "done":
                self._queue(
                    Kind.TOOL_DONE,
                    spec.name,
                    {"step": step.seq, "result": self._result(found.result), "recovered": True},
                )
                self._flush()
                self.replayed_steps += 1
                return _Plan(seq=step.seq, key=idem, name=spec.name, turn=step.turn,
                             replayed=True, value=canonical(found.result, "result"))
            if found.state == "unknown":
                return self._blocked(spec, step.seq, stored, key, step.turn, step.attempts,
                                     cause=found.reason or "recover() could not tell")
            return self._rerun(spec, step, idem, key)
        if spec.restart_safe or spec.read_only:
            return self._rerun(spec, step, idem, key)
        return self._blocked(spec, step.seq, stored, key, step.turn, step.attempts)

    def _rerun(self, spec: ToolSpec, step: RecordedStep, idem: str, key: str) -> _Plan:
        self._queue(
            Kind.NOTE,
            spec.name,
            {"event": "attempt", "step": step.seq, "attempt": step.attempts + 1},
        )
        self._flush()
        self.live_steps += 1
        _boundary("tool_claimed", self, step.seq, spec.name)
        return _Plan(seq=step.seq, key=idem, name=spec.name, turn=step.turn, match_key=key)

    def _blocked_error(
        self, spec: ToolSpec, seq: int, stored: Any, idem: str, attempts: int,
        cause: str = "", retry: bool = False,
    ) -> SideEffectRetryBlockedError:
        what = (
            f"tool {spec.name!r} already ran at seq {seq} and failed; calling it again with the "
            "same arguments could repeat its side effect"
            if retry
            else f"tool {spec.name!r} was in flight at seq {seq} when the run stopped: it "
            "started, and whether its side effect happened is unknown"
        )
        return SideEffectRetryBlockedError(
            f"run {self.run_id!r}: {what}. It is not restart-safe, so redrive will not run it "
            f"again.\n  arguments: {short(stored)}\n  idempotency key: {idem}\n"
            + (f"  cause: {cause}\n" if cause else "")
            + "What to do: check the external system for this call, then declare the tool "
            "restart_safe=True (if it dedupes on the idempotency key), give it a recover() hook, "
            "or resume with on_in_flight='tell_model' to let the model reconcile.",
            run_id=self.run_id,
            seq=seq,
            tool=spec.name,
            arguments=stored,
            idempotency_key=idem,
            attempts=attempts,
        )

    def _blocked(
        self, spec: ToolSpec, seq: int, stored: Any, key: str, turn: int, attempts: int,
        cause: str = "", retry: bool = False,
    ) -> _Plan:
        idem = f"{self.run_id}:{seq}:{spec.name}"
        error = self._blocked_error(spec, seq, stored, idem, attempts, cause, retry)
        if self.on_in_flight == "raise":
            raise error
        outcome = {
            "status": "not_safely_resumable",
            "tool": spec.name,
            "arguments": stored,
            "idempotency_key": idem,
            "rerun": False,
            "reason": (
                "this call was interrupted while running; it was not re-run to avoid a "
                "duplicate side effect"
                if not retry
                else "this call failed earlier with the same arguments; it was not retried to "
                "avoid a duplicate side effect"
            ),
            "reconcile": (
                f"check whether {spec.name} took effect (idempotency key {idem}) before "
                "deciding what to do; do not assume it did or did not"
            ),
        }
        if cause:
            outcome["cause"] = cause
        if retry:
            new_seq = self._next_seq
            self._queue(
                Kind.TOOL_START,
                spec.name,
                {"args": stored, "turn": turn, "restart_safe": False,
                 "read_only": False, "idempotency_key": idem, "blocked": True},
                key,
            )
            self._queue(Kind.TOOL_DONE, spec.name, {"step": new_seq, "result": outcome})
            seq = new_seq
        else:
            self._queue(Kind.TOOL_DONE, spec.name, {"step": seq, "result": outcome})
        self._flush()
        return _Plan(seq=seq, key=idem, name=spec.name, turn=turn, replayed=True, value=outcome)

    def _result(self, value: Any) -> Any:
        return canonical(value, "result")

    def _tool_done(self, spec: ToolSpec, plan: _Plan, value: Any) -> Any:
        _boundary("tool_body_done", self, plan.seq, spec.name)
        try:
            result = self._result(value)
        except TypeError as exc:
            error = TypeError(
                f"run {self.run_id!r} seq {plan.seq}: tool {spec.name!r} ran, but its result "
                f"cannot be journaled: {exc}. Return plain data, or give the tool a "
                "result_type/codec. The call is recorded as failed so it is not re-run."
            )
            self._tool_failed(spec, plan, error)
            raise error from None
        with self._lock:
            self._queue(Kind.TOOL_DONE, spec.name, {"step": plan.seq, "result": result})
            self._flush()
        _boundary("tool_recorded", self, plan.seq, spec.name)
        return result

    def _tool_failed(self, spec: ToolSpec, plan: _Plan, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError | GeneratorExit):
            return  # cancelled mid-body: the outcome is unknown, the step stays in flight
        retryable = bool(
            isinstance(exc, spec.retryable + self.retryable)
            or getattr(exc, "retryable", None) is True
            or getattr(exc, "is_retryable", None) is True
        )
        if not isinstance(exc, Exception):
            return
        _boundary("tool_body_done", self, plan.seq, spec.name)
        with self._lock:
            self._queue(
                Kind.TOOL_ERROR,
                spec.name,
                {"step": plan.seq, "error": _error_payload(exc, retryable)},
            )
            self._flush()
            # a body that ran and failed may have had its side effect, retryable or not:
            # the same call again in this run is blocked unless the tool is restart safe
            if not (spec.restart_safe or spec.read_only) and plan.match_key:
                self._failed_keys[(spec.name, plan.match_key)] = plan.seq
        self._tool_errors[id(exc)] = retryable
        _boundary("tool_recorded", self, plan.seq, spec.name)

    def tool_step(
        self, spec: ToolSpec, arguments: dict[str, Any], body: Callable[[str], T]
    ) -> Any:
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
        plan = self._tool_begin(spec, arguments)
        if plan.replayed:
            if plan.error is not None:
                raise plan.error
            return plan.value
        token = _current_key.set(plan.key)
        try:
            value = body(plan.key)
        except BaseException as exc:
            self._tool_failed(spec, plan, exc)
            raise
        finally:
            _current_key.reset(token)
        return self._tool_done(spec, plan, value)

    async def atool_step(
        self, spec: ToolSpec, arguments: dict[str, Any], body: Callable[[str], Awaitable[T]]
    ) -> Any:
        """The async form of :meth:`tool_step` (``body`` returns an awaitable)."""
        plan = self._tool_begin(spec, arguments)
        if plan.replayed:
            if plan.error is not None:
                raise plan.error
            return plan.value
        token = _current_key.set(plan.key)
        try:
            value = await body(plan.key)
        except BaseException as exc:
            self._tool_failed(spec, plan, exc)
            raise
        finally:
            _current_key.reset(token)
        return self._tool_done(spec, plan, value)

    # -- model steps -------------------------------------------------------------

    def model_begin(self, name: str, request: Any) -> tuple[RecordedStep | None, Any, str, int]:
        """Match a model step; return ``(recorded step or None, stored request, key, turn)``.

        Recorders call this, then either decode the recorded response or call
        the model and :meth:`model_record` its response.

        Raises:
            DivergenceError, ReplayMissError, LeaseLostError.
        """
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
        _boundary("model_before", self, self._next_seq, name)
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
        _boundary("model_after", self, self._next_seq, name)
        with self._lock:
            if unfinished is None:
                seq = self._next_seq
                if self._cursor is not None:
                    self._requests = self._cursor.expander
                payload = self._requests.stored(
                    name, {"args": stored_request, "turn": turn, "view": view}
                )
                self._queue(Kind.MODEL_REQUEST, name, payload, key)
            else:
                seq = unfinished.seq
            self._queue(Kind.MODEL_RESPONSE, name, {"step": seq, "response": response,
                                                    "view": view})
            self.live_steps += 1
            self._turn += 1
            if self.model_commit == "each":
                with self._adopting(), contextlib.suppress(_Adopted):
                    self._flush()

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

    # -- values ----------------------------------------------------------------

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
        with self._lock:
            step = self._match("value", name, args, key)
            if step is not None:
                self.replayed_steps += 1
                return step.data.get("value")
            self._check_live("value", name, args, key)
            value = make()
            self._queue(
                Kind.VALUE, name, {"args": args, "turn": self._turn, "value": value}, key
            )
            self.live_steps += 1
            return value

    # -- notes and resume information --------------------------------------------

    def note(self, name: str, data: Any) -> None:
        """Journal a note (not a step; never matched on replay)."""
        with self._lock:
            if self._finished_record is not None or not self.live:
                return
            self._queue(Kind.NOTE, name, {"data": data})

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


class _Adopted(Exception):
    """Internal: a lost append was replaced by the winner's frames; match the step again."""


def _reopened_step(pending: list[Frame]) -> int | None:
    """Return the seq of the tool step a failed flush was settling, or None.

    That is the claim (a trailing ``tool_start``) or the step an outcome or
    attempt note refers to; the caller asks the cursor for it again.
    """
    if not pending:
        return None
    last = pending[-1]
    if last.kind == Kind.TOOL_START.value:
        return last.seq
    if last.kind in (Kind.TOOL_DONE.value, Kind.TOOL_ERROR.value, Kind.NOTE.value):
        step = last.data().get("step")
        return int(step) if isinstance(step, int) else None
    return None


class _Suspended(BaseException):
    """Raised to stop a run that waits for an approval (status ``suspended``).

    The run's exit records the status and swallows it, so the ``with`` block
    simply ends; ``run.status`` is ``"suspended"``.
    """


def _take_until(frames: Iterator[Frame], limit: int) -> Iterator[Frame]:
    for frame in frames:
        if frame.seq >= limit:
            return
        yield frame


def _encode(value: Any, path: str) -> bytes:
    from ..frames import encode

    return encode(value, path)


def run(journal: Journal | str, run_id: str, **options: Any) -> Run:
    """Start or resume the run ``run_id``; use as ``with`` or ``async with``.

    Args:
        journal: a journal, or a URL for :func:`redrive.open_journal`.
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
        model_commit: ``"group"`` (model frames ride on the next durable write) or ``"each"``.
        retryable: exception types after which the run stays resumable.

    Returns:
        A :class:`Run`; entering it starts or resumes the run.

    Raises (on entering):
        RunInputMismatchError, TerminalRunError, UnknownRunError, RunBusyError,
        JournalCorruptError.
    """
    if isinstance(journal, str):
        from ..storage import open_journal

        journal = open_journal(journal)
    return Run(journal, run_id, **options)

