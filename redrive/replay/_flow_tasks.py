"""Asyncio tasks created from a run's flows start as child flows (see :mod:`._flows`).

While a run is entered on a loop, a task factory (chained to the loop's own
factory, if any) gives each task created from a flow of the run the next
spawn index of its creator, in the task's context, before its first step:
``asyncio.gather``, ``TaskGroup.create_task``, ``loop.create_task``. Python
3.11+ passes the task's ``context=`` to the factory; without one the
factory makes the copy the task would have made.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import weakref
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from ._flows import calling_tracker

__all__ = ["nothing", "watch_tasks"]


TaskFactory = Callable[..., "asyncio.Future[Any]"]

#: the loops watched: ``[runs entered watching it, our factory, the factory found there]``
_watched: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]] = (
    weakref.WeakKeyDictionary()
)
_watched_lock = threading.Lock()


def _chained(previous: TaskFactory | None) -> TaskFactory:
    """A task factory that gives a task created from a run's flow its spawn index.

    ``previous`` (a factory installed before, or None for ``asyncio.Task``)
    makes the task, in the child context.
    """
    takes_context = previous is not None and _accepts_context(previous)

    def factory(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        *,
        context: contextvars.Context | None = None,
        **kwargs: Any,
    ) -> asyncio.Future[Any]:
        tracker = calling_tracker()
        if tracker is not None:  # created from a flow of a run: the flow's next child
            context = context if context is not None else contextvars.copy_context()
            tracker.start_child(context)
        if previous is None:
            return asyncio.Task(coro, loop=loop, context=context, **kwargs)
        if context is not None and takes_context:
            return previous(loop, coro, context=context, **kwargs)
        if context is not None:  # a legacy factory: it takes the current context
            return context.run(previous, loop, coro, **kwargs)
        return previous(loop, coro, **kwargs)

    return factory


def _accepts_context(factory: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return True
    return any(p.name == "context" or p.kind is p.VAR_KEYWORD for p in parameters)


def watch_tasks() -> Callable[[], None]:
    """Watch task creation on the running loop, if any, while a run is entered.

    Installs (once per loop, chained to the loop's factory) the task factory
    that starts each task created from a run's flow as that flow's child.

    Returns:
        The function that stops watching (the factory is removed when the
        last run entered on the loop stops, if it is still the loop's).
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return nothing
    with _watched_lock:
        entry = _watched.get(loop)
        if entry is None or loop.get_task_factory() is not entry[1]:
            previous = loop.get_task_factory()
            factory = _chained(previous)
            loop.set_task_factory(factory)
            entry = _watched[loop] = [0, factory, previous]
        entry[0] += 1

    def unwatch() -> None:
        with _watched_lock:
            if _watched.get(loop) is not entry:
                return
            entry[0] -= 1
            if entry[0] > 0:
                return
            del _watched[loop]
            if loop.get_task_factory() is entry[1] and not loop.is_closed():
                loop.set_task_factory(entry[2])

    return unwatch


def nothing() -> None:
    """Stop watching nothing (no loop was running)."""
