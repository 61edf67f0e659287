"""LangChain and LangGraph: a recorded ``ChatOpenAI`` and ``@tool`` functions as redrive tools.

Models: ``langchain_openai.ChatOpenAI`` takes the httpx clients its OpenAI SDK
clients use (``http_client=`` and ``http_async_client=``, its documented hook,
https://python.langchain.com/api_reference/openai/chat_models/langchain_openai.chat_models.base.ChatOpenAI.html);
:func:`openai_http_clients` makes a pair that records every request of a run
as an OpenAI model step (Chat Completions and the Responses API, streamed or
not)::

    sync_http, async_http = openai_http_clients(base_url)
    llm = ChatOpenAI(model="gpt-4o", base_url=base_url,
                     http_client=sync_http, http_async_client=async_http)

The SDK's retries of a transient error (429, 5xx) happen below LangChain and
are not recorded; the last one reaches your code as langchain-openai's
subclass of the SDK's exception, which the run reads as transient (its status,
its connection or timeout class, LangChain's ``is_retryable``): the run stays
resumable without any option (``TRANSIENT_ERRORS`` is kept for code that
passes it).

``langchain_anthropic.ChatAnthropic`` (1.7) exposes no client or http-client
parameter: it builds its Anthropic SDK client itself, so it cannot be recorded
without patching its internals, which redrive does not do. Use pydantic-ai or
the Anthropic SDK with :func:`redrive.wrap` for Anthropic models.

Tools: :func:`tool` is ``langchain_core.tools.tool`` over a :func:`redrive.tool`.

LangGraph: the checkpointer owns a thread's state between invocations,
redrive the steps inside one execution. Invoke a checkpointed graph through
:func:`redrive.integrations.langgraph.invoke` (or ``ainvoke``): a re-driven
invocation starts from the checkpoint its first attempt started from, an
``interrupt()`` suspends the run, and ``Command(resume=...)`` under the same
run id resumes it, replaying the interrupted node's finished tool calls.
Without it, after a crash invoke the graph again from the state it started
from: a checkpoint saved mid-invocation skips steps the journal expects.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, overload

import httpx

from ..recorders import wrap
from ..replay import Recovery
from ._common import hide_key, missing_extra, recorded_tool

try:
    import openai
    from langchain_core.tools import BaseTool
    from langchain_core.tools import tool as langchain_tool
except ImportError as err:  # pragma: no cover - exercised without the extra
    raise missing_extra("langchain-core", "langchain", err) from err

__all__ = ["TRANSIENT_ERRORS", "openai_http_clients", "tool"]

#: The OpenAI SDK errors that redrive treats as transient (a connection error or
#: timeout, 409, 429, 5xx; see docs/how-to/model-clients.md), for
#: ``redrive.run(..., retryable=TRANSIENT_ERRORS)`` around a ``ChatOpenAI``
#: on :func:`openai_http_clients`: such an error leaves the run resumable,
#: while a permanent one (400, 401, 404...) still fails it.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    openai.APIConnectionError,
    openai.ConflictError,
    openai.RateLimitError,
    openai.InternalServerError,
)


def openai_http_clients(
    base_url: str | None = None, **options: Any
) -> tuple[httpx.Client, httpx.AsyncClient]:
    """Return a sync and an async httpx client that record OpenAI requests as model steps.

    For ``ChatOpenAI(http_client=..., http_async_client=...)`` (or any code
    that builds an OpenAI SDK client on an httpx client it is given). Each
    request sent inside :func:`redrive.run` is a model step named
    ``"openai:POST {path}"`` read with the OpenAI view (its streams checked for
    their final event, an error inside a stream treated as that HTTP error);
    outside a run the clients behave as plain httpx clients.

    Args:
        base_url: the API's base URL, the same one ``ChatOpenAI`` is given
            (default: ``$OPENAI_BASE_URL``, else ``https://api.openai.com/v1``);
            its path (``/v1``) is left out of step names.
        **options: keyword arguments for both ``httpx.Client`` and
            ``httpx.AsyncClient`` (``timeout``, ``limits``...).

    Returns:
        ``(sync_client, async_client)``.
    """
    base = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    return (
        wrap(httpx.Client(base_url=base, **options), provider="openai"),
        wrap(httpx.AsyncClient(base_url=base, **options), provider="openai"),
    )


@overload
def tool(fn: Callable[..., Any], /) -> BaseTool: ...


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
) -> Callable[[Callable[..., Any]], BaseTool]: ...


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
) -> BaseTool | Callable[[Callable[..., Any]], BaseTool]:
    """Make a function a LangChain tool whose calls are redrive tool steps.

    Use bare (``@tool``) or with options, in place of ``langchain_core.tools.tool``
    (https://python.langchain.com/docs/how_to/custom_tools/). The function (sync
    or async) is made a :func:`redrive.tool` with ``name``, ``restart_safe``,
    ``read_only``, ``recover`` and ``retryable`` (same meaning as there), then
    handed to ``langchain_core.tools.tool(name, **options)``, which builds the
    schema from its signature and docstring as usual (``parse_docstring``,
    ``return_direct``...). A parameter named ``idempotency_key`` is filled in
    by redrive and left out of the schema. Works in LangGraph's ``ToolNode``
    and prebuilt agents like any LangChain tool.

    Args:
        fn: the tool function (it needs a docstring, as for LangChain's ``@tool``).
        name: the tool's name and step name (default: the function's ``__name__``).
        restart_safe: see :func:`redrive.tool` (None guesses from the name; fails closed).
        read_only: see :func:`redrive.tool`.
        recover: see :func:`redrive.tool`.
        retryable: see :func:`redrive.tool`.
        **options: keyword arguments for ``langchain_core.tools.tool``.

    Returns:
        A LangChain ``BaseTool`` (or, without ``fn``, a decorator that makes one).

    Raises:
        TypeError: an option is invalid for :func:`redrive.tool`.
        ValueError: from LangChain, when the function has no docstring and no
            ``description`` is given.
    """

    def build(func: Callable[..., Any]) -> BaseTool:
        wrapped = recorded_tool(
            func,
            framework="langchain",
            context_types=(),
            name=name,
            restart_safe=restart_safe,
            read_only=read_only,
            recover=recover,
            retryable=retryable,
        )
        made: BaseTool = langchain_tool(name or func.__name__, **options)(hide_key(wrapped))
        return made

    if fn is not None:
        return build(fn)
    return build
