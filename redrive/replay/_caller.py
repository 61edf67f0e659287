"""Where the user's code called into redrive: the ``called from:`` line of divergence errors.

The innermost frame of the user's code is wanted, never redrive's own, the
standard library's, an installed package's (an SDK, httpx, a framework such
as pydantic-ai) or a console script's (``.../bin/redrive``). On the
synchronous stack that is the first such frame walking outward. A step made
inside an asyncio task that a framework created (pydantic-ai and anyio run
each model request and tool call in tasks of their own) has no user frame
on its stack below the event loop: the user's code is suspended in the task
that awaits it. So the walk stops at the event loop and follows the tasks
awaiting the current one (directly, or through ``gather``), reading each
one's chain of awaited coroutines. Some frameworks hand a task's result to
the task that asked through a future of their own (pydantic_graph's tracked
tasks), which nothing links to the step's task: then the waiting tasks whose
innermost user frame awaits into an installed package are read, and the one
such frame is named when there is exactly one (two or more: no guess). Only
when none of that finds user code is the outer synchronous frame (the
``asyncio.run(...)`` line) named.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import sysconfig
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["caller_location", "is_user_file"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY = tuple(
    {
        os.path.abspath(p) + os.sep
        for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts")
        if (p := sysconfig.get_paths().get(key))
    }
)
_PACKAGES = tuple(
    {
        os.path.abspath(p) + os.sep
        for key in ("purelib", "platlib")
        if (p := sysconfig.get_paths().get(key))
    }
)
_STDLIB = tuple(
    {
        os.path.abspath(p) + os.sep
        for key in ("stdlib", "platstdlib")
        if (p := sysconfig.get_paths().get(key))
    }
)
#: The most awaiting tasks followed outward (a cycle or a huge graph is cut).
_MAX_TASKS = 64


def is_user_file(filename: str) -> bool:
    """True for a source file of the user's code (not redrive, the stdlib, a package, a script)."""
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE):
        return False
    return not path.startswith(_LIBRARY)


def _where(frame: FrameType) -> str:
    path = frame.f_code.co_filename
    try:
        relative = os.path.relpath(path)
        if not relative.startswith(".."):
            path = relative
    except ValueError:  # another drive (Windows)
        pass
    return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"


def _loop_boundary(frame: FrameType) -> bool:
    """True for the event loop's frame that runs a task's step (``Handle._run``)."""
    code = frame.f_code
    return code.co_name == "_run" and code.co_filename.endswith(
        os.path.join("asyncio", "events.py")
    )


def _awaited_frames(coro: Any) -> Iterator[FrameType]:
    """The frames of a suspended coroutine chain, outermost first (``cr_await`` inward)."""
    seen = 0
    while coro is not None and seen < 1000:
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        frame = frame or getattr(coro, "gi_frame", None)
        if isinstance(frame, FrameType):
            yield frame
        coro = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "ag_await", None)
            or getattr(coro, "gi_yieldfrom", None)
        )


def _released_by(task: asyncio.Task[Any]) -> list[Any]:
    """What ``task``'s done callbacks hold: the futures it releases when it ends.

    ``asyncio.wait_for`` and ``asyncio.wait`` make the awaiting task wait on a
    future of their own that a done callback of ``task`` sets (a ``partial``
    or a closure over it).
    """
    held: list[Any] = []
    for entry in getattr(task, "_callbacks", None) or ():
        callback = entry[0] if isinstance(entry, tuple) else entry
        held.extend(getattr(callback, "args", ()))
        held.append(getattr(callback, "__self__", None))
        for cell in getattr(callback, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                held.append(cell.cell_contents)
    return held


def _awaiters(task: asyncio.Task[Any]) -> list[asyncio.Task[Any]]:
    """The tasks of ``task``'s loop waiting on it.

    Directly, or through ``gather``, ``wait_for`` or ``wait`` (each waits on a
    future that ``task`` completes).
    """
    found = []
    try:
        tasks = asyncio.all_tasks(task.get_loop())
    except RuntimeError:
        return []
    released: list[Any] | None = None
    for other in tasks:
        waiter = getattr(other, "_fut_waiter", None)  # CPython's Task: what it awaits now
        if waiter is None or other is task:
            continue
        if waiter is task or task in getattr(waiter, "_children", ()):
            found.append(other)
            continue
        if released is None:
            released = _released_by(task)
        if any(held is waiter for held in released):
            found.append(other)
    return found


def _from_awaiters() -> str | None:
    """The innermost user frame of the tasks awaiting the current one, nearest task first."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    queue = [task] if task is not None else []
    seen: set[int] = set()
    while queue and len(seen) < _MAX_TASKS:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        for awaiter in _awaiters(current):
            user = [
                f for f in _awaited_frames(awaiter.get_coro()) if is_user_file(f.f_code.co_filename)
            ]
            if user:
                return _where(user[-1])
            queue.append(awaiter)
    return None


def _in_package(frame: FrameType) -> bool:
    path = os.path.abspath(frame.f_code.co_filename)
    return path.startswith(_PACKAGES) or (
        path.startswith(_LIBRARY) and not path.startswith(_STDLIB)
    )


def _waiting_in_a_package() -> str | None:
    """The one user frame of the loop's waiting tasks that awaits into an installed package.

    For a framework that runs the step in a task it links to the asking task by
    a future of its own (pydantic_graph's tracked tasks). Returns None when
    there is none, or more than one (no guess between them).
    """
    try:
        current = asyncio.current_task()
        tasks = asyncio.all_tasks()
    except RuntimeError:
        return None
    found: set[str] = set()
    for task in tasks:
        if task is current or getattr(task, "_fut_waiter", None) is None:
            continue
        frames = list(_awaited_frames(task.get_coro()))
        users = [i for i, f in enumerate(frames) if is_user_file(f.f_code.co_filename)]
        if not users:
            continue
        inner = users[-1]
        if inner + 1 < len(frames) and _in_package(frames[inner + 1]):
            found.add(_where(frames[inner]))
            if len(found) > 1:
                return None
    return found.pop() if found else None


def caller_location(frame: FrameType | None = None) -> str | None:
    """Return ``"file:line in function"`` of the innermost user frame calling into redrive.

    Walks outward from ``frame`` (default: the caller of this function) past
    redrive's own frames, the standard library, installed packages and console
    scripts; at the event loop, it follows the tasks awaiting the current one
    (see the module doc) before it names an outer synchronous frame.

    Returns:
        The location, path relative to the current directory when under it; or
        None when no frame of the stack is user code (a step run on a worker thread).
    """
    current: FrameType | None = frame if frame is not None else sys._getframe(1)
    outer: FrameType | None = None
    awaited_checked = False
    while current is not None:
        if is_user_file(current.f_code.co_filename):
            if awaited_checked:
                outer = outer or current
            else:
                return _where(current)
        elif _loop_boundary(current) and not awaited_checked:
            awaited_checked = True
            found = _from_awaiters() or _waiting_in_a_package()
            if found is not None:
                return found
        current = current.f_back
    return None if outer is None else _where(outer)
