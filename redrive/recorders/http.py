"""Record and replay a model client's HTTP exchanges as model steps (httpx transports).

:class:`RecordingTransport` (sync) and :class:`AsyncRecordingTransport` wrap
the transport an SDK's httpx client sends through. Outside a run they pass
every request straight to the inner transport. Inside a run each exchange is
one model step (see :meth:`redrive.Run.model_begin`):

* the step name is ``"{provider}:{METHOD} {path}"``, the path relative to the
  client's base URL (so a run recorded against ``api.openai.com`` replays
  against a local proxy);
* the request is ``{method, path, query, body}`` with the JSON body parsed;
  headers (user agent, ``x-stainless-*`` retry counters, request ids,
  authorization, content length, compression) are not part of it;
* the response is stored decoded (no ``content-encoding``), its headers
  scrubbed of credentials and cookies, and a server-sent-event stream as its
  ordered events (``chunks``); replay hands them back one by one;
* a stream the caller closes before its final event (it read enough) is
  recorded as it was received, marked ``"partial": True``: replay hands back
  the same events, and raises :class:`~redrive.DivergenceError` if the
  replayed loop reads past them. A stream cut off otherwise (the process
  dies, the connection breaks, an exception unwinds through it) is not
  recorded: on resume the step is requested again, live;
* a transient error response (408, 409, 429, 5xx, or ``x-should-retry:
  true``) is never recorded live, retries left or not: the SDK's exception
  propagates, the step stays unfinished and a resume asks it again. The
  exception the wrapped SDK client raises for it carries ``retryable = True``
  (so the run stays resumable); an exception the inner transport raises
  (connection refused, timeout...) gets ``retryable = True`` too before the
  SDK wraps it (it is the ``__cause__`` of the SDK's ``APIConnectionError``).
  Other errors (400, 401, 403, 404, 422...) are recorded and replay as the
  same error, whose SDK exception carries ``retryable = False``; so do
  transient errors imported from a cassette. A replayed error carries
  ``x-should-retry: false`` so the SDK raises it at once.

The payload of a ``model_response`` frame::

    {"status": 200, "headers": [[name, value], ...], "stream": False,
     "body": "<decoded text>" | b"<bytes>" | None, "chunks": ["event: ...\\n\\n", ...] | None}

plus ``"partial": True`` for a stream the caller closed early.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import attrs

from ..errors import DivergenceError
from ..replay import Run, current_run
from ..replay._cursor import RecordedStep, decode_outcome

__all__ = [
    "RETRYABLE_EXTENSION",
    "SECRET_HEADERS",
    "SECRET_QUERY_PARAMS",
    "AsyncRecordingTransport",
    "HttpRecorder",
    "RecordingTransport",
    "describe_request",
    "is_terminal_event",
    "is_transient",
    "response_payload",
    "scrub_headers",
    "split_events",
]

#: Headers never written to a journal (requests are not stored with headers at all).
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "api-key",
        "x-api-key",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
        "anthropic-organization-id",
        "x-goog-api-key",
    }
)
#: Query parameters whose value is replaced by ``[REDACTED]`` in a stored request.
#: Matched case-insensitively, with ``_`` and ``-`` alike (``API_KEY``, ``Api-Key``).
#: Keys (``key``, ``api-key``, Azure APIM ``subscription-key``), OAuth tokens and
#: secrets, and signed-URL signatures (Azure SAS ``sig``, AWS ``X-Amz-Signature``).
SECRET_QUERY_PARAMS = frozenset(
    {
        "key",
        "api-key",
        "api_key",
        "apikey",
        "x-api-key",
        "x-goog-api-key",
        "subscription-key",
        "ocp-apim-subscription-key",
        "access_token",
        "access-token",
        "refresh_token",
        "id_token",
        "token",
        "auth",
        "authorization",
        "client_secret",
        "secret",
        "password",
        "sig",
        "signature",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)
_SECRET_QUERY_NAMES = frozenset(name.replace("_", "-") for name in SECRET_QUERY_PARAMS)


def _secret_query_param(name: str) -> bool:
    """Whether a query parameter's value must never be journaled."""
    return name.strip().lower().replace("_", "-") in _SECRET_QUERY_NAMES


