"""What the framework adapters share: one way to make a function a redrive tool."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..recorders import tool as redrive_tool
from ..replay import Recovery, mark_retry_requested

__all__ = ["hide_key", "missing_extra", "recorded_tool"]


def missing_extra(framework: str, extra: str, err: ImportError) -> ImportError:
    """Return the ImportError raised when a framework's extra is not installed."""
    return ImportError(
        f"redrive.integrations needs {framework}, which is not installed ({err}); "
        f"install it with: pip install 'redrive[{extra}]'"
    )


def recorded_tool(
    fn: Callable[..., Any],
    *,
    framework: str,
    context_types: tuple[type, ...],
    name: str | None,
    restart_safe: bool | None,
    read_only: bool,
    recover: Callable[[dict[str, Any], str], Recovery] | None,
    retryable: tuple[type[BaseException], ...],
    retry_signals: tuple[type[BaseException], ...] = (),
) -> Callable[..., Any]:
    """Return ``fn`` made a :func:`redrive.tool`, refusing a framework context parameter.

    An exception of one of ``retry_signals`` (the framework's "call me again",
    e.g. pydantic-ai's ``ModelRetry``) raised by the body is marked with
    :func:`redrive.replay.mark_retry_requested` before redrive records it, so
    the model's next call with the same arguments runs as a retry of the same
    operation (see :class:`redrive.RetryRequested`).

    A tool step's arguments are journaled and matched on replay, so every
    argument must be a value (see :func:`redrive.frames.encode_value`); a
    framework's run context (live objects, the model, usage counters) is not
    one, and it is not what the model asked for.

    Raises:
        TypeError: ``fn`` is not callable, or its first parameter is annotated
            with one of ``context_types`` (the framework's run context).
    """
    if not callable(fn):
        raise TypeError(f"{framework} redrive tool: {fn!r} is not a function")
    params = list(inspect.signature(fn).parameters.values())
    if params and context_types and _is_context(params[0].annotation, context_types):
        raise TypeError(
            f"{framework} redrive tool {getattr(fn, '__name__', fn)!r}: its first parameter "
            f"{params[0].name!r} takes the framework's run context, which cannot be "
            "journaled as a tool argument; pass what the tool needs as plain arguments "
            "(or read it inside the body from your own state) and drop the context parameter"
        )
    return redrive_tool(
        name=name,
        restart_safe=restart_safe,
        read_only=read_only,
        recover=recover,
        retryable=retryable,
    )(_marking_retries(fn, retry_signals) if retry_signals else fn)


def _marking_retries(
    fn: Callable[..., Any], signals: tuple[type[BaseException], ...]
) -> Callable[..., Any]:
    """Return ``fn`` (same signature, sync or async) marking the ``signals`` it raises."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def acall(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except signals as exc:
                raise mark_retry_requested(exc)  # noqa: B904 - the same exception, marked

        return acall

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except signals as exc:
            raise mark_retry_requested(exc)  # noqa: B904 - the same exception, marked

    return call


def _is_context(annotation: Any, context_types: tuple[type, ...]) -> bool:
    """Whether a parameter annotation names one of ``context_types`` (``Ctx``, ``Ctx[Deps]``).

    A string annotation (``from __future__ import annotations``) is read by
    name, since its names may not be importable where the function is defined.
    """
    if isinstance(annotation, str):
        head = annotation.split("[", 1)[0].strip().rsplit(".", 1)[-1]
        return head in {cls.__name__ for cls in context_types}
    origin = getattr(annotation, "__origin__", annotation)
    return isinstance(origin, type) and issubclass(origin, context_types)


def hide_key(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Return ``fn`` with ``idempotency_key`` left out of the signature a framework reads.

    redrive fills that parameter in (see :func:`redrive.tool`); a framework that
    builds the model's tool schema from the signature must not show it to the model.
    """
    signature = inspect.signature(fn)
    if "idempotency_key" not in signature.parameters:
        return fn
    visible = signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name != "idempotency_key"]
    )
    annotations = {k: v for k, v in fn.__annotations__.items() if k != "idempotency_key"}
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def acall(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs)

        shown: Any = acall
    else:

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        shown = call
    shown.__signature__ = visible
    shown.__annotations__ = annotations
    return shown  # type: ignore[no-any-return]
