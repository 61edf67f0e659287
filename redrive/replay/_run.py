"""The Run: starts or resumes a run, replays recorded steps, records live ones.

One implementation serves the sync and the async face: the async face runs
the same blocking sections off the event loop (:mod:`._faces`). A Run is a
chain of parts, each built on the one before:

- :mod:`._state` (RunState): options, counters, matching against the cursor;
  it owns a :class:`~._lease.LeaseKeeper` and a :class:`~._writer.JournalWriter`;
- :mod:`._opening` (Opening): start, resume, catch up after a wait;
- :mod:`._claims` (Claims): the durable write, adopting a lost append race;
- :mod:`._tools` (ToolSteps): the tool-step decisions and resume policy;
- :mod:`._recorder_steps` (RecorderSteps): the recorder-facing handles of :mod:`._handle`;
- this module (Run): the lifecycle and the user's part (``finish``, ``output``...).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any, TypeVar, Unpack

from ..errors import (
    ReplayError,
    RunBusyError,
    RunBusyReason,
    TerminalRunError,
    UnknownRunError,
)
from ..frames import Frame, Kind, canonical
from ..storage import Journal, RunStatus, RunUpdate, cancel_text
from ._context import (
    _current,
    _enter,
    _leave,
    close_here,
    current_run,
    fencing_token,
    idempotency_key,
    open_here,
    opener,
    set_boundary_hook,
)
from ._events import log_closed, log_opened
from ._faces import Wait, adrive, drive, off_loop
from ._handle import StepSource
from ._recorder_steps import RecorderSteps
from ._redirect import redirected
from ._state import RunOptions, _take_until
from ._tools import Recovery, ToolSpec, rebuild_error, tool_error_retryable
from ._writer import _Adopted

__all__ = [
    "Recovery",
    "Run",
    "RunOptions",
    "ToolSpec",
    "current_run",
    "fencing_token",
    "idempotency_key",
    "rebuild_error",
    "run",
    "set_boundary_hook",
]

T = TypeVar("T")


class Run(RecorderSteps):
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

    def _opening(self) -> Wait[None]:
        """Start or resume the run, taking or waiting for its lease (a procedure with waits).

        Blocking journal work only: the context is bound by :meth:`_bind`, on the
        caller's side (for the async face, on the event loop).
        """
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
            yield from self._take_lease()
        elif record is not None and self.live and not self.finished:
            yield from self._wait_for_lease_holder()
        # frames from here on were written while this Run was alive (a step in flight
        # there belongs to a live worker, not to a crash)
        self._known_seq = self._writer.next_seq
        log_opened(self)

    def _open_in_process(
        self, thread: threading.Thread, task: asyncio.Task[Any] | None, where: str
    ) -> Wait[None]:
        """Make this the one live block of its run in this process (a procedure with waits).

        A second live block on the same run (same journal object) would take
        the first one's running steps for interrupted ones: it is refused
        (``on_busy="raise"``), or waits until the first block ends
        (``on_busy="wait"``, up to ``busy_timeout``). Replay-only runs
        (``live=False``) write nothing and are not counted.

        Raises:
            RunBusyError: (reason ``open_here``) another live block of this run is
                open in this process: ``on_busy="raise"``, or it did not end within
                ``busy_timeout``, or it is open in this very thread or task (a
                nested block, which waiting would deadlock).
        """
        if not self.live:
            return
        deadline = time.monotonic() + self.busy_timeout
        while True:
            found = open_here(self, thread, task, where)
            if found is None:
                return
            there, same_flow = found
            timed_out = time.monotonic() > deadline
            if self.on_busy == "raise" or same_flow or timed_out:
                if same_flow:
                    advice = (
                        "It is open in this same thread or task (a nested block): use the "
                        "run object you already have (redrive.current_run())."
                    )
                elif timed_out:
                    advice = (
                        f"It did not end within busy_timeout={self.busy_timeout} s: resume the "
                        "run once that block has ended."
                    )
                else:
                    advice = (
                        "Run the extra work inside that block (threads from redrive.executor(), "
                        "asyncio tasks created in it), or pass on_busy='wait' to open this block "
                        "once that one ends."
                    )
                raise RunBusyError(
                    f"run {self.run_id!r} is already open in this process ({there}) on "
                    f"journal {self.journal.url}: a second live block on the same run would "
                    "take the first one's running steps for interrupted ones and settle them "
                    f"twice, so this one ({where}) was not opened and nothing was written. "
                    + advice,
                    run_id=self.run_id,
                    where=there,
                    timed_out=timed_out,
                    reason=RunBusyReason.OPEN_HERE,
                )
            yield 0.05

    async def _aopen_in_process(self) -> None:
        """The async face of :meth:`_open_in_process`: its checks are cheap, on the loop."""
        procedure = self._open_in_process(*opener())
        while True:
            try:
                delay = next(procedure)
            except StopIteration:
                return
            await asyncio.sleep(delay)

    def _bind(self) -> None:
        """Make this run the current one in the caller's context (after :meth:`_opening`)."""
        self._token = _current.set(self)
        _enter(self)

    def _unbind(self) -> None:
        """Undo :meth:`_bind` (after :meth:`_closing`, whatever it raised)."""
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        _leave(self)

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

    def _closing(self, exc: BaseException | None) -> None:
        """End this execution of the run (blocking journal work; see :meth:`_unbind`).

        Logs how it ended (:mod:`._events`), including an error raised while ending it.
        """
        try:
            self._close_run(exc)
        except BaseException as raised:
            log_closed(self, raised)
            raise
        log_closed(self, exc)

    def _close_run(self, exc: BaseException | None) -> None:
        try:
            if self._finished_record is not None:
                if not self._short_circuited:
                    self._check_fully_replayed(exc)
                return
            if self._lease.lost is not None:
                return
            if self.status == RunStatus.CANCELLED.value:
                return  # cancel() ended it: nothing more to write
            if _cancelled_elsewhere(exc, self.run_id):
                self.status = RunStatus.CANCELLED.value  # journal.cancel() ended it meanwhile
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
                        self._end(RunStatus.SUCCEEDED, output=self._output, close=True)
                except _Adopted:
                    self._ended_elsewhere()
            elif isinstance(exc, INTERRUPTIONS):
                # nobody asked for it (a timeout, a job runner's cancel, SIGINT, a deploy's
                # SIGTERM, a closed generator): like a crash, the run stays resumable
                self._flush_interrupted(exc)
            elif isinstance(exc, _Suspended):
                self._flush(update=RunUpdate(status=RunStatus.SUSPENDED.value))
                self.status = RunStatus.SUSPENDED.value
            elif self._resumable(exc):
                self._flush()
            else:
                self._end(RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}", close=True)
        finally:
            self._close_writes()  # after the last write: a thread that outlives the block raises
            self._release()

    def _flush_interrupted(self, exc: BaseException) -> None:
        """Journal the frames made before an interruption; the interruption still propagates.

        A write that fails here is noted on ``exc`` (as after a crash, the run
        resumes from its last journaled step) rather than raised over it.
        """
        try:
            self._flush()
        except Exception as failed:
            if _cancelled_elsewhere(failed, self.run_id):
                self.status = RunStatus.CANCELLED.value
            exc.add_note(
                f"redrive: run {self.run_id!r}: the frames made before this interruption "
                f"were not journaled ({type(failed).__name__}: {failed})"
            )

    def _release(self) -> None:
        """Stop renewing the run's lease and release it (it lapses by itself if this fails)."""
        self._lease.release()

    def _resumable(self, exc: BaseException) -> bool:
        """Whether the run stays resumable after ``exc`` ended its block.

        The engine knows no SDK: it honours the exception's ``retryable`` (or
        ``is_retryable``) attribute, which the recorders set from provider
        knowledge (see ``redrive.recorders._provider``), a tool's recorded
        mark, and the run's ``retryable`` exception types. A redrive error
        re-raised by a framework as its own (``raise FrameworkError(...) from
        err``, as the OpenAI Agents SDK does for a tool's error) counts as that
        redrive error: the step it stopped never finished.
        """
        if isinstance(exc, ReplayError):
            return not isinstance(exc, TerminalRunError)
        cause = exc.__cause__
        while cause is not None:  # a framework re-raised redrive's error as its own
            if isinstance(cause, ReplayError):
                return not isinstance(cause, TerminalRunError)
            cause = cause.__cause__
        retryable = tool_error_retryable(exc)
        if retryable is not None:
            return retryable
        flag = getattr(exc, "retryable", None)
        if flag is True or getattr(exc, "is_retryable", None) is True:
            return True
        # False or unmarked: a recorded error replayed gives the same answer again
        return isinstance(exc, self.retryable)

    def cancel(self, reason: str, *, by: str = "run.cancel") -> None:
        """End the run ``cancelled`` at once, on purpose, naming who and why.

        The cancel is committed before this returns (frames already made are
        written first, then a ``run_end`` naming ``by`` and ``reason``): the
        run is terminal, and a redelivery of it raises ``TerminalRunError``.
        Every later step of this block is refused (a model, tool or value
        step raises ``TerminalRunError`` before its call goes out, whatever
        ``model_commit``), and exiting the block
        writes nothing more, whatever it raises. This is the only way a run
        ends ``cancelled``: a timeout, a task cancelled by a job runner,
        ``KeyboardInterrupt`` or ``SystemExit`` leave it resumable. From
        outside the run, use ``journal.cancel(run_id, reason=..., by=...)``.

        In async code use :meth:`acancel` (this one writes on the caller's thread).

        Args:
            reason: why (free text, non-empty), kept in the run's ``error``.
            by: who cancels (free text, non-empty).

        Raises:
            ValueError: ``reason`` or ``by`` is empty.
            RuntimeError: the run is not executing live (outside its block, or
                replay-only with ``live=False``).
            TerminalRunError: the run already ended (succeeded, failed, or
                cancelled, here or from outside).
            LeaseLostError, JournalWriteError: the write was refused.
        """
        if not reason or not by:
            raise ValueError("run.cancel() needs a reason and who cancels (by): both non-empty")
        if not self.live or self._token is None:
            raise RuntimeError(
                f"run {self.run_id!r}: cancel() works inside the run's block of a live run; "
                f"from elsewhere use journal.cancel({self.run_id!r}, reason=..., by=...)"
            )
        if self._finished_record is not None or RunStatus(self.status).terminal:
            raise TerminalRunError(
                f"run {self.run_id!r} already ended with status {self.status}; there is "
                "nothing to cancel",
                run_id=self.run_id,
                status=self.status,
            )
        text = cancel_text(reason, by)
        self._end(RunStatus.CANCELLED, error=text, extra={"reason": reason, "by": by})
        self._ended_why = text

    async def acancel(self, reason: str, *, by: str = "run.cancel") -> None:
        """The async form of :meth:`cancel`: the journal write runs off the event loop."""
        await off_loop(functools.partial(self.cancel, reason, by=by))

    def _end(
        self,
        status: RunStatus,
        *,
        output: Any = None,
        error: str | None = None,
        extra: dict[str, Any] | None = None,
        close: bool = False,
    ) -> None:
        """Write ``run_end`` with ``status`` (and the run's record); ``close``: the block ends."""
        payload: dict[str, Any] = {"status": status.value, "output": output, "error": error}
        payload.update(extra or {})
        try:
            # the run record's output passes the run's scrubber, as the run_end frame does
            scrubbed = self._writer.scrubber.value(canonical(output, "output"))
            out_bytes = None if status is not RunStatus.SUCCEEDED else _encode(scrubbed, "output")
        except TypeError as exc:
            payload = {"status": RunStatus.FAILED.value, "output": None, "error": str(exc)}
            status, out_bytes, error = RunStatus.FAILED, None, str(exc)
        with self._lock:
            self._writer.queue(Kind.RUN_END, "run", payload)
            self._flush(
                update=RunUpdate(status=status.value, output=out_bytes, error=error),
            )
            self.status = status.value
            if close:  # atomically with run_end: no thread of this run appends after it
                self._close_writes()

    def __enter__(self) -> Run:
        drive(self._open_in_process(*opener()))
        try:
            drive(self._opening())
        except BaseException:
            close_here(self)
            raise
        self._bind()
        return self

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> bool:
        try:
            self._closing(exc)
        finally:
            self._unbind()
            close_here(self)
        return isinstance(exc, _Suspended)  # suspended: the block ends, status says why

    async def __aenter__(self) -> Run:
        await self._aopen_in_process()
        try:
            await adrive(self._opening())
        except asyncio.CancelledError:
            close_here(self)
            await off_loop(self._release)  # opened, but the block will never run
            raise
        except BaseException:
            close_here(self)
            raise
        self._bind()
        return self

    async def __aexit__(self, et: Any, exc: BaseException | None, tb: Any) -> bool:
        try:
            await off_loop(self._closing, exc)
        finally:
            self._unbind()
            close_here(self)
        return isinstance(exc, _Suspended)

    def note(self, name: str, data: Any) -> None:
        """Journal a note (not a step; never matched on replay).

        Raises:
            RunEndedError: the run's block has ended (nothing is written).
        """
        with self._lock:
            self._refuse_after_end(f"note {name!r}")
            if self._finished_record is not None or not self.live:
                return
            self._writer.queue(Kind.NOTE, name, {"data": self.redact(data)})

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

    def _repr_html_(self) -> str:
        """The run's timeline (as ``redrive view`` draws it), for Jupyter to display.

        Returns:
            An ``<iframe srcdoc=...>`` holding the self-contained page: steps
            this execution replayed are marked ``replayed``, the others ``live``.
        """
        from .._view import as_iframe

        resumed_at = self._resumed_at if self.resumed else 0
        return as_iframe(list(self.frames()), self.run_id, replayed_before=resumed_at)


