"""``redrive.wrap(client)``: record and replay an OpenAI / Anthropic SDK client or httpx client."""

from __future__ import annotations

import sys
import weakref
from typing import Any, TypeVar

from ._provider import RETRYABLE_EXTENSION, default_should_retry, marking_retryable, set_retryable
from ._recorder import HttpRecorder, ViewFn
from ._transports import CarriedReplayError, RecordingTransport
from .anthropic import anthropic_view
from .openai import openai_view

__all__ = ["wrap", "wrap_http_client"]

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

    Any other httpx ``Client`` / ``AsyncClient`` (another vendor's SDK built
    on httpx, your own JSON API client) is wrapped too: see
    :func:`~redrive.recorders._wrap.wrap_http_client`.

    Args:
        client: the SDK client, or an httpx ``Client`` / ``AsyncClient``.
        provider: the label in step names (default: ``"openai"`` or
            ``"anthropic"``, from the client's package; ``"http"`` for an
            httpx client).

    Returns:
        The wrapped client (same type as ``client``).

    Raises:
        TypeError: ``client`` is neither an httpx-based SDK client with
            ``with_options`` nor an httpx client.
    """
    if _is_http_client(client):
        return wrap_http_client(client, provider=provider or "http")
    http = getattr(client, "_client", None)
    copy = getattr(client, "with_options", None)
    if http is None or copy is None:
        raise TypeError(
            f"redrive.wrap: {type(client).__qualname__} is not an OpenAI or Anthropic SDK client "
            "(it has no with_options/http client); for other model callables use redrive.model(fn)"
        )
    transport = getattr(http, "_transport", None)
    if isinstance(transport, RecordingTransport):
        return client  # already wrapped
    httpx, is_async = _httpx_module(http)
    family = type(client).__module__.partition(".")[0]
    label = provider or family
    base_url = getattr(client, "base_url", None)
    recorder_args = {
        "provider": label,
        "family": family,
        "base_path": str(getattr(base_url, "path", "") or ""),
        "view": _VIEWS.get(label),
    }
    options: dict[str, Any] = {"timeout": http.timeout, "follow_redirects": http.follow_redirects}
    sdk_copy: Any = type(client).copy  # type: ignore[attr-defined]
    return _bind(client, sdk_copy, httpx, is_async, transport, http, recorder_args, options, {})


def _bind(
    client: C,
    sdk_copy: Any,
    httpx: Any,
    is_async: bool,
    inner: Any,
    keep: Any,
    recorder_args: dict[str, Any],
    options: dict[str, Any],
    copy_kwargs: dict[str, Any],
) -> C:
    """Copy ``client`` onto a new recording http client whose retry budget is the copy's own.

    The copy's ``copy``/``with_options`` are replaced so that each further
    copy gets its own recording transport (around the same inner transport)
    that knows that copy's ``max_retries``.
    """
    holder: list[Any] = []

    def sdk() -> Any:
        return holder[0]() if holder else None

    def max_retries() -> int:
        return int(getattr(sdk(), "max_retries", 0) or 0)

    def should_retry(response: Any) -> bool:
        method = getattr(sdk(), "_should_retry", None)
        if method is None:
            return default_should_retry(response.status_code, dict(response.headers))
        return bool(method(response))

    recorder = HttpRecorder(should_retry=should_retry, max_retries=max_retries, **recorder_args)
    transport = RecordingTransport(inner, recorder, keep=keep, httpx=httpx)
    new_http = (httpx.AsyncClient if is_async else httpx.Client)(transport=transport, **options)
    wrapped = sdk_copy(client, **copy_kwargs, http_client=new_http)
    holder.append(weakref.ref(wrapped))
    _flag_status_errors(wrapped)
    _mark_raised_errors(wrapped, is_async)
    # the copy's request entry turns a carried ReplayError back into itself
    transport.carry_errors = getattr(wrapped, "request", None) is not None

    def copy(**kwargs: Any) -> Any:
        if kwargs.get("http_client") is not None:
            return wrap(sdk_copy(wrapped, **kwargs))
        return _bind(
            wrapped, sdk_copy, httpx, is_async, inner, keep, recorder_args, options, kwargs
        )

    wrapped.copy = copy
    wrapped.with_options = copy
    return wrapped  # type: ignore[no-any-return]


def _flag_status_errors(wrapped: Any) -> None:
    """Make the copy's status exceptions carry ``retryable`` as the transport decided.

    The SDK builds the exception it raises for an error response with its
    client's ``_make_status_error(err_msg, body=, response=)``; the copy (only
    the copy) gets one that sets ``exc.retryable`` from the response's
    :data:`~redrive.recorders.http.RETRYABLE_EXTENSION`: True for a live
    transient error (not recorded; the run stays resumable), False for a
    replayed recorded error. A client without that method is left as is.
    """
    make = getattr(wrapped, "_make_status_error", None)
    if make is None:
        return

    def make_status_error(err_msg: str, *, body: object, response: Any) -> Any:
        exc = make(err_msg, body=body, response=response)
        flag = getattr(response, "extensions", {}).get(RETRYABLE_EXTENSION)
        if isinstance(flag, bool):
            set_retryable(exc, flag)
        return exc

    wrapped._make_status_error = make_status_error


def _mark_raised_errors(wrapped: Any, is_async: bool) -> None:
    """Make every exception the copy's requests raise carry ``retryable`` where it is known.

    The SDK sends each call through its client's ``request`` method and
    raises from there: a status error (already flagged by
    :func:`_flag_status_errors`), or an ``APIConnectionError`` /
    ``APITimeoutError`` raised from a transport error the transport marked.
    The copy's ``request`` marks them (:func:`~redrive.recorders._provider.mark_retryable`),
    so the run learns from the exception alone whether it stays resumable,
    and raises a ReplayError its transport carried through the SDK
    (:class:`~redrive.recorders._transports.CarriedReplayError`) as itself.
    A client without that method is left as is.
    """
    request = getattr(wrapped, "request", None)
    if request is None:
        return
    if is_async:

        async def arequest(*args: Any, **kwargs: Any) -> Any:
            try:
                with marking_retryable():
                    return await request(*args, **kwargs)
            except CarriedReplayError as carried:  # the run's own error, as itself
                error = carried.error
            raise error

        wrapped.request = arequest
        return

    def srequest(*args: Any, **kwargs: Any) -> Any:
        try:
            with marking_retryable():
                return request(*args, **kwargs)
        except CarriedReplayError as carried:
            error = carried.error
        raise error

    wrapped.request = srequest


# -- any httpx client ---------------------------------------------------------------------


def _is_http_client(obj: Any) -> bool:
    """Whether ``obj`` is an httpx ``Client`` / ``AsyncClient`` itself (not an SDK around one)."""
    try:
        _httpx_module(obj)
    except TypeError:
        return False
    return True


def wrap_http_client(client: C, *, provider: str = "http") -> C:
    """Make an httpx ``Client`` / ``AsyncClient`` record and replay its exchanges as model steps.

    For any client built on httpx that is not an OpenAI or Anthropic SDK
    client: a JSON API, a self-hosted model server, another vendor's SDK
    (pass the SDK its ``http_client=``). Each exchange inside
    :func:`redrive.run` is one model step named ``"{provider}:{METHOD} {path}"``
    (the path relative to the client's ``base_url``), replayed from the
    journal or sent and recorded, streamed (server-sent events) or not;
    outside a run the client behaves as before. Headers are never
    journaled; secret query values are ``[REDACTED]``. A transient error
    (408, 409, 429, 5xx or ``x-should-retry: true``) is handed to the caller
    and not recorded, so the run stays resumable; other responses, errors
    included, are recorded and replayed as they came.

    httpx has no way to copy a client, so ``client`` itself is changed: its
    transport and the transports it mounts are wrapped in place (once; a
    second call does nothing).

    Args:
        client: an ``httpx.Client`` or ``httpx.AsyncClient``.
        provider: the label in step names (default ``"http"``); ``"openai"`` or
            ``"anthropic"`` also reads the exchanges with that API's view (the
            client an SDK is handed, e.g. by a framework that builds the SDK
            client itself).

    Returns:
        ``client``, now recording.

    Raises:
        TypeError: ``client`` is not an httpx ``Client`` / ``AsyncClient``.
    """
    httpx, _ = _httpx_module(client)  # raises TypeError for anything else
    http: Any = client
    if isinstance(http._transport, RecordingTransport):
        return client
    recorder = HttpRecorder(
        provider=provider, base_path=str(http.base_url.path or ""), view=_VIEWS.get(provider)
    )
    http._transport = RecordingTransport(http._transport, recorder, httpx=httpx)
    http._mounts = {
        pattern: None if inner is None else RecordingTransport(inner, recorder, httpx=httpx)
        for pattern, inner in http._mounts.items()
    }
    return client