# Headers dropped from a stored response because the stored body makes them wrong.
_BODY_HEADERS = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
)
_TERMINAL_EVENTS = frozenset(
    {"message_stop", "response.completed", "response.failed", "response.incomplete", "error"}
)
_EVENT_BREAK = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_RETRYABLE_STATUS = frozenset({408, 409, 429})
#: The httpx response extension the transports set: True on a live transient
#: error response (not recorded), False on a replayed error response. The
#: wrapped SDK client copies it onto the exception it raises as ``retryable``.
RETRYABLE_EXTENSION = "redrive.retryable"


def is_transient(status: int, headers: Any) -> bool:
    """Whether an error response is transient: never the step's recorded outcome.

    Args:
        status: the HTTP status.
        headers: the response headers (anything with ``.get(name)``).

    Returns:
        True for 408, 409, 429, any status >= 500, and any status >= 400 whose
        ``x-should-retry`` header is ``true``.
    """
    if status < 400:
        return False
    if status in _RETRYABLE_STATUS or status >= 500:
        return True
    return str(headers.get("x-should-retry", "")).lower() == "true"


def scrub_headers(headers: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Return ``[[name, value], ...]`` (lower-case names) without secrets, cookies and body framing.

    Drops every header in :data:`SECRET_HEADERS` and ``content-encoding``,
    ``content-length``, ``transfer-encoding`` (the stored body is decoded and
    its length is recomputed on replay).
    """
    out = []
    for name, value in headers:
        low = name.lower()
        if low in SECRET_HEADERS or low in _BODY_HEADERS:
            continue
        out.append([low, value])
    return out


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    return b""


def split_events(data: bytes) -> tuple[list[bytes], bytes]:
    """Split server-sent-event bytes into complete events (each with its blank line) and a rest.

    Returns:
        ``(events, rest)``: ``rest`` is the bytes after the last event boundary.
    """
    events = []
    start = 0
    for match in _EVENT_BREAK.finditer(data):
        events.append(data[start : match.end()])
        start = match.end()
    return events, data[start:]


def is_terminal_event(event: bytes) -> bool:
    """True when an SSE event ends its stream: ``[DONE]``, ``message_stop``, ``response.*``."""
    for line in event.splitlines():
        if line.startswith(b"data:"):
            value = line[5:].strip()
            if value == b"[DONE]":
                return True
            if value.startswith(b"{") and b'"type"' in value:
                try:
                    kind = json.loads(value).get("type")
                except (ValueError, AttributeError):
                    continue
                if kind in _TERMINAL_EVENTS:
                    return True
        elif line.startswith(b"event:") and line[6:].strip().decode("utf-8", "replace") in (
            _TERMINAL_EVENTS
        ):
            return True
    return False


def _parse_body(content: bytes, content_type: str) -> Any:
    if not content:
        return None
    if "multipart/" in content_type:
        boundary = content_type.partition("boundary=")[2].strip('"').encode()
        if boundary:
            content = content.replace(boundary, b"redrive-boundary")
        return {"content_type": "multipart/form-data", "data": content}
    try:
        return json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return {"content_type": content_type, "data": _text_or_bytes(content)}


def describe_request(
    provider: str,
    base_path: str,
    method: str,
    path: str,
    query: Iterable[tuple[str, str]],
    content: bytes,
    content_type: str,
) -> tuple[str, dict[str, Any]]:
    """Build a model step's ``(name, request)`` from the parts of an HTTP request.

    Args:
        provider: ``"openai"``, ``"anthropic"``...
        base_path: the path of the client's base URL (``"/v1"``); stripped from ``path``.
        method, path, query, content, content_type: the HTTP request.

    Returns:
        ``("openai:POST /chat/completions", {"method", "path", "query", "body"})``;
        the body is the parsed JSON (or ``{"content_type", "data"}`` for other
        bodies); secret query parameters are ``[REDACTED]``.
    """
    base = base_path.rstrip("/")
    if base and (path == base or path.startswith(base + "/")):
        path = path[len(base) :] or "/"
    params: dict[str, Any] = {}
    for key, value in query:
        value = "[REDACTED]" if _secret_query_param(key) else value
        if key in params:
            prior = params[key]
            params[key] = [*prior, value] if isinstance(prior, list) else [prior, value]
        else:
            params[key] = value
    method = method.upper()
    request = {
        "method": method,
        "path": path,
        "query": params,
        "body": _parse_body(content, content_type),
    }
    return f"{provider}:{method} {path}", request


def response_payload(
    status: int,
    headers: Iterable[tuple[str, str]],
    *,
    body: bytes | None = None,
    chunks: list[bytes] | None = None,
    partial: bool = False,
) -> dict[str, Any]:
    """Build the stored form of a response (see the module docstring); ``body`` already decoded.

    ``partial=True`` (a stream the caller closed early) adds ``"partial": True``.
    """
    stream = chunks is not None
    payload: dict[str, Any] = {
        "status": int(status),
        "headers": scrub_headers(headers),
        "stream": stream,
        "body": None if stream or body is None else _text_or_bytes(body),
        "chunks": [_text_or_bytes(c) for c in chunks] if chunks is not None else None,
    }
    if partial:
        payload["partial"] = True
    return payload


def _default_should_retry(status: int, headers: dict[str, str]) -> bool:
    flag = headers.get("x-should-retry")
    if flag == "true":
        return True
    if flag == "false":
        return False
    return status in _RETRYABLE_STATUS or status >= 500


ViewFn = Callable[[dict[str, Any], dict[str, Any]], Any]


@attrs.define
class HttpRecorder:
    """The I/O-free half of the transports: names, request/response forms, retry and views.

    Attributes:
        provider: ``"openai"``, ``"anthropic"``, or any label.
        base_path: the client's base URL path, stripped from step names.
        view: ``view(request, response_payload) -> dict`` (the semantic view), or None.
        should_retry: ``fn(response) -> bool`` as the SDK decides retries, or None
            for the common rule (``x-should-retry``, 408, 409, 429, 5xx).
        max_retries: ``fn() -> int``, the SDK client's retry budget.
    """

    provider: str
    base_path: str = ""
    view: ViewFn | None = None
    should_retry: Callable[[Any], bool] | None = None
    max_retries: Callable[[], int] = lambda: 0

    def describe(self, request: Any) -> tuple[str, dict[str, Any]]:
        """Return the model step ``(name, request)`` of an httpx request (its body read)."""
        url = request.url
        return describe_request(
            self.provider,
            self.base_path,
            request.method,
            url.path,
            url.params.multi_items(),
            bytes(request.content),
            request.headers.get("content-type", ""),
        )

    def should_record(self, request: Any, response: Any) -> bool:
        """Whether a live, non-streamed response is the step's outcome (and is journaled).

        False for a transient error (:func:`is_transient`) and for a response
        the SDK will retry (:meth:`is_final`).
        """
        if is_transient(response.status_code, response.headers):
            return False
        return self.is_final(request, response)

    def is_final(self, request: Any, response: Any) -> bool:
        """False when the SDK will retry this response (so it is not what the caller gets)."""
        status = response.status_code
        if status < 400 and response.headers.get("x-should-retry") != "true":
            return True
        if self.should_retry is not None:
            retry = bool(self.should_retry(response))
        else:
            retry = _default_should_retry(status, dict(response.headers))
        if not retry:
            return True
        try:
            taken = int(request.headers.get("x-stainless-retry-count", "0"))
        except ValueError:
            taken = 0
        return taken >= self.max_retries()

    def make_view(self, request: dict[str, Any], payload: dict[str, Any]) -> Any:
        """Return the semantic view, or a minimal one when the view function fails."""
        base: dict[str, Any] = {"provider": self.provider, "status": payload["status"]}
        if payload.get("partial"):
            base["partial"] = True
        if self.view is None:
            return base
        try:
            view = self.view(request, payload)
        except Exception as exc:  # a view is for reading; it never blocks a recording
            return {**base, "view_error": f"{type(exc).__name__}: {exc}"}
        return {**base, **view} if isinstance(view, dict) else base

    def record(self, run: Run, begun: _Begun, payload: dict[str, Any]) -> None:
        """Journal a finished exchange as the step ``begun`` opened."""
        payload = _redact_body(run, payload)
        run.model_record(
            begun.name,
            begun.stored,
            begun.key,
            begun.turn,
            payload,
            view=self.make_view(begun.stored, payload),
            unfinished=begun.step,
        )


def _redact_body(run: Run, payload: dict[str, Any]) -> dict[str, Any]:
    """Apply the run's ``redact`` patterns to a JSON response body (``$.body...``)."""
    body = payload.get("body")
    if not run.redacting or not isinstance(body, str):
        return payload
    try:
        parsed = json.loads(body)
    except ValueError:
        return payload
    redacted = run.redact({"body": parsed})["body"]
    if redacted == parsed:
        return payload
    return {**payload, "body": json.dumps(redacted, ensure_ascii=False, separators=(",", ":"))}


@attrs.define
class _Begun:
    name: str
    stored: Any
    key: str
    turn: int
    step: RecordedStep | None


def _begin(run: Run, recorder: HttpRecorder, request: Any) -> tuple[_Begun, dict[str, Any] | None]:
    name, described = recorder.describe(request)
    step, stored, key, turn = run.model_begin(name, described)
    begun = _Begun(name, stored, key, turn, step)
    if step is not None and step.end is not None:
        response = decode_outcome(step).get("response")
        if not isinstance(response, dict):
            raise TypeError(
                f"run {run.run_id!r} seq {step.seq}: the recorded response of {name!r} is not an "
                "HTTP response payload; it was recorded by another recorder"
            )
        return begun, response
    return begun, None


def _replay_headers(payload: dict[str, Any]) -> list[tuple[str, str]]:
    headers = [(str(k), str(v)) for k, v in payload.get("headers") or []]
    if int(payload["status"]) >= 400:
        headers = [(k, v) for k, v in headers if k != "x-should-retry"]
        headers.append(("x-should-retry", "false"))
    return headers


def _module_of(obj: Any) -> Any:
    import sys

    return sys.modules[type(obj).__module__.partition(".")[0]]


def _exception_in_flight(baseline: BaseException | None) -> bool:
    """True when an exception other than ``baseline`` is unwinding through the caller."""
    current = sys.exc_info()[1]
    return current is not None and current is not baseline


class _Tap:
    """Collects a live SSE stream's events and records the step when the stream is closed.

    Recorded whole when the final event arrived or the server ended the
    stream; recorded as ``partial`` when the caller closed it early; not
    recorded when the connection broke, or the close happens while an
    exception unwinds (a crash, a cancellation, the generator's teardown).
    """

    def __init__(self, run: Run, recorder: HttpRecorder, begun: _Begun, response: Any) -> None:
        self.run = run
        self.recorder = recorder
        self.begun = begun
        self.status = response.status_code
        self.headers = list(response.headers.multi_items())
        self.events: list[bytes] = []
        self.rest = b""
        self.terminal = False
        self.eof = False
        self.broken = False
        self.done = False
        # an exception already being handled where the stream was opened is not an interruption
        self.baseline = sys.exc_info()[1]
        # a loop that stops reading without closing the stream still acted on what it
        # read: journal it before the loop's next step (not later, out of order)
        run.before_next_step(self.settle)

    def settle(self) -> None:
        """Journal the stream as the loop saw it, if it is still open (called by the run)."""
        if not self.done and not self.broken:
            self.finish()

    def feed(self, data: bytes) -> None:
        events, self.rest = split_events(self.rest + data)
        for event in events:
            self.events.append(event)
            if not self.terminal and is_terminal_event(event):
                self.terminal = True

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        complete = self.eof or self.terminal
        if not complete and (self.broken or _exception_in_flight(self.baseline)):
            return  # cut off: not a finished step; requested again on resume
        chunks = self.events + ([self.rest] if self.rest else [])
        payload = response_payload(self.status, self.headers, chunks=chunks, partial=not complete)
        self.recorder.record(self.run, self.begun, payload)


class _RecordingSyncStream:
    def __init__(self, tap: _Tap, inner: Any) -> None:
        self._tap = tap
        self._inner = inner
        self._it: Iterator[bytes] = inner.iter_bytes()

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                data = next(self._it)
            except StopIteration:
                break
            except Exception as exc:
                self._tap.broken = True
                _mark_retryable(exc, _module_of(self._inner))
                raise
            self._tap.feed(data)
            yield data
        self._tap.eof = True

    def close(self) -> None:
        try:
            if self._tap.terminal and not self._tap.eof:
                try:  # the final event arrived: the rest is framing; keep it for fidelity
                    for data in self._it:
                        self._tap.feed(data)
                    self._tap.eof = True
                except Exception:
                    pass
            self._tap.finish()
        finally:
            self._inner.close()


class _RecordingAsyncStream:
    def __init__(self, tap: _Tap, inner: Any) -> None:
        self._tap = tap
        self._inner = inner
        self._it: AsyncIterator[bytes] = inner.aiter_bytes()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            try:
                data = await self._it.__anext__()
            except StopAsyncIteration:
                break
            except Exception as exc:
                self._tap.broken = True
                _mark_retryable(exc, _module_of(self._inner))
                raise
            self._tap.feed(data)
            yield data
        self._tap.eof = True

    async def aclose(self) -> None:
        try:
            if self._tap.terminal and not self._tap.eof:
                try:
                    async for data in self._it:
                        self._tap.feed(data)
                    self._tap.eof = True
                except Exception:
                    pass
            self._tap.finish()
        finally:
            await self._inner.aclose()


@attrs.frozen
class _PartialEnd:
    """Where a replayed partial stream ends: reading past it is a divergence."""

    run_id: str
    seq: int | None
    name: str
    events: int

    def error(self) -> DivergenceError:
        return DivergenceError(
            f"run {self.run_id!r} seq {self.seq}: the recorded stream of {self.name!r} was "
            f"closed by the loop after {self.events} event(s), but the replayed loop reads on "
            "past them. The loop is not deterministic here: make it stop reading where it "
            "stopped when recorded, or start a new run.",
            run_id=self.run_id,
            seq=self.seq,
            kind="model",
            name=self.name,
        )


class _ReplaySyncStream:
    def __init__(self, chunks: list[bytes], end: _PartialEnd | None) -> None:
        self._chunks = chunks
        self._end = end

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks
        if self._end is not None:
            raise self._end.error()

    def close(self) -> None:
        pass


class _ReplayAsyncStream:
    def __init__(self, chunks: list[bytes], end: _PartialEnd | None) -> None:
        self._chunks = chunks
        self._end = end

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._end is not None:
            raise self._end.error()

    async def aclose(self) -> None:
        pass


def _stream_class(httpx: Any, base: str, impl: type) -> type:
    """Mix our stream implementation into the httpx module's byte-stream base class."""
    key = (httpx.__name__, base, impl.__name__)
    cls = _STREAM_CLASSES.get(key)
    if cls is None:
        cls = type(impl.__name__, (impl, getattr(httpx, base)), {})
        _STREAM_CLASSES[key] = cls
    return cls


_STREAM_CLASSES: dict[tuple[str, str, str], type] = {}


def _mark_retryable(exc: BaseException, httpx: Any) -> None:
    """Set ``retryable = True`` on an httpx transport error (the SDK's error's ``__cause__``)."""
    transport_error = getattr(httpx, "TransportError", None)
    if transport_error is None or not isinstance(exc, transport_error):
        return
    with contextlib.suppress(AttributeError, TypeError):  # an exception type with __slots__
        exc.retryable = True


def _replayed(
    httpx: Any, payload: dict[str, Any], request: Any, begun: _Begun, run: Run, *, is_async: bool
) -> Any:
    headers = _replay_headers(payload)
    status = int(payload["status"])
    extensions = {RETRYABLE_EXTENSION: False} if status >= 400 else {}
    if payload.get("stream"):
        chunks = [_as_bytes(c) for c in payload.get("chunks") or []]
        end = None
        if payload.get("partial"):
            seq = begun.step.seq if begun.step is not None else None
            end = _PartialEnd(run.run_id, seq, begun.name, len(chunks))
        if is_async:
            stream: Any = _stream_class(httpx, "AsyncByteStream", _ReplayAsyncStream)(chunks, end)
        else:
            stream = _stream_class(httpx, "SyncByteStream", _ReplaySyncStream)(chunks, end)
        return httpx.Response(
            status, headers=headers, stream=stream, request=request, extensions=extensions
        )
    return httpx.Response(
        status,
        headers=headers,
        content=_as_bytes(payload.get("body")),
        request=request,
        extensions=extensions,
    )


def _decoded_response(httpx: Any, response: Any, body: bytes, request: Any) -> Any:
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
    extensions = {k: v for k, v in response.extensions.items() if k != "network_stream"}
    if is_transient(response.status_code, response.headers):
        extensions[RETRYABLE_EXTENSION] = True
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=body,
        request=request,
        extensions=extensions,
    )


