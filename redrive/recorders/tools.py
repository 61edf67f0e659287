"""``@redrive.tool``: tool functions whose calls are recorded, claimed and replayed."""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar, overload

from ..replay import (
    Recovery,
    ToolSpec,
    join_run,
    mark_retry_requested,
    register_tool,
    remember_params,
    remember_spec,
    tool_digest,
    tool_params,
)
from ._bind import binder

__all__ = [
    "CLAUSE_WORDS",
    "RETRY_SIGNALS",
    "SAFE_VERBS",
    "UNSAFE_WORDS",
    "framework_retry_signals",
    "guess_restart_safe",
    "tool",
]

#: Exceptions agent frameworks define for a tool to ask to be called again, by
#: ``(module, qualname)`` of a class in the exception's MRO (nothing is imported):
#: pydantic-ai's ``ModelRetry`` (https://ai.pydantic.dev/tools/#tool-retries). A body
#: raising one is recorded as a retry signal (:class:`redrive.RetryRequested`).
RETRY_SIGNALS: frozenset[tuple[str, str]] = frozenset({("pydantic_ai.exceptions", "ModelRetry")})


@contextlib.contextmanager
def framework_retry_signals() -> Iterator[None]:
    """Mark a framework's retry signal raised in the block (see :data:`RETRY_SIGNALS`)."""
    try:
        yield
    except Exception as exc:
        if any((c.__module__, c.__qualname__) in RETRY_SIGNALS for c in type(exc).__mro__):
            mark_retry_requested(exc)
        raise


P = ParamSpec("P")
R = TypeVar("R")

#: Leading verbs that mark a tool as read-only when ``restart_safe`` is not declared.
SAFE_VERBS = frozenset(
    {
        "get",
        "list",
        "search",
        "read",
        "fetch",
        "lookup",
        "look",
        "find",
        "query",
        "describe",
        "show",
        "view",
        "count",
        "retrieve",
        "inspect",
        "check",
        "peek",
        "browse",
    }
)
#: Verbs that make a tool unsafe wherever they appear in its name (fail closed).
#: Nouns that only name what is read (``email``, ``invoice``, ``order``...) are not
#: here: ``get_order_status`` reads; ``send_invoice`` is unsafe by its first word.
UNSAFE_WORDS = frozenset(
    {
        "send",
        "charge",
        "pay",
        "refund",
        "delete",
        "remove",
        "create",
        "update",
        "write",
        "post",
        "put",
        "patch",
        "insert",
        "set",
        "cancel",
        "transfer",
        "book",
        "submit",
        "publish",
        "deploy",
        "execute",
        "run",
        "purchase",
        "open",
        "close",
        "approve",
        "reject",
        "notify",
        "call",
        "upload",
        "drop",
        "modify",
        "edit",
        "save",
        "store",
        "add",
        "grant",
        "revoke",
        "assign",
        "escalate",
        "mark",
        "move",
        "reset",
        "apply",
        "sync",
    }
)
#: Words that start a new clause in a name (``get_or_create``): each clause needs a safe verb.
CLAUSE_WORDS = frozenset({"and", "then", "or", "also", "plus"})


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[^a-zA-Z0-9]+", spaced.lower()) if w]


def guess_restart_safe(name: str) -> bool:
    """Guess, from a tool's name, whether re-running an in-flight call is harmless.

    Fails closed: True only when the name starts with a clearly read-only
    verb (:data:`SAFE_VERBS`: get, list, search, read, fetch, lookup...), every
    clause after a :data:`CLAUSE_WORDS` word (``and``, ``or``, ``then``...)
    starts with one too, and no word of it is in :data:`UNSAFE_WORDS` (send,
    charge, delete...). So ``get_order_status`` and ``list_invoices`` are
    safe; ``charge_card``, ``send_email``, ``send_invoice``, ``delete_account``,
    ``get_and_delete``, ``get_or_create_user`` and ``process`` are not.
    """
    words = _words(name)
    if not words or set(words) & UNSAFE_WORDS:
        return False
    clause_start = True
    for word in words:
        if word in CLAUSE_WORDS:
            clause_start = True
            continue
        if clause_start and word not in SAFE_VERBS:
            return False
        clause_start = False
    return not clause_start


def _check_bool(option: str, value: object, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, bool):
        raise TypeError(
            f"@redrive.tool({option}={value!r}): {option} must be True or False"
            + (" (or None to use the name heuristic)" if allow_none else "")
            + f", not a {type(value).__name__}"
        )


