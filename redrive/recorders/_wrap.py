"""``redrive.wrap(client)``: record and replay an OpenAI or Anthropic SDK client."""

from __future__ import annotations

import sys
import weakref
from typing import Any, TypeVar

from .anthropic import anthropic_view
from .http import AsyncRecordingTransport, HttpRecorder, RecordingTransport, ViewFn
from .openai import openai_view

__all__ = ["wrap"]

C = TypeVar("C")

_VIEWS: dict[str, ViewFn] = {"openai": openai_view, "anthropic": anthropic_view}


def _httpx_module(http_client: Any) -> tuple[Any, bool]:
    """Return (the httpx module the SDK's http client comes from, whether it is async)."""
    for cls in type(http_client).__mro__:
        top = cls.__module__.partition(".")[0]
        if cls.__name__ in ("Client", "AsyncClient") and top.startswith("httpx"):
            return sys.modules[top], cls.__name__ == "AsyncClient"
    raise TypeError(
        f"redrive.wrap: the client's http client is a {type(http_client).__qualname__}, not an "
        "httpx Client/AsyncClient; pass an SDK client built on httpx"
    )


def wrap(client: C, *, provider: str | None = None) -> C:
    """Return a copy of an OpenAI / Anthropic SDK client whose HTTP exchanges are model steps.

    Works for ``openai.OpenAI``, ``openai.AsyncOpenAI`` (and Azure),
    ``anthropic.Anthropic``, ``anthropic.AsyncAnthropic``: everything the
    client sends (chat completions, responses, messages, embeddings...),
    streamed or not, raw or streaming-response access. The copy is made with
    the SDK's own hook, ``client.with_options(http_client=...)``, around a
    recording transport that wraps the client's own transport (the
    connection pool is shared; nothing is patched globally). Outside a run
    the copy behaves exactly like ``client``; inside :func:`redrive.run` each
    HTTP exchange is replayed from the journal or sent and recorded (see
    :mod:`redrive.recorders.http`).

    Args:
        client: the SDK client.
        provider: the label in step names (default: ``"openai"`` or
            ``"anthropic"``, from the client's package).

    Returns:
        The wrapped client (same type as ``client``).

    Raises:
        TypeError: ``client`` is not an httpx-based SDK client with ``with_options``.
    """
    http = getattr(client, "_client", None)
    copy = getattr(client, "with_options", None)
    if http is None or copy is None:
        raise TypeError(
            f"redrive.wrap: {type(client).__qualname__} is not an OpenAI or Anthropic SDK client "
            "(it has no with_options/http client); for other model callables use redrive.model(fn)"
        )
    transport = getattr(http, "_transport", None)
    if isinstance(transport, RecordingTransport | AsyncRecordingTransport):
        return client  # already wrapped
    httpx, is_async = _httpx_module(http)
    label = provider or type(client).__module__.partition(".")[0]
    base_url = getattr(client, "base_url", None)
    holder: list[Any] = []

    def max_retries() -> int:
        sdk = holder[0]() if holder else None
        return int(getattr(sdk, "max_retries", 0) or 0)

    def should_retry(response: Any) -> bool:
        sdk = holder[0]() if holder else None
        method = getattr(sdk, "_should_retry", None)
        if method is None:
            from .http import _default_should_retry

            return _default_should_retry(response.status_code, dict(response.headers))
        return bool(method(response))

    recorder = HttpRecorder(
        provider=label,
        base_path=str(getattr(base_url, "path", "") or ""),
        view=_VIEWS.get(label),
        should_retry=should_retry,
        max_retries=max_retries,
    )
    options: dict[str, Any] = {
        "timeout": http.timeout,
        "follow_redirects": http.follow_redirects,
    }
    if is_async:
        new_http = httpx.AsyncClient(
            transport=AsyncRecordingTransport(transport, recorder, keep=http), **options
        )
    else:
        new_http = httpx.Client(
            transport=RecordingTransport(transport, recorder, keep=http), **options
        )
    wrapped = copy(http_client=new_http)
    holder.append(weakref.ref(wrapped))
    return wrapped  # type: ignore[no-any-return]
