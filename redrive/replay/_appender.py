"""Claims: the durable write path, and losing an append race.

Of several workers reaching the same unfinished step, the one whose append
commits first has claimed it. A loser either raises ``RunBusyError``
(``on_busy="raise"``) or waits for the winner's outcome and continues from
its frames (``on_busy="wait"``). Leases are kept by :mod:`._lease`.
"""

from __future__ import annotations

import contextlib
import threading
import time

from ..errors import (
    AppendConflictError,
    RunBusyError,
    TerminalRunError,
)
from ..frames import Frame, Kind
from ..storage import RunRecord, RunStatus, RunUpdate
from ._cursor import STEP_KINDS, Cursor, RecordedStep
from ._engine import StopBusy, WaitForWorker
from ._faces import Wait, WaitThenRerun, in_section
from ._flows import FlowTracker
from ._lease import LeaseKeeper
from ._state import RunState
from ._steps import take_until
from ._writer import OUTCOMES, JournalWriter, _Adopted

__all__ = ["Appender"]


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


class Appender:
    """A Run's durable write path: group commit, and losing an append race to another worker.

    Args:
        state: the run's state (its cursor is replaced when the winner's frames are adopted).
        writer: the run's journal writer.
        lease: the run's lease keeper.
        flows: the run's flow tracker (a rebuilt cursor asks it who may still ask).
    """

    def __init__(
        self, state: RunState, writer: JournalWriter, lease: LeaseKeeper, flows: FlowTracker
    ) -> None:
        self._state = state
        self._writer = writer
        self._lease = lease
        self._flows = flows

    def flush(self, update: RunUpdate | None = None, *, sync: bool = True) -> None:
        """Append every queued frame in one transaction (group commit).

        ``sync=False`` (model frames) returns once the frames survive this
        process dying; the next synced write makes them fully durable.
        """
        with self._state.lock:
            if not self._writer.pending and update is None:
                return
            if self._state.block_ended is not None:  # frames queued, then the block ended
                pending, self._writer.pending = self._writer.pending, []
                what = ", ".join(f"{f.kind} {f.name!r}" for f in pending)
                ran = any(f.kind in OUTCOMES for f in pending)
                self._state.refuse_after_end(what or "a status update", ran)
            frames = self._writer.pending
            first = frames[0].seq if frames else self._writer.next_seq
            try:
                self._writer.append(update, sync=sync)
            except AppendConflictError as exc:
                if self._state.adoptable:
                    self.adopt(frames, first, exc)
                    raise _Adopted() from None
                raise RunBusyError(
                    f"run {self._state.run_id!r}: another worker appended to this run at seq "
                    f"{first} while this one was executing it; this worker stops to avoid "
                    "running a step twice. Use a run lease (lease=seconds) so only one "
                    "worker executes a run, and resume later.",
                    run_id=self._state.run_id,
                    seq=first,
                ) from exc
            except TerminalRunError as exc:
                if exc.run_id == self._state.run_id and exc.status == RunStatus.CANCELLED.value:
                    self.cancelled_outside()
                raise

    def cancelled_outside(self) -> None:
        """The journal refused a write: the run was cancelled from outside. No step starts now.

        Reads who cancelled it and why (one read, on this refusal only).
        """
        self._state.status = RunStatus.CANCELLED.value
        self._state.ended_why = "cancelled"
        with contextlib.suppress(Exception):  # the refusal itself is what propagates
            record = self._state.config.journal.get_run(self._state.run_id)
            if record is not None and record.error:
                self._state.ended_why = record.error

    def adopting(self) -> _Adopting:
        """Let a lost append race adopt the winner's frames (on_busy="wait") in this block.

        The block holds the run's lock. A class, not a generator context
        manager: every tool step enters one.
        """
        return _Adopting(self._state)

    def adopt(
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

        The wait does not hold the run's lock while it sleeps. Inside a tool
        step's section on the async face (:func:`~._faces.in_section`) it does
        not hold an I/O thread either: it raises
        :class:`~._faces.WaitThenRerun` with the wait, and the face sleeps with
        ``asyncio.sleep`` and opens the step again once the winner's outcome
        is adopted.

        Raises:
            RunBusyError: ``busy_timeout`` passed first, or the winner's frames
                do not agree with what this worker already handed its loop.
            WaitThenRerun: the async face is to wait (see above).
        """
        if reopen is None:
            reopen = _reopened_step(pending)
        wait = self._adoption(list(pending), first, cause, reopen, deadline)
        if in_section() and self._rerunnable(pending):
            raise WaitThenRerun(wait)
        self._sleep_unlocked(wait)

    def _rerunnable(self, pending: list[Frame]) -> bool:
        """True when the section that lost is a tool step opening (safe to open again)."""
        if not pending:
            return True  # _wait_for_worker: nothing of this worker's was queued
        # a lost flush while opening a tool step (its claim, or an in-flight step it
        # settles) ends with one of these; a model step's ends with its response, a
        # run's with run_end: those sections are not run again (they wait inline)
        return pending[-1].kind in (
            Kind.TOOL_START.value,
            Kind.TOOL_DONE.value,
            Kind.TOOL_ERROR.value,
            Kind.NOTE.value,
        )

    def _sleep_unlocked(self, wait: Wait[None]) -> None:
        """Drive ``wait`` on this thread, with the run's lock released while it sleeps."""
        idle = threading.Condition(self._state.lock)
        with self._state.lock:
            while True:
                try:
                    delay = next(wait)
                except StopIteration:
                    return
                idle.wait(delay)  # releases the (reentrant) lock fully, then takes it again

    def _adoption(
        self,
        pending: list[Frame],
        first: int,
        cause: BaseException | None,
        reopen: int | None,
        deadline: float | None,
        *,
        give_up: bool = False,
    ) -> Wait[None]:
        """The wait of :meth:`_adopt`: polls under the lock, yields the seconds to sleep.

        With ``give_up`` (a presumed holder, on the async face) a timeout is no
        error: the step ``reopen`` is marked given up and the cursor is rebuilt
        with it unconsumed, so opening it again settles it as interrupted.
        """
        own_outcomes: dict[int, Frame] = {}
        opened: list[Frame] = []
        for frame in pending:
            if frame.kind in STEP_KINDS and not (
                frame.kind == Kind.TOOL_START.value and frame.seq == reopen
            ):
                opened.append(frame)
            elif frame.kind == Kind.MODEL_RESPONSE.value:
                own_outcomes[int(frame.data().get("step", -1))] = frame
        keep = (
            {s.seq for s in self._state.cursor.remaining()}
            if self._state.cursor is not None
            else set()
        )
        if deadline is None:
            deadline = time.monotonic() + self._state.config.busy_timeout
        mine = {f.seq for f in pending}

        def poll() -> tuple[Cursor, RunRecord, bool]:
            record = self._state.config.journal.get_run(self._state.run_id)
            assert record is not None
            cursor = Cursor(
                self._state.run_id,
                take_until(self._state.config.journal.frames(self._state.run_id), record.next_seq),
                self._state.config.policy,
                source=self._state.config.journal.url,
            )
            cursor.callers.claimable = self._flows.may_still_issue
            ready = self._fast_forward(cursor, first, reopen, keep, opened, own_outcomes)
            return cursor, record, ready or RunStatus(record.status).terminal

        def waiting() -> Wait[None]:
            delay = 0.005
            while True:
                with self._state.lock:
                    cursor, record, done = poll()
                    if done:
                        self._install(cursor, record, mine)
                        return
                    if time.monotonic() > deadline:
                        if give_up and reopen is not None:
                            self._state.gave_up_steps.add(reopen)
                            self._state.cursor = cursor
                            return
                        raise RunBusyError(
                            f"run {self._state.run_id!r}: another worker claimed seq "
                            f"{first if reopen is None else reopen} and has not recorded its "
                            f"outcome within busy_timeout={self._state.config.busy_timeout} s "
                            "(it may have "
                            "died mid-step). Resume the run later; a lease (lease=seconds) "
                            "lets another worker take over a dead one's run.",
                            run_id=self._state.run_id,
                            seq=first,
                            timed_out=True,
                        ) from cause
                yield delay
                delay = min(delay * 2, 0.1)

        return waiting()

    def _install(self, cursor: Cursor, record: RunRecord, mine: set[int]) -> None:
        """Continue from the winner's frames: its cursor, its chain, its status.

        Notes other flows of this run queued while this one waited (the lock
        is not held while it sleeps) are queued again after the winner's frames.

        Raises:
            RunBusyError: another flow of this run queued a step while this one
                waited (it follows the lost frames and cannot be written).
        """
        others = [f for f in self._writer.pending if f.seq not in mine]
        steps = [f for f in others if f.kind != Kind.NOTE.value]
        if steps:
            raise RunBusyError(
                f"run {self._state.run_id!r}: another worker appended at seq "
                f"{record.next_seq - 1} or "
                f"before, and while this worker waited for its outcome, {steps[0].kind} "
                f"{steps[0].name} of this run was queued here; this worker stops so no step "
                "is written twice. Resume the run later.",
                run_id=self._state.run_id,
                seq=steps[0].seq,
            )
        self._state.cursor = cursor
        self._writer.restart_at(record.next_seq, record.last_chain)
        for note in others:
            self._writer.queue(Kind.NOTE, note.name, note.data(), note.key)
        if RunStatus(record.status).terminal:
            self._state.status = record.status
            if record.status == RunStatus.SUCCEEDED.value:
                self._state.finished_record = record

    def wait_for_worker(self, decision: StopBusy | WaitForWorker) -> None:
        """Carry out the engine's decision on a step another worker holds (or is presumed to).

        Waits for its outcome (on_busy="wait"), then raises ``_Adopted`` so the
        step is matched again and replays it. Returns when a presumed holder
        did not finish within ``busy_timeout`` after its claim: the step is
        then settled as interrupted.

        Raises:
            RunBusyError: ``StopBusy``, or the wait for a live worker timed out.
            WaitThenRerun: on the async face, to wait without a thread (see :meth:`_adopt`).
        """
        step = decision.step
        if isinstance(decision, StopBusy):
            raise RunBusyError(
                f"run {self._state.run_id!r}: another worker claimed seq {step.seq} ({step.kind} "
                f"{step.name}) while this one was executing the run; this worker stops so the "
                "step runs once. Resume later, or pass on_busy='wait' to wait for its outcome.",
                run_id=self._state.run_id,
                seq=step.seq,
            )
        if step.seq in self._state.gave_up_steps:
            return  # its presumed holder was waited out on the async face
        deadline = None if decision.patience is None else time.monotonic() + decision.patience
        if in_section():
            raise WaitThenRerun(
                self._adoption(
                    [], self._writer.next_seq, None, step.seq, deadline, give_up=decision.presumed
                )
            )
        try:
            self._sleep_unlocked(
                self._adoption([], self._writer.next_seq, None, step.seq, deadline)
            )
        except RunBusyError as exc:
            if decision.presumed and getattr(exc, "timed_out", False):
                return
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
                theirs = step.decode_outcome().get("response")
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
            f"run {self._state.run_id!r}: another worker executed this run at the same time, "
            "and its "
            f"step at seq {step.seq} ({step.kind} {step.name}) differs from what this worker "
            f"already handed its loop ({frame.kind} {frame.name}); this worker stops. The run "
            "continues in the other worker; resume it later to continue from its journal.",
            run_id=self._state.run_id,
            seq=step.seq,
        )


class _Adopting:
    """What :meth:`Appender.adopting` returns: the run lock held, ``adoptable`` set, then reset."""

    __slots__ = ("_before", "_state")

    def __init__(self, state: RunState) -> None:
        self._state = state

    def __enter__(self) -> None:
        state = self._state
        state.lock.acquire()
        self._before, state.adoptable = state.adoptable, state.config.on_busy == "wait"

    def __exit__(self, *exc: object) -> None:
        try:
            self._state.adoptable = self._before
        finally:
            self._state.lock.release()
