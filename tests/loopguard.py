"""Catch blocking work done on an event loop's thread, by where it runs, not by how long it takes.

A test of the async face asserts that journal work and waits happen off the
loop. Timing the loop's lateness (a watchdog sleeping 1 ms) made that a
duration assertion, and one that failed on a loaded machine (111.5 ms against
a 100 ms bound, issue 26 #8). :class:`LoopGuard` instead records each call to a
blocking primitive (``time.sleep`` with a positive delay, ``threading.Event.wait``,
``threading.Condition.wait``, and any function a test wraps with :meth:`LoopGuard.mark`)
made on a thread that is running an event loop. The assertion is then
``guard.on_loop == []``: exact, and independent of the machine's load.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["LoopGuard", "guarded", "on_loop_thread"]

F = TypeVar("F", bound=Callable[..., Any])


def on_loop_thread() -> bool:
    """True when the calling thread is running an asyncio event loop right now."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class LoopGuard:
    """The blocking calls made on an event loop's thread while :func:`guarded` was active.

    Attributes:
        on_loop: one ``"what (file:line in function)"`` per blocking call made on a
            loop thread, naming the first caller outside this module and the stdlib.
    """

    def __init__(self) -> None:
        self.on_loop: list[str] = []

    def note(self, what: str) -> None:
        """Record ``what`` when the calling thread runs an event loop.

        ``Thread.start()`` waiting for its new thread to run (the executor that
        takes work off the loop starts its threads from the loop) is not recorded:
        it is how work gets off the loop, bounded by the scheduler, not by I/O.
        """
        if not on_loop_thread():
            return
        stack = traceback.extract_stack()[:-2]
        if any(f.filename.endswith("threading.py") and f.name == "start" for f in stack[-3:]):
            return
        caller = next(
            (
                f"{frame.filename}:{frame.lineno} in {frame.name}"
                for frame in reversed(stack)
                if "/redrive/" in frame.filename or "/tests/" in frame.filename
            ),
            "?",
        )
        self.on_loop.append(f"{what} ({caller})")

    def mark(self, what: str, fn: F) -> F:
        """Return ``fn`` wrapped to :meth:`note` ``what`` on each call (for a journal's append)."""

        def marked(*args: Any, **kwargs: Any) -> Any:
            self.note(what)
            return fn(*args, **kwargs)

        return marked  # type: ignore[return-value]


@contextlib.contextmanager
def guarded() -> Iterator[LoopGuard]:
    """Watch ``time.sleep``, ``threading.Event.wait`` and ``threading.Condition.wait``.

    Yields the :class:`LoopGuard` that records those calls made on a loop's
    thread (``time.sleep(0)``, a yield of the GIL, is not blocking and is not recorded).
    """
    guard = LoopGuard()
    sleep, event_wait, condition_wait = time.sleep, threading.Event.wait, threading.Condition.wait

    def guarded_sleep(seconds: float) -> None:
        if seconds > 0:
            guard.note(f"time.sleep({seconds})")
        sleep(seconds)

    inside = threading.local()  # an Event.wait's own Condition.wait is not noted twice

    def guarded_event_wait(self: threading.Event, timeout: float | None = None) -> bool:
        if not self.is_set() and timeout != 0:
            guard.note(f"Event.wait(timeout={timeout})")
        inside.event = True
        try:
            return event_wait(self, timeout)
        finally:
            inside.event = False

    def guarded_condition_wait(self: threading.Condition, timeout: float | None = None) -> bool:
        if timeout != 0 and not getattr(inside, "event", False):
            guard.note(f"Condition.wait(timeout={timeout})")
        return condition_wait(self, timeout)

    time.sleep = guarded_sleep  # type: ignore[assignment]
    threading.Event.wait = guarded_event_wait  # type: ignore[method-assign]
    threading.Condition.wait = guarded_condition_wait  # type: ignore[method-assign]
    try:
        yield guard
    finally:
        time.sleep = sleep
        threading.Event.wait = event_wait  # type: ignore[method-assign]
        threading.Condition.wait = condition_wait  # type: ignore[method-assign]