#: What ends a block without anyone asking for the run to end: a timeout or a job
#: runner's cancel (``asyncio.CancelledError``), SIGINT (``KeyboardInterrupt``), a
#: SIGTERM handler or ``sys.exit`` (``SystemExit``), a generator closed early
#: (``GeneratorExit``). The run stays resumable, as after a crash (DESIGN invariant 12).
INTERRUPTIONS: tuple[type[BaseException], ...] = (
    asyncio.CancelledError,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
)


def _cancelled_elsewhere(exc: BaseException | None, run_id: str) -> bool:
    """True when ``exc`` is the journal refusing a write because the run was cancelled."""
    return (
        isinstance(exc, TerminalRunError)
        and exc.run_id == run_id
        and exc.status == RunStatus.CANCELLED.value
    )


class _Suspended(BaseException):
    """Raised to stop a run that waits for an approval (status ``suspended``).

    The run's exit records the status and swallows it, so the ``with`` block
    simply ends; ``run.status`` is ``"suspended"``.
    """


def _encode(value: Any, path: str) -> bytes:
    from ..frames import encode

    return encode(value, path)


def run(journal: Journal | str, run_id: str, **options: Unpack[RunOptions]) -> Run:
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
            Default ``"auto"``: a lease of 30 seconds on a journal made for many
            workers (Postgres), so two workers started together on one run never
            both execute it or pay for a model call twice (the second gets
            ``RunBusyError`` with reason ``leased``, or waits under
            ``on_busy="wait"``); none on DuckDB, memory and ``.rdj`` journals.
            ``None``: no lease; on Postgres, two workers may then both pay for
            a model call (side effects still run once: claims are atomic).
        on_busy: ``"raise"`` (``RunBusyError``) or ``"wait"`` (up to ``busy_timeout`` s).
        busy_timeout: seconds to wait for another worker under ``on_busy="wait"`` (default 30).
        create: start the run when missing (default True; False raises UnknownRunError).
        live: False replays only: any step not in the journal raises ReplayMissError.
        redact: path patterns of argument fields never written to the journal.
        model_commit: how a live model step's frames are written: ``"write"``
            (default: appended at once without an fsync of their own; they survive
            the worker being killed, and the next durable write covers a machine
            crash), ``"group"`` (held in memory until the next durable write: a
            killed worker pays for the call again) or ``"each"`` (fsynced at once).
        retryable: exception types after which the run stays resumable.
        entrypoint: ``"module:qualname"`` of the function driving the run
            (``@redrive.durable`` sets it; ``redrive check`` imports it).
        app_version: the application's version, recorded in the run's fingerprint
            (default: ``$REDRIVE_APP_VERSION``, else the git commit of the
            entrypoint's checkout, else its package's version).
        live_tools: ``True`` (every tool) or a list of tool names whose bodies
            run again where the journal has their outcome, model steps still
            replayed: for tests whose tools write to the test's own resources,
            and for a breakpoint in a tool while replaying an incident. Each
            result (or exception) is checked against the record: a difference
            raises ``DivergenceError`` naming the path (``$.result...``); nothing
            is written for such a step. Default False.

    Returns:
        A :class:`Run`; entering it starts or resumes the run.

    Raises:
        TypeError: (at once) an unknown option, or an option of the wrong type;
            nothing is written.
        ValueError: (at once) ``run_id`` breaks the run-id rule (empty, NUL, a
            lone surrogate, over 1,024 UTF-8 bytes; see ``redrive._runid``), or
            an option has a value outside its choices; nothing is written.

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
    journal, chosen = redirected(journal, options)  # inside a pytest plugin test: its journal
    if isinstance(journal, str):
        from ..storage import shared_journal

        journal = shared_journal(journal)
    return Run(journal, run_id, **chosen)


#: The keyword options of :func:`run` (those of the Run's constructor).
_RUN_OPTIONS = RunOptions.__optional_keys__


def _is_a_step_source(run: Run) -> StepSource:
    """Typing only: mypy checks here that a Run offers recorders all of :class:`StepSource`."""
    return run
