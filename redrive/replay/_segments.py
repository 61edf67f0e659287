"""Runs that continue across invocations of a framework that keeps its own state.

A framework with a durable store of its own (a LangGraph checkpointer) can
pause a run at a human-in-the-loop interrupt and continue it later from its
store, re-executing only the interrupted part. The steps the run recorded
before the pause are then not asked again in order: their outcomes already
live in the framework's store. :func:`answered_before` marks those steps
answered, except the ones the framework re-executes (which still replay from
the journal, so a side effect is not run twice); :func:`suspend` ends the
run's block with status ``suspended`` until the next invocation resumes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from ._block import Suspended
from ._run import Run
from ._steps import RecordedStep

__all__ = [
    "answer_steps",
    "answered_before",
    "await_open_tools",
    "open_tools",
    "refuse_new_tools",
    "suspend",
    "suspend_at_exit",
    "wait_open_tools",
    "watch_steps",
    "write_queued",
]

#: seconds between two looks at the open tool steps (async face: the loop is never blocked)
_POLL = 0.01


def answered_before(run: Run, seq: int, keep: Callable[[RecordedStep], bool]) -> int:
    """Mark the run's unreplayed recorded steps before ``seq`` as answered, except kept ones.

    Args:
        run: the active run (a resumed one; a new run has nothing recorded).
        seq: the first seq of the part of the record this execution replays in order.
        keep: says which earlier steps stay to be asked (matched as usual, except that
            no other flow is waited for at their recorded positions).

    Returns:
        How many steps were marked answered.
    """
    cursor = run._state.cursor
    if cursor is None:
        return 0
    marked = 0
    for step in cursor.remaining():
        if step.seq >= seq:
            continue
        if keep(step):
            # asked again by a framework task started otherwise than when it was recorded:
            # its recorded spawn path names no flow of this execution, so none is waited for
            cursor.callers.release(step.seq)
        else:
            cursor.consume(step)
            marked += 1
    return marked


def answer_steps(run: Run, seqs: Collection[int]) -> int:
    """Mark the run's unreplayed recorded steps whose seq is in ``seqs`` as answered.

    For steps recorded after the point :func:`answered_before` marks up to
    whose outcome the framework's store holds all the same (a task whose
    writes it saved, then the execution died before its next pause): the
    framework hands those outcomes back and does not ask the steps again.

    Returns:
        How many steps were marked answered.
    """
    cursor = run._state.cursor
    if cursor is None or not seqs:
        return 0
    marked = 0
    for step in cursor.remaining():
        if step.seq in seqs:
            cursor.consume(step)
            marked += 1
    return marked


def write_queued(run: Run) -> None:
    """Make the run's queued frames durable now (synced), before a write outside redrive.

    A value step is queued and written with the next step; a store the
    framework writes itself (a session, a checkpointer) may be written before
    that, and a crash then would leave the store changed with no record of
    what it held. Call this between recording such a value and the write.

    Raises:
        JournalWriteError: the journal refused the write (the run stops).
    """
    run._block.flush_queued()


def suspend(message: str) -> Suspended:
    """Return the exception that ends the active run's block with status ``suspended``.

    Raise it from inside the block; the run's exit records the status and
    swallows it. A later execution of the run (same run_id) resumes it.

    Args:
        message: why the run waits, and what resumes it.
    """
    return Suspended(message)


def suspend_at_exit(run: Run, why: str | Callable[[], str | None] | None) -> None:
    """Make a clean end of ``run``'s block without ``run.finish`` leave it ``suspended``.

    A framework that returns to the loop paused for a person (an Agents SDK
    run with tool approvals pending) has not finished: a block that then ends
    without :meth:`~redrive.Run.finish` would otherwise record the run
    ``succeeded`` with no output, and a later delivery could not continue it.
    With ``why`` set, such an end records ``suspended``; ``run.finish(...)``
    still ends it ``succeeded``. ``None`` takes it back (the framework went on).

    A framework that pauses in the background (a streamed run whose loop is a
    task of its own) may not know yet when the block ends: pass a callable,
    called once at the block's clean end without ``finish`` (on the thread
    that ends the block, which may not be the event loop's), before the run's
    last write. It returns why the run waits, or None (it finished); it may
    journal a note of the pause (:meth:`~redrive.Run.note`) and must not raise.

    Args:
        run: the active run.
        why: why the run waits and what continues it; a callable that says it at
            the end; or None.
    """
    run._state.waits_at_exit = why


def watch_steps(run: Run, watcher: Callable[[int], None]) -> Callable[[], None]:
    """Call ``watcher(seq)`` for each model or tool step of ``run`` a flow completes.

    ``seq`` is the step's opening seq (a replayed step's recorded seq, a live
    step's new one); the call is made in the completing thread or task's own
    context (or a copy of it), so ``watcher`` can read which part of a
    framework asked (a LangGraph task's config). A tool step is also
    reported as it begins (claimed, or matched to its record), before its
    body runs or its outcome is handed back: a note ``watcher`` queues then
    is durable with the step's end (a live step's result), or made durable
    before the recorded outcome is handed back, so a framework store written
    from that outcome never holds more than the journal. A step may be
    reported more than once. ``watcher`` must not raise.

    Returns:
        A function that stops the watching.
    """
    return run._flows.watch(watcher)


def open_tools(run: Run) -> int:
    """How many tool steps of ``run`` this execution began and has not journaled the end of."""
    return run._state.open_tools


def refuse_new_tools(run: Run, why: str) -> None:
    """From now on, a tool step of ``run`` not yet begun raises ``RunEndedError`` (nothing runs).

    A framework that stopped at an interrupt may still have sibling tool
    calls scheduled that have not begun (``asyncio.gather``: the interrupt
    got out first; a sync tool's thread not started yet). Their results go
    nowhere, and a body begun now could not journal its outcome before the
    run suspends; the resume asks them again. Call it before
    :func:`wait_open_tools`, so every call is either refused or waited for.

    Args:
        run: the active run.
        why: when the run stopped, for the error (``"the graph stopped at an interrupt"``).
    """
    run._state.refuse_tools(why)


def wait_open_tools(run: Run, down_to: int) -> None:
    """Block until at most ``down_to`` tool steps of ``run`` are open (see :func:`open_tools`).

    A framework that stops at an interrupt may leave a sibling tool call
    running (``asyncio.gather`` lets the first exception out while the other
    calls go on): its outcome must be journaled before the run suspends, or
    the resume finds the call in flight.
    """
    run._state.wait_tools_closed(down_to)


async def await_open_tools(run: Run, down_to: int) -> None:
    """The async face of :func:`wait_open_tools`: the event loop keeps running (polls)."""
    while run._state.open_tools > down_to:
        await asyncio.sleep(_POLL)
