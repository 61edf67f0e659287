"""A run's block: entering it, notes, and ending it.

Entering starts or resumes the run, takes or waits for its lease, and makes
it the one live block of its run in this process; ending it writes how it
ended (succeeded, failed, suspended, interrupted, cancelled).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .._stored import store
from ..errors import (
    RunBusyError,
    RunBusyReason,
    TerminalRunError,
    UnknownRunError,
)
from ..frames import Frame, Kind, canonical, encode
from ..storage import RunStatus, RunUpdate, cancel_text
from ._appender import Appender
from ._context import _current, _enter, _leave, open_here, opener
from ._events import log_closed, log_opened
from ._faces import Wait
from ._failure import leaves_resumable
from ._flow_tasks import nothing, watch_tasks
from ._flows import Flow, FlowTracker
from ._lease import LeaseKeeper
from ._matcher import Matcher
from ._opening import Opener
from ._pause import PAUSED_NOTE, Pause, pause_of
from ._state import RunState
from ._steps import take_until
from ._writer import JournalWriter, _Adopted

__all__ = ["INTERRUPTIONS", "RunBlock", "Suspended"]


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


class Suspended(BaseException):
    """Raised to stop a run that waits for an approval (status ``suspended``).

    The run's exit records the status and swallows it, so the ``with`` block
    simply ends; ``run.status`` is ``"suspended"``.
    """


def _cancelled_elsewhere(exc: BaseException | None, run_id: str) -> bool:
    """True when ``exc`` is the journal refusing a write because the run was cancelled."""
    return (
        isinstance(exc, TerminalRunError)
        and exc.run_id == run_id
        and exc.status == RunStatus.CANCELLED.value
    )


class RunBlock:
    """One execution's block of a run: how it opens, what it journals besides steps, how it ends.

    Args:
        owner: the Run this block belongs to (what the process registry, the
            context and the lifecycle log name). Held by a weak reference: the Run
            owns its block, and a back reference would make every Run a reference
            cycle, freed (with its journal and every frame it holds) only by the
            cyclic collector; once it outlived the younger passes, by a full pass,
            which a process holding many objects makes rare.
        state: the run's state.
        writer: the run's journal writer.
        lease: the run's lease keeper.
        flows: the run's flow tracker (open streams are settled at a clean end).
        matcher: checks at a clean end that every recorded step was asked for.
        appender: the durable write path.
    """

    def __init__(
        self,
        owner: Any,
        state: RunState,
        writer: JournalWriter,
        lease: LeaseKeeper,
        flows: FlowTracker,
        matcher: Matcher,
        appender: Appender,
    ) -> None:
        self._owner_ref: weakref.ref[Any] = weakref.ref(owner)
        self._state = state
        self._config = state.config
        self._writer = writer
        self._lease = lease
        self._flows = flows
        self._matcher = matcher
        self._appender = appender
        self._opener = Opener(state, writer, lease, flows)
        self._flow_token: contextvars.Token[Flow | None] | None = None
        self._unwatch: Callable[[], None] = nothing

    @property
    def _owner(self) -> Any:
        """The Run this block belongs to (alive while it calls its block's methods)."""
        return self._owner_ref()

    def bind(self) -> None:
        """Make the run the current one in the caller's context (after :meth:`opening`)."""
        self._state.token = _current.set(self._owner)
        self._flow_token = self._flows.bind()
        self._unwatch = watch_tasks()  # tasks created from the run's flows: their spawn order
        _enter(self._owner)

    def unbind(self) -> None:
        """Undo :meth:`bind` (after :meth:`closing`, whatever it raised)."""
        if self._state.token is not None:
            _current.reset(self._state.token)
            self._state.token = None
        if self._flow_token is not None:
            self._flows.unbind(self._flow_token)
            self._flow_token = None
        self._unwatch()
        _leave(self._owner)

    def note(self, name: str, data: Any) -> None:
        """Journal a note (not a step; never matched on replay).

        Raises:
            RunEndedError: the run's block has ended (nothing is written).
        """
        state = self._state
        with state.lock:
            state.refuse_after_end(f"note {name!r}")
            if not state.can_write:
                return
            data = self._writer.prepare(data, "value", "note")
            self._writer.queue(Kind.NOTE, name, {"data": data})

    def redact(self, value: Any) -> Any:
        """Return canonical ``value`` with every ``redact`` path replaced (as journaled)."""
        return self._writer.prepare(value, "value")

    def resume_note(self) -> str:
        """A plain-text note on the tool calls recorded before this execution resumed."""
        state = self._state
        if not state.resumed:
            return ""
        from ._note import render_resume_note

        frames = take_until(self._config.journal.frames(state.run_id), state.resumed_at)
        return render_resume_note(frames, state.run_id)

    def flush_queued(self) -> None:
        """Append the queued frames now, synced (see :func:`._segments.write_queued`)."""
        self._appender.flush()

    def frames(self) -> Iterator[Frame]:
        """Yield the run's journaled frames (pending ones are flushed first)."""
        self._appender.flush()
        return self._config.journal.frames(self._state.run_id)

    def close_writes(self) -> None:
        """The run's block ended: from now on every step, note and write of this Run raises.

        Called under the run's lock right after its last write (its ``run_end``,
        or the flush of an interrupted block), so no thread appends after it.
        """
        state = self._state
        with state.lock:
            if state.block_ended is None:
                state.block_ended = (state.status, self._writer.next_seq)
                self._writer.refuse = state.refuse_after_end

    def opening(self) -> Wait[None]:
        """Start or resume the run, taking or waiting for its lease (a procedure with waits).

        Blocking journal work only: the context is bound by :meth:`bind`, on the
        caller's side (for the async face, on the event loop).
        """
        if self._state.entered:
            raise RuntimeError(f"run {self._state.run_id!r}: this Run object was already entered")
        self._state.entered = True
        record = self._config.journal.get_run(self._state.run_id)
        if record is None:
            if not self._config.create or not self._config.live:
                raise UnknownRunError(
                    f"no run {self._state.run_id!r} in journal {self._config.journal.url}; "
                    + (
                        "a replay-only run needs a recorded run: check the run id and journal"
                        if not self._config.live
                        else "pass create=True to start it"
                    ),
                    run_id=self._state.run_id,
                )
            record = self._opener.start_new()
        if record is not None:
            self._opener.resume(record)
        if (
            self._config.lease is not None
            and self._config.live
            and self._state.finished_record is None
        ):
            yield from self._opener.take_lease()
        elif record is not None and self._config.live and self._state.finished_record is None:
            yield from self._opener.wait_for_lease_holder()
        # frames from here on were written while this Run was alive (a step in flight
        # there belongs to a live worker, not to a crash)
        self._state.known_seq = self._writer.next_seq
        log_opened(self._owner, resumed_at=self._state.resumed_at, known_seq=self._state.known_seq)

    def open_in_process(
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
        if not self._config.live:
            return
        deadline = time.monotonic() + self._config.busy_timeout
        while True:
            found = open_here(self._owner, thread, task, where)
            if found is None:
                return
            there, same_flow = found
            timed_out = time.monotonic() > deadline
            if self._config.on_busy == "raise" or same_flow or timed_out:
                if same_flow:
                    advice = (
                        "It is open in this same thread or task (a nested block): use the "
                        "run object you already have (redrive.current_run())."
                    )
                elif timed_out:
                    advice = (
                        f"It did not end within busy_timeout={self._config.busy_timeout} s: "
                        "resume the "
                        "run once that block has ended."
                    )
                else:
                    advice = (
                        "Run the extra work inside that block (threads from redrive.executor(), "
                        "asyncio tasks created in it), or pass on_busy='wait' to open this block "
                        "once that one ends."
                    )
                raise RunBusyError(
                    f"run {self._state.run_id!r} is already open in this process ({there}) on "
                    f"journal {self._config.journal.url}: a second live block on the same run "
                    "would "
                    "take the first one's running steps for interrupted ones and settle them "
                    f"twice, so this one ({where}) was not opened and nothing was written. "
                    + advice,
                    run_id=self._state.run_id,
                    where=there,
                    timed_out=timed_out,
                    reason=RunBusyReason.OPEN_HERE,
                )
            yield 0.05

    async def aopen_in_process(self) -> None:
        """The async face of :meth:`open_in_process`: its checks are cheap, on the loop."""
        procedure = self.open_in_process(*opener())
        while True:
            try:
                delay = next(procedure)
            except StopIteration:
                return
            await asyncio.sleep(delay)

    def closing(self, exc: BaseException | None) -> None:
        """End this execution of the run (blocking journal work; see :meth:`unbind`).

        Logs how it ended (:mod:`._events`), including an error raised while ending it.
        """
        try:
            self._close_run(exc)
        except BaseException as raised:
            log_closed(self._owner, raised, lease_lost=self._lease.lost is not None)
            raise
        log_closed(self._owner, exc, lease_lost=self._lease.lost is not None)

    def _close_run(self, exc: BaseException | None) -> None:
        try:
            if self._state.finished_record is not None:
                if not self._state.short_circuited:
                    self._matcher.check_fully_replayed(exc)
                return
            if self._lease.lost is not None:
                return
            if self._state.status == RunStatus.CANCELLED.value:
                return  # cancel() ended it: nothing more to write
            if _cancelled_elsewhere(exc, self._state.run_id):
                self._state.status = (
                    RunStatus.CANCELLED.value
                )  # journal.cancel() ended it meanwhile
                return
            if not self._config.live:  # a replay-only run never writes
                if exc is None:
                    self._matcher.check_fully_replayed(None)
                return
            if exc is None and not self._state.output_set and (why := self._waits()):
                exc = Suspended(why)  # paused for a person, not done
            if exc is None:
                self._flows.settle(everyone=True)
                self._matcher.check_fully_replayed(None)
                try:
                    with self._appender.adopting():
                        self.end(RunStatus.SUCCEEDED, output=self._state.output, close=True)
                except _Adopted:
                    self._ended_elsewhere()
            elif isinstance(exc, INTERRUPTIONS):
                # nobody asked for it (a timeout, a job runner's cancel, SIGINT, a deploy's
                # SIGTERM, a closed generator): like a crash, the run stays resumable
                self._flush_interrupted(exc)
            elif isinstance(exc, Suspended):
                self._appender.flush(update=RunUpdate(status=RunStatus.SUSPENDED.value))
                self._state.status = RunStatus.SUSPENDED.value
            elif (pause := pause_of(exc, self._config.retryable)) is not None:
                self._pause(pause)
            elif self._resumable(exc):
                self._appender.flush()
            else:
                self.end(RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}", close=True)
        finally:
            self.close_writes()  # after the last write: a thread that outlives the block raises
            self.release()

    def _waits(self) -> str | None:
        """Why a clean end without ``finish`` leaves the run ``suspended`` (``suspend_at_exit``)."""
        waits = self._state.waits_at_exit
        return waits() if callable(waits) else waits

    def _pause(self, pause: Pause) -> None:
        """Stop the run ``paused``: a ``paused`` note with why, and the reason in its record."""
        state = self._state
        with state.lock:
            self._writer.queue(Kind.NOTE, PAUSED_NOTE, {"data": pause.to_dict()})
            self._appender.flush(
                update=RunUpdate(status=RunStatus.PAUSED.value, error=pause.text())
            )
            state.status = RunStatus.PAUSED.value
            state.paused = pause

    def _flush_interrupted(self, exc: BaseException) -> None:
        """Journal the frames made before an interruption; the interruption still propagates.

        A write that fails here is noted on ``exc`` (as after a crash, the run
        resumes from its last journaled step) rather than raised over it.
        """
        try:
            self._appender.flush()
        except Exception as failed:
            if _cancelled_elsewhere(failed, self._state.run_id):
                self._state.status = RunStatus.CANCELLED.value
            exc.add_note(
                f"redrive: run {self._state.run_id!r}: the frames made before this interruption "
                f"were not journaled ({type(failed).__name__}: {failed})"
            )

    def release(self) -> None:
        """Stop renewing the run's lease and release it (it lapses by itself if this fails)."""
        self._lease.release()

    def _resumable(self, exc: BaseException) -> bool:
        """Whether the run stays resumable after ``exc`` ended its block.

        Read from the whole tree under ``exc`` (a framework's wrapper of an SDK
        error, an exception group...): see :mod:`redrive.replay._failure`.
        """
        return leaves_resumable(exc, self._config.retryable)

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
        if not self._config.live or self._state.token is None:
            raise RuntimeError(
                f"run {self._state.run_id!r}: cancel() works inside the run's block of a live run; "
                f"from elsewhere use journal.cancel({self._state.run_id!r}, reason=..., by=...)"
            )
        if self._state.finished_record is not None or RunStatus(self._state.status).terminal:
            raise TerminalRunError(
                f"run {self._state.run_id!r} already ended with status {self._state.status}; "
                "there is "
                "nothing to cancel",
                run_id=self._state.run_id,
                status=self._state.status,
            )
        text = cancel_text(reason, by)
        self.end(RunStatus.CANCELLED, error=text, extra={"reason": reason, "by": by})
        self._state.ended_why = text

    def end(
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
            # stored faithfully, as a step's result is (type and dict key order kept:
            # a replayed finished run hands back what the live run was finished with);
            # the run record's output passes the run's scrubber, as the run_end frame does
            canonical(output, "output")
            packed = store(output, "output")[0]
            payload["output"] = packed
            scrubbed = self._writer.scrubber.value(packed)
            out_bytes = None if status is not RunStatus.SUCCEEDED else encode(scrubbed, "output")
        except TypeError as exc:
            payload = {"status": RunStatus.FAILED.value, "output": None, "error": str(exc)}
            status, out_bytes, error = RunStatus.FAILED, None, str(exc)
        with self._state.lock:
            self._writer.queue(Kind.RUN_END, "run", payload)
            self._appender.flush(
                update=RunUpdate(status=status.value, output=out_bytes, error=error),
            )
            self._state.status = status.value
            if close:  # atomically with run_end: no thread of this run appends after it
                self.close_writes()

    def _ended_elsewhere(self) -> None:
        """After losing the race to write ``run_end``: accept the other worker's ending."""
        if self._state.finished_record is not None:
            self._matcher.check_fully_replayed(None)
            return
        raise RunBusyError(
            f"run {self._state.run_id!r}: this worker's loop finished, but another worker is still "
            f"executing the run (status {self._state.status}); its ending is not recorded by this "
            "worker. Resume the run later to read its outcome.",
            run_id=self._state.run_id,
            seq=self._writer.next_seq,
        )
