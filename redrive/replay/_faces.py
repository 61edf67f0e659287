"""The two faces of a Run's blocking work: inline (sync) or off the event loop (async).

A Run's logic is written once. The parts that block (journal reads, appends
and their fsync, lease calls) are plain functions; the sync face calls them
inline, the async face awaits them on a small dedicated thread pool with
:func:`off_loop`, so an event loop serving many runs never stalls on one
run's fsync. Waits (for a lease, for the worker holding a run) are written
as generators that yield the seconds to wait before trying again:
:func:`drive` sleeps them with ``time.sleep``, :func:`adrive` with
``asyncio.sleep``, advancing the generator off the loop between waits.

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
from typing import Any, TypeVar

__all__ = ["Wait", "adrive", "drive", "flow", "off_loop"]

T = TypeVar("T")

#: A blocking procedure with waits: yields seconds to wait, returns its result.
Wait = Generator[float, None, T]

#: Threads for the async face's blocking sections (a run waiting for a lease holds none).
#: Few: a DuckDB journal serializes its writes and a Postgres pool has 8 connections by
#: default, while more threads only fight the event loop for the GIL (longer stalls).
_MAX_WORKERS = 8

_carried: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "redrive_flow", default=None
)
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def flow() -> tuple[int, int]:
    """Identify the caller's thread and asyncio task (``(thread id, id(task) or 0)``).

    Inside a section run by :func:`off_loop` it names the task that awaited
    the section, not the worker thread running it.
    """
    carried = _carried.get()
    if carried is not None:
        return carried
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
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

    Raises:
        Whatever ``fn`` raises; ``asyncio.CancelledError`` when cancelled.
    """
    ctx = contextvars.copy_context()
    ctx.run(_carried.set, flow())
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
