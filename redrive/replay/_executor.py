"""A thread pool whose tasks run in their submitter's context, so in its run."""

from __future__ import annotations

import concurrent.futures
import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from ._context import _current
from ._flows import start_child_flow

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["RunExecutor", "executor"]

P = ParamSpec("P")
T = TypeVar("T")


class RunExecutor(concurrent.futures.ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that carries the run into its threads.

    Each task runs in a copy of the context it was submitted from (as
    ``asyncio.to_thread`` does), so the tools, model callables and wrapped
    clients it calls are steps of the submitter's run, recorded and replayed;
    with ``run=``, each task runs in that run whatever the submitter's context.
    ``map`` goes through :meth:`submit` and behaves the same. Nested pools
    of this class carry the run down every level.

    Args:
        max_workers: the number of threads (default: ``ThreadPoolExecutor``'s).
        run: the run every task joins; None (default) for the submitter's.
        thread_name_prefix: names the pool's threads (``"redrive-0"``...).
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        run: Run | None = None,
        thread_name_prefix: str = "redrive",
    ) -> None:
        super().__init__(max_workers, thread_name_prefix=thread_name_prefix)
        self._run = run

    def submit(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]:
        """Schedule ``fn(*args, **kwargs)`` in a copy of the caller's context (and run).

        Returns:
            Its future, as ``ThreadPoolExecutor.submit``.

        Raises:
            RuntimeError: the pool is shut down (as ``ThreadPoolExecutor``).
        """
        context = contextvars.copy_context()
        if self._run is not None:
            context.run(_current.set, self._run)
        # the task is a new flow of the run, named by the order the caller submits it in
        start_child_flow(context, self._run._flows if self._run is not None else None)

        def call() -> T:
            return context.run(fn, *args, **kwargs)

        return super().submit(call)


def executor(max_workers: int | None = None, *, run: Run | None = None) -> RunExecutor:
    """Return a thread pool whose tasks run in their submitter's run (see :class:`RunExecutor`).

    Use it in place of ``concurrent.futures.ThreadPoolExecutor`` in an agent loop
    that runs tool calls in parallel::

        with redrive.executor(max_workers=4) as pool:
            futures = [pool.submit(charge_card, order) for order in orders]

    Args:
        max_workers: the number of threads (default: ``ThreadPoolExecutor``'s).
        run: the run every task joins; None (default) for the submitter's.

    Returns:
        A new :class:`RunExecutor` (a context manager, shut down on exit).
    """
    return RunExecutor(max_workers, run=run)