@overload
def tool(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    restart_safe: bool | None = None,
    read_only: bool = False,
    recover: Callable[[dict[str, Any], str], Recovery] | None = None,
    retryable: tuple[type[BaseException], ...] = (),
    result_type: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    restart_safe: bool | None = None,
    read_only: bool = False,
    recover: Callable[[dict[str, Any], str], Recovery] | None = None,
    retryable: tuple[type[BaseException], ...] = (),
    result_type: Callable[[Any], Any] | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a function a recorded tool (sync or async); use bare or with options.

    Inside a run, each call is a tool step: on replay its recorded result is
    returned (or its recorded exception raised) without running the body; live,
    its ``tool_start`` is committed before the body runs and its result after.
    Outside a run the function is called directly. Called from a thread or task
    that lost its run's context (a plain ``ThreadPoolExecutor``...), it joins
    the one run active in the process (see :func:`redrive.replay.join_run`).

    Args:
        fn: the function, when used bare (``@redrive.tool``); omitted with options.
        name: the step name (default: the function's ``__name__``).
        restart_safe: True if re-running a call that was in flight at a crash
            is harmless (the body dedupes on its idempotency key, or has no
            side effect); False if not; None to guess from the name with
            :func:`guess_restart_safe` (fails closed).
        read_only: the tool has no side effect at all (implies restart safe;
            never blocked on resume).
        recover: ``recover(args, idempotency_key) -> redrive.Recovery`` asked on
            resume what happened to an in-flight call.
        retryable: exception types after which the run stays resumable
            (others mark it failed when they end the run).
        result_type: builds the returned value from the value handed back (e.g. a
            pydantic model's ``model_validate``: a model without a codec is handed
            back as a dict of its fields); default: the value itself. Results keep
            their types and dict key order live and replayed (see
            :func:`redrive.frames.encode_value` for the supported set and
            :func:`redrive.frames.register_codec` for other classes).

    A parameter named ``idempotency_key`` receives the step's key
    ``"{run_id}:{seq}:{tool}"`` and is not part of the arguments matched.

    Returns:
        The wrapped function, with ``fn``'s signature (an async function stays
        async) and its :class:`ToolSpec` as ``.redrive_tool``; without ``fn``, a
        decorator that makes one.

    Raises:
        TypeError: at decoration, when ``restart_safe`` is neither bool nor None,
            or ``read_only`` is not a bool.
        LostRunContextError: (at call time) called with no run in its context
            while several runs are active in the process; the body did not run.
    """
    _check_bool("restart_safe", restart_safe, allow_none=True)
    _check_bool("read_only", read_only, allow_none=False)
    if recover is not None and not callable(recover):
        raise TypeError(f"@redrive.tool(recover={recover!r}): recover must be callable")

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        step_name = name or func.__name__
        declared = restart_safe is not None
        safe = bool(restart_safe) if declared else guess_restart_safe(step_name)
        params = tool_params(func)
        spec = ToolSpec(
            name=step_name,
            restart_safe=safe or read_only,
            read_only=read_only,
            recover=recover,
            retryable=tuple(retryable),
            declared=declared,
            params=params,
        )
        remember_params(step_name, params)
        remember_spec(spec)
        signature = inspect.signature(func)
        register_tool(
            step_name,
            tool_digest(
                func,
                restart_safe=spec.restart_safe,
                read_only=read_only,
                declared=declared,
                has_recover=recover is not None,
                retryable=spec.retryable,
            ),
        )
        takes_key = "idempotency_key" in signature.parameters
        build = result_type if result_type is not None else (lambda value: value)

        bind = binder(signature)  # dict(signature.bind(*args, **kwargs).arguments)

        def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            if not takes_key:
                return bind(args, kwargs)
            if "idempotency_key" not in kwargs:
                # a required idempotency_key is supplied by redrive, not by the caller
                try:
                    bound = signature.bind(*args, **kwargs, idempotency_key=None)
                except TypeError:  # given positionally
                    bound = signature.bind(*args, **kwargs)
            else:
                bound = signature.bind(*args, **kwargs)
            found = dict(bound.arguments)
            found.pop("idempotency_key", None)
            return found

        def with_key(args: tuple[Any, ...], kwargs: dict[str, Any], key: str) -> dict[str, Any]:
            if not takes_key or kwargs.get("idempotency_key") is not None:
                return kwargs
            bound = signature.bind_partial(*args)
            if "idempotency_key" in bound.arguments:  # the caller passed it positionally
                return kwargs
            return {**kwargs, "idempotency_key": key}

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                run = join_run("tool", step_name)
                if run is None:
                    return await func(*args, **kwargs)

                async def body(key: str) -> Any:
                    with framework_retry_signals():
                        return await func(*args, **with_key(args, kwargs, key))

                return build(await run.atool_step(spec, arguments(args, kwargs), body))

            async_wrapper.redrive_tool = spec  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            run = join_run("tool", step_name)
            if run is None:
                return func(*args, **kwargs)

            def body(key: str) -> Any:
                with framework_retry_signals():
                    return func(*args, **with_key(args, kwargs, key))

            return build(
                run.tool_step(
                    spec,
                    arguments(args, kwargs),
                    body,
                )
            )

        wrapper.redrive_tool = spec  # type: ignore[attr-defined]
        return wrapper

    if fn is not None:
        return decorate(fn)
    return decorate