def _is_sse(response: Any) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


def _live_stream_response(
    httpx: Any, impl: type, base: str, tap: _Tap, response: Any, request: Any
) -> Any:
    stream = _stream_class(httpx, base, impl)(tap, response)
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
    return httpx.Response(
        response.status_code,
        headers=headers,
        stream=stream,
        request=request,
        extensions=response.extensions,
    )


class RecordingTransport:
    """A sync httpx transport that records/replays exchanges as model steps in the current run.

    Args:
        inner: the transport that really sends (``httpx.HTTPTransport``, a
            ``MockTransport``...), of the same httpx module as the client.
        recorder: names, views and the retry rule (:class:`HttpRecorder`).
        keep: an object to keep alive as long as this transport (the SDK's
            original http client, whose pool ``inner`` belongs to).
    """

    def __init__(self, inner: Any, recorder: HttpRecorder, *, keep: Any = None) -> None:
        self.inner = inner
        self.recorder = recorder
        self._keep = keep
        self._httpx = _module_of(inner)

    def handle_request(self, request: Any) -> Any:
        """Send ``request`` (outside a run), or replay / record it as a model step.

        Raises:
            DivergenceError, ReplayMissError: in a run, see :meth:`redrive.Run.model_begin`.
            Whatever the inner transport raises, marked ``retryable = True``
            (nothing is recorded then).
        """
        run = current_run()
        if run is None:
            return self.inner.handle_request(request)
        request.read()
        begun, recorded = _begin(run, self.recorder, request)
        if recorded is not None:
            return _replayed(self._httpx, recorded, request, begun, run, is_async=False)
        try:
            response = self.inner.handle_request(request)
        except Exception as exc:
            _mark_retryable(exc, self._httpx)
            raise
        if _is_sse(response) and response.status_code < 400:
            tap = _Tap(run, self.recorder, begun, response)
            return _live_stream_response(
                self._httpx, _RecordingSyncStream, "SyncByteStream", tap, response, request
            )
        try:
            body = response.read()
        finally:
            response.close()
        if self.recorder.should_record(request, response):
            payload = response_payload(
                response.status_code, response.headers.multi_items(), body=body
            )
            self.recorder.record(run, begun, payload)
        return _decoded_response(self._httpx, response, body, request)

    def close(self) -> None:
        """Close the inner transport."""
        self.inner.close()

    def __enter__(self) -> RecordingTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRecordingTransport:
    """The async twin of :class:`RecordingTransport` (``handle_async_request``)."""

    def __init__(self, inner: Any, recorder: HttpRecorder, *, keep: Any = None) -> None:
        self.inner = inner
        self.recorder = recorder
        self._keep = keep
        self._httpx = _module_of(inner)

    async def handle_async_request(self, request: Any) -> Any:
        """Send ``request`` (outside a run), or replay / record it as a model step.

        Raises:
            DivergenceError, ReplayMissError: in a run, see :meth:`redrive.Run.model_begin`.
            Whatever the inner transport raises, marked ``retryable = True``
            (nothing is recorded then).
        """
        run = current_run()
        if run is None:
            return await self.inner.handle_async_request(request)
        await request.aread()
        begun, recorded = _begin(run, self.recorder, request)
        if recorded is not None:
            return _replayed(self._httpx, recorded, request, begun, run, is_async=True)
        try:
            response = await self.inner.handle_async_request(request)
        except Exception as exc:
            _mark_retryable(exc, self._httpx)
            raise
        if _is_sse(response) and response.status_code < 400:
            tap = _Tap(run, self.recorder, begun, response)
            return _live_stream_response(
                self._httpx, _RecordingAsyncStream, "AsyncByteStream", tap, response, request
            )
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        if self.recorder.should_record(request, response):
            payload = response_payload(
                response.status_code, response.headers.multi_items(), body=body
            )
            self.recorder.record(run, begun, payload)
        return _decoded_response(self._httpx, response, body, request)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.inner.aclose()

    async def __aenter__(self) -> AsyncRecordingTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def parse_query(url: str) -> list[tuple[str, str]]:
    """Return the query pairs of a URL string (used by cassette import)."""
    return urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query, keep_blank_values=True)
