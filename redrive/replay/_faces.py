"""The two faces of a Run's blocking work: inline (sync) or off the event loop (async).

A Run's logic is written once. The parts that block (journal reads, appends
and their fsync, lease calls) are plain functions; the sync face calls them
inline, the async face awaits them on a small dedicated thread pool with
:func:`off_loop`, so an event loop serving many runs never stalls on one
run's fsync. Waits (for a lease, for the worker holding a run) are written
as generators that yield the seconds to wait before trying again:
:func:`drive` sleeps them with ``time.sleep``, :func:`adrive` with
``asyncio.sleep``, advancing the generator off the loop between waits.

A wait found deep inside a blocking section (a lost claim under
``on_busy="wait"``) cannot yield through the section's frames. In the async
face such a section raises :class:`WaitThenRerun` with its wait: the section
unwinds (releasing the run's lock and its I/O thread), :func:`off_loop` runs
the wait as :func:`adrive` does, then runs the section again.

Whatever runs off the loop sees the caller's context (a copy, as
``asyncio.to_thread`` makes), including the caller's :func:`flow`, so a
``before_next_step`` callback settles the task that asked for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

__all__ = ["Wait", "WaitThenRerun", "adrive", "drive", "flow", "in_section", "off_loop"]

T = TypeVar("T")

#: A blocking procedure with waits: yields seconds to wait, returns its result.
Wait = Generator[float, None, T]

#: Threads for the async face's blocking sections (a run waiting for a lease holds none).
#: Few: a DuckDB journal serializes its writes and a Postgres pool has 8 connections by
#: default, while more threads only fight the event loop for the GIL (longer stalls).
_MAX_WORKERS = 8


class _Caller(NamedTuple):
    """Who awaited a section :func:`off_loop` runs: its :func:`flow`, thread and task names.

    Names, not the objects: a task held from its own section's context would be kept
    alive by a cycle (its frame holds the context), and its unretrieved exception
    reported only at a later collection.
    """

    flow: tuple[int, int]
    thread: str
    task: str | None


#: the caller a section runs for (set in the section's context; None outside sections)
_carried: contextvars.ContextVar[_Caller | None] = contextvars.ContextVar(
    "redrive_flow", default=None
)
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_in_section: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "redrive_in_section", default=False
)


class WaitThenRerun(BaseException):
    """Raised by a section run by :func:`off_loop` that must wait: wait off the thread, run again.

    Only a section that is safe to run again from its start may raise it (it
    must leave the run as it found it, apart from what ``wait`` applies). A
    BaseException, so that no ``except Exception`` in between swallows it.

    Args:
        wait: the procedure to run before the section runs again (its blocking
            parts off the loop, its waits as ``asyncio.sleep``); what it raises
            ends the section with that error.
    """

    def __init__(self, wait: Wait[None]) -> None:
        super().__init__("internal: a section waits off its thread, then runs again")
        self.wait = wait


def asker() -> tuple[str, str | None]:
    """Who asks, for a message: ``(thread name, asyncio task name or None)``.

    Inside a section run by :func:`off_loop` it names the thread and task that
    awaited the section, not redrive's I/O thread running it.
    """
    caller = _caller()
    return caller.thread, caller.task


def _caller() -> _Caller:
    """The caller a section runs for, or this thread and task (outside a section)."""
    carried = _carried.get()
    if carried is not None:
        return carried
    loop = asyncio._get_running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    return _Caller(
        (threading.get_ident(), id(task) if task is not None else 0),
        threading.current_thread().name,
        task.get_name() if task is not None else None,
    )


def in_section() -> bool:
    """True inside a section :func:`off_loop` runs (it may raise :class:`WaitThenRerun`)."""
    return _in_section.get()


_pool_lock = threading.Lock()


def flow() -> tuple[int, int]:
    """Identify the caller's thread and asyncio task (``(thread id, id(task) or 0)``).

    Inside a section run by :func:`off_loop` it names the task that awaited
    the section, not the worker thread running it.
    """
    carried = _carried.get()
    if carried is not None:
        return carried.flow
    # asked at every step, so not through _caller() (no thread object, no tuple built);
    # outside a loop, asking for the running loop gives None (asyncio.current_task() would
    # raise, and catching costs more than the rest of this function at every step)
    loop = asyncio._get_running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    return threading.get_ident(), id(task) if task is not None else 0


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=_MAX_WORKERS, thread_name_prefix="redrive-io"
            )
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's threads: it starts its own pool when needed."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Run the blocking ``fn(*args)`` on the redrive I/O threads and return its result.

    ``fn`` runs in a copy of the caller's context carrying the caller's
    :func:`flow`. When the awaiting task is cancelled, the section still
    finishes (a journal write is never left half done, and the next section
    of the run does not overlap it) before ``CancelledError`` propagates.
    When ``fn`` raises :class:`WaitThenRerun`, its wait runs (no thread held
    while it sleeps), then ``fn(*args)`` runs again.

    Raises:
        Whatever ``fn`` raises; ``asyncio.CancelledError`` when cancelled.
    """
    while True:
        try:
            return await _section(fn, *args)
        except WaitThenRerun as wait:
            await adrive(wait.wait)


async def _section(fn: Callable[..., T], *args: Any) -> T:
    ctx = contextvars.copy_context()
    ctx.run(_carried.set, _caller())
    ctx.run(_in_section.set, True)
    future = asyncio.get_running_loop().run_in_executor(_executor(), ctx.run, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if not future.done():
            await asyncio.wait([future])
        raise


def drive(procedure: Wait[T]) -> T:
    """Run a procedure with waits on this thread, sleeping each wait (the sync face)."""
    while True:
        try:
            delay = next(procedure)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        time.sleep(delay)


def _advance(procedure: Wait[T]) -> tuple[bool, Any]:
    try:
        return False, next(procedure)
    except StopIteration as stop:
        return True, stop.value


async def adrive(procedure: Wait[T]) -> T:
    """Run a procedure with waits: its blocking parts off the loop, its waits as ``asyncio.sleep``.

    Raises:
        Whatever the procedure raises; ``asyncio.CancelledError`` when cancelled
        (the procedure is closed at its wait).
    """
    try:
        while True:
            done, value = await off_loop(_advance, procedure)
            if done:
                return value  # type: ignore[no-any-return]
            await asyncio.sleep(value)
    finally:
        procedure.close()
