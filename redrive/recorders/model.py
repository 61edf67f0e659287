"""``redrive.model(fn)``: any model callable (litellm, a local model...) as a model step."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from ..replay import join_run
from ._bind import binder
from ._provider import marks_retryable

__all__ = ["model"]

P = ParamSpec("P")
R = TypeVar("R")


@overload
def model(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def model(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def model(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
) -> Any:
    """Make a model-calling function (sync or async) a recorded model step.

    The call's arguments (bound by parameter name) are the request; they
    must be canonically encodable (plain data, attrs, dataclasses, pydantic;
    see :mod:`redrive.frames`). The return value must be encodable too, or
    ``encode`` must turn it into plain data; ``decode`` turns the plain data
    back into what callers expect (used live and on replay, so both see the
    same shape). Outside a run the function is called directly; from a thread
    or task that lost its run's context, it joins the one run active in the
    process (see :func:`redrive.replay.join_run`).

    Args:
        fn: the function (or use ``@redrive.model(name=...)``).
        name: the step name (default ``"model:" + fn.__name__``).
        encode: response -> plain data (default: identity).
        decode: plain data -> response (default: identity; e.g. ``Reply.model_validate``).

    Returns:
        The wrapped function, with ``fn``'s signature (an async function stays
        async); without ``fn``, a decorator that makes one.

    Raises:
        TypeError: (at call time) a request or response that cannot be encoded,
            naming the path of the offending value.
        LostRunContextError: (at call time) called with no run in its context
            while several runs are active in the process; ``fn`` was not called.
    """

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        step_name = name or f"model:{func.__name__}"
        signature = inspect.signature(func)
        enc = encode or (lambda value: value)
        dec = decode or (lambda value: value)

        request = binder(signature)  # dict(signature.bind(*args, **kwargs).arguments)

        if inspect.iscoroutinefunction(func):
            # what the live call raises carries ``retryable`` (provider knowledge, as data)
            acall = marks_retryable(func)

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                run = join_run("model", step_name)
                if run is None:
                    return await func(*args, **kwargs)
                return await run.amodel_step(
                    step_name,
                    request(args, kwargs),
                    lambda: acall(*args, **kwargs),
                    encode=enc,
                    decode=dec,
                )

            return async_wrapper  # type: ignore[return-value]

        call = marks_retryable(func)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            run = join_run("model", step_name)
            if run is None:
                return func(*args, **kwargs)
            return run.model_step(
                step_name,
                request(args, kwargs),
                lambda: call(*args, **kwargs),
                encode=enc,
                decode=dec,
            )

        return wrapper

    if fn is not None:
        return decorate(fn)
    return decorate
