"""``@redrive.durable``: a function whose every call is a run."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from .replay import Run, redirected
from .storage import Journal, shared_journal

__all__ = ["durable", "entrypoint_of"]

P = ParamSpec("P")
R = TypeVar("R")


def entrypoint_of(func: Callable[..., Any]) -> str:
    """Return ``"module:qualname"`` of a function (what ``redrive check`` imports)."""
    return f"{func.__module__}:{func.__qualname__}"


def _already_done(run: Run) -> bool:
    """True when a call may return the run's recorded output without re-driving the function.

    That is a run that already succeeded, entered live: a replay-only run
    (``live=False``) re-drives the function to check it against the record.
    Both faces (sync and async) and ``redrive_run`` decide with this.
    """
    return run.finished and run.live


def durable(
    journal: Journal | str = "runs.duckdb",
    *,
    run_id: str | Callable[..., str],
    **options: Any,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make each call of a function a run, resumable by calling it again.

    The call's arguments (by parameter name) are the run's input; its return
    value is the run's output. Calling it again with the same run id resumes
    the run (or, when it already succeeded, returns the recorded output
    without executing anything). The entrypoint (module and qualified name) is
    recorded so ``redrive check`` can re-drive saved runs against new code.

    Args:
        journal: a journal or URL (opened on first call, once per process:
            :func:`redrive.storage.shared_journal`).
        run_id: a format string over the arguments (``"support:{ticket_id}"``)
            or a function of the same arguments returning the id.
        **options: passed to :func:`redrive.run` (``replay``, ``lease``...).

    The decorated function also accepts ``redrive_run_id=...`` to override the
    id for one call, and has ``.redrive_run(run_id, *args, **kwargs)``
    returning the finished :class:`Run` with its counters. ``redrive recover``
    (:func:`redrive.recover_runs`) re-drives interrupted runs of it from their
    recorded input, with these options, on the recoverer's journal.

    Returns:
        A decorator; the function it returns keeps the decorated one's
        signature and return type (an async function stays async).

    Raises:
        As :func:`redrive.run`, plus whatever the function raises.
    """

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(func)
        entry = entrypoint_of(func)

        def make_id(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
            if callable(run_id):
                return run_id(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return run_id.format(**bound.arguments)

        def inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            return dict(signature.bind(*args, **kwargs).arguments)

        def start(
            rid: str | None,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
            extra: dict[str, Any],
            on: Journal | None = None,
        ) -> Run:
            # inside a pytest plugin test the run goes to the test's journal
            target, chosen = redirected(journal if on is None else on, {**options, **extra})
            return Run(
                shared_journal(target) if isinstance(target, str) else target,
                rid or make_id(args, kwargs),
                input=inputs(args, kwargs),
                entrypoint=entry,
                **chosen,
            )

        def redrive_recover(
            on: Journal, rid: str, args: list[Any], kwargs: dict[str, Any], extra: dict[str, Any]
        ) -> Run:
            """Re-drive run ``rid`` on journal ``on`` (``redrive recover``); return the Run."""
            if inspect.iscoroutinefunction(func):

                async def go() -> Run:
                    async with start(rid, tuple(args), kwargs, extra, on) as run:
                        if _already_done(run):
                            run.recorded_output()
                        else:
                            run.finish(await func(*args, **kwargs))
                    return run

                return asyncio.run(go())
            with start(rid, tuple(args), kwargs, extra, on) as run:
                if _already_done(run):
                    run.recorded_output()
                else:
                    run.finish(func(*args, **kwargs))
            return run

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(
                *args: Any, redrive_run_id: str | None = None, **kwargs: Any
            ) -> Any:
                async with start(redrive_run_id, args, kwargs, {}) as run:
                    if _already_done(run):
                        return run.recorded_output()
                    return run.finish(await func(*args, **kwargs))

            async_wrapper.redrive_entrypoint = entry  # type: ignore[attr-defined]
            async_wrapper.redrive_recover = redrive_recover  # type: ignore[attr-defined]
            async_wrapper.__wrapped_durable__ = func  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, redrive_run_id: str | None = None, **kwargs: Any) -> Any:
            with start(redrive_run_id, args, kwargs, {}) as run:
                if _already_done(run):
                    return run.recorded_output()
                return run.finish(func(*args, **kwargs))

        def redrive_run(
            rid: str, *args: Any, redrive_options: dict[str, Any] | None = None, **kwargs: Any
        ) -> Run:
            with start(rid, args, kwargs, redrive_options or {}) as run:
                if _already_done(run):
                    run.recorded_output()
                else:
                    run.finish(func(*args, **kwargs))
            return run

        wrapper.redrive_entrypoint = entry  # type: ignore[attr-defined]
        wrapper.redrive_run = redrive_run  # type: ignore[attr-defined]
        wrapper.redrive_recover = redrive_recover  # type: ignore[attr-defined]
        wrapper.__wrapped_durable__ = func  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
