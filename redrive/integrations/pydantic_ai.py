"""pydantic-ai: recorded OpenAI and Anthropic providers, and tools as redrive tools.

Models: pydantic-ai's providers take the SDK client to use (its documented
hook for a custom client, https://ai.pydantic.dev/models/openai/ and
https://ai.pydantic.dev/models/anthropic/); hand them a wrapped one and every
request of a run, streamed runs included, is a model step::

    OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=redrive.wrap(AsyncOpenAI())))
    OpenAIResponsesModel("gpt-4o", provider=OpenAIProvider(openai_client=...))
    AnthropicModel("claude-sonnet-4-5",
                   provider=AnthropicProvider(anthropic_client=redrive.wrap(AsyncAnthropic())))

Tools: :func:`tool` builds a ``pydantic_ai.Tool`` (the documented way to hand
an agent a tool object, https://ai.pydantic.dev/tools/) over a
:func:`redrive.tool`, so the call is claimed before its body runs and its
result journaled; on resume or replay the agent gets the recorded result and
the body does not run again.

Retries: a body that raises ``pydantic_ai.ModelRetry`` asks the model to call
it again (https://ai.pydantic.dev/tools/#tool-retries). redrive records that
outcome as a ``tool_error`` with ``retry_requested: true``; the model's next
call of the tool with the same arguments is a retry of the same logical
operation: its body runs again under the same idempotency key, live and on
resume, even for a tool that is not restart safe (see
:class:`redrive.RetryRequested`). Raise ``ModelRetry`` only where the side
effect did not happen; a failure that may have had its effect is an ordinary
exception, and the same call is then blocked as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from ..replay import Recovery
from ._common import hide_key, missing_extra, recorded_tool

try:
    import pydantic_ai
    from pydantic_ai import RunContext
except ImportError as err:  # pragma: no cover - exercised without the extra
    raise missing_extra("pydantic-ai", "pydantic-ai", err) from err

__all__ = ["tool"]


@overload
def tool(fn: Callable[..., Any], /) -> pydantic_ai.Tool[Any]: ...


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
    **options: Any,
) -> Callable[[Callable[..., Any]], pydantic_ai.Tool[Any]]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    restart_safe: bool | None = None,
    read_only: bool = False,
    recover: Callable[[dict[str, Any], str], Recovery] | None = None,
    retryable: tuple[type[BaseException], ...] = (),
    **options: Any,
) -> pydantic_ai.Tool[Any] | Callable[[Callable[..., Any]], pydantic_ai.Tool[Any]]:
    """Make a function a ``pydantic_ai.Tool`` whose calls are redrive tool steps.

    Use bare (``@tool``) or with options; pass the result in
    ``Agent(..., tools=[...])``. The function (sync or async, without a
    ``RunContext`` parameter) is made a :func:`redrive.tool` with ``name``,
    ``restart_safe``, ``read_only``, ``recover`` and ``retryable`` (same meaning
    as there), then wrapped as ``pydantic_ai.Tool(fn, takes_ctx=False, name=...,
    **options)``; pydantic-ai builds the schema from its signature and docstring
    as usual. A parameter named ``idempotency_key`` is filled in by redrive and
    left out of the schema.

    Args:
        fn: the tool function, when used bare.
        name: the tool's name and step name (default: the function's ``__name__``).
        restart_safe: see :func:`redrive.tool` (None guesses from the name; fails closed).
        read_only: see :func:`redrive.tool`.
        recover: see :func:`redrive.tool`.
        retryable: see :func:`redrive.tool`.
        **options: keyword arguments for ``pydantic_ai.Tool`` (``description``,
            ``max_retries``, ``sequential``...).

    Returns:
        A ``pydantic_ai.Tool`` (or, without ``fn``, a decorator that makes one).

    Raises:
        TypeError: the function's first parameter is a ``RunContext`` (a run
            context cannot be journaled as an argument), or an option is
            invalid for :func:`redrive.tool`.
    """

    def build(func: Callable[..., Any]) -> pydantic_ai.Tool[Any]:
        wrapped = recorded_tool(
            func,
            framework="pydantic-ai",
            context_types=(RunContext,),
            name=name,
            restart_safe=restart_safe,
            read_only=read_only,
            recover=recover,
            retryable=retryable,
            retry_signals=(pydantic_ai.ModelRetry,),
        )
        return pydantic_ai.Tool(
            hide_key(wrapped), takes_ctx=False, name=name or func.__name__, **options
        )

    if fn is not None:
        return build(fn)
    return build
