"""The recording transport: one class serving httpx's sync and async transport interfaces.

As httpx's ``MockTransport`` does, :class:`RecordingTransport` implements
``handle_request`` and ``handle_async_request`` both. The logic of an
exchange is written once, as a generator (:meth:`RecordingTransport._exchange`)
that yields each I/O it needs (:class:`_Io`: read the request, open the
model step, send the request, read the body, close the response, journal
the step) and gets its result back; the sync face performs each I/O by
calling it, the async face by awaiting it (the step through the seam's async
forms, :func:`~redrive.recorders._step.abegin_model` and ``arecord``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any

import attrs

from ..errors import ReplayError
from ..replay import Run, join_run, sending_live
from ._exchange import as_bytes, replay_headers, response_payload
from ._provider import RETRYABLE_EXTENSION, is_transient
from ._recorder import HttpRecorder
from ._reencode import encode_content, stored_codings
from ._secrets import BODY_HEADERS
from ._step import ModelStep
from ._streams import (
    PartialEnd,
    RecordingStream,
    ReplayStream,
    Tap,
    mark_transport_error,
    response_class,
    stream_class,
)

__all__ = ["AsyncRecordingTransport", "CarriedReplayError", "RecordingTransport"]


class CarriedReplayError(BaseException):
    """A :class:`~redrive.errors.ReplayError` on its way out through an SDK.

    The Anthropic SDK catches every ``Exception`` its transport raises,
    retries, and raises ``APIConnectionError`` in its place (the ReplayError
    only as ``__cause__``). A transport made with ``carry_errors=True``
    raises its ReplayErrors wrapped in this ``BaseException``, which no SDK
    catches; the wrapped client's request entry (:func:`redrive.wrap`)
    raises :attr:`error` itself, at once.

    Attributes:
        error: the ReplayError carried (``DivergenceError``, ``ReplayMissError``...).
    """

    def __init__(self, error: ReplayError) -> None:
        super().__init__(error)
        self.error = error


@attrs.frozen
class _Io:
    """One I/O an exchange needs, in its two forms (the faces pick one)."""

    call: Callable[[], Any]
    acall: Callable[[], Awaitable[Any]]


_Exchange = Generator[_Io, Any, Any]


class _Flow:
    """Drives an exchange generator: holds its pending I/O, takes that I/O's outcome."""

    def __init__(self, exchange: _Exchange) -> None:
        self._exchange = exchange
        self.io: _Io | None = None
        self.result: Any = None
        self.resume(None, None)

    def resume(self, value: Any, error: BaseException | None) -> None:
        """Hand the last I/O's result (or its error) to the exchange; keep its next I/O."""
        try:
            if error is not None:
                self.io = self._exchange.throw(error)
            else:
                self.io = self._exchange.send(value)
        except StopIteration as stop:
            self.io, self.result = None, stop.value


def _attempt(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except BaseException as exc:  # handed to the exchange, which closes what it opened
        return None, exc


async def _aattempt(call: Callable[[], Awaitable[Any]]) -> tuple[Any, BaseException | None]:
    try:
        return await call(), None
    except BaseException as exc:
        return None, exc


def _send(send: Any, request: Any) -> Any:
    """Send a live step's request (marked so a test's network guard lets it through)."""
    with sending_live():
        return send.handle_request(request)


async def _asend(send: Any, request: Any) -> Any:
    """The async form of :func:`_send`."""
    with sending_live():
        return await send.handle_async_request(request)


def _read_raw(response: Any) -> bytes | None:
    """The body as the wire carried it; None for a response read already (a test double's)."""
    if response.is_stream_consumed:
        return None
    return b"".join(response.iter_raw())


async def _aread_raw(response: Any) -> bytes | None:
    """The async form of :func:`_read_raw`."""
    if response.is_stream_consumed:
        return None
    return b"".join([chunk async for chunk in response.aiter_raw()])


def _module_of(transport: Any) -> Any:
    """The httpx module (``httpx``, ``httpx2``) ``transport``'s class derives from.

    A transport of another package (litellm's aiohttp transport, a user's own
    subclass) derives from the httpx module's base transport: the first class
    of its MRO whose package is an httpx names it. A transport of no httpx
    class at all is taken to belong to the module its class lives in.
    """
    import sys

    for cls in type(transport).__mro__:
        top = cls.__module__.partition(".")[0]
        if top.startswith("httpx") and top in sys.modules:
            return sys.modules[top]
    return sys.modules[type(transport).__module__.partition(".")[0]]


def _is_sse(response: Any) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


def _live_headers(response: Any) -> list[tuple[str, str]]:
    return [(k, v) for k, v in response.headers.multi_items() if k.lower() not in BODY_HEADERS]


class RecordingTransport:
    """An httpx transport that records/replays exchanges as model steps in the current run.

    One object serves a sync client (``handle_request``, ``close``) and an
    async client (``handle_async_request``, ``aclose``) alike. Outside a run
    every request goes straight to ``inner``.

    Args:
        inner: the transport that really sends (``httpx.HTTPTransport``, a
            ``MockTransport``, another package's transport...).
        recorder: names, views and the retry rule (:class:`~redrive.recorders.http.HttpRecorder`).
        keep: an object to keep alive as long as this transport (the SDK's
            original http client, whose pool ``inner`` belongs to).
        carry_errors: raise the run's ReplayErrors as :class:`CarriedReplayError`
            (for an SDK client whose request entry turns them back; see
            :func:`redrive.wrap`); False: raise them as they are.
        httpx: the httpx module of the client this transport serves (its
            responses and streams are built of it); default: the one
            ``inner``'s class derives from.
    """

    def __init__(
        self,
        inner: Any,
        recorder: HttpRecorder,
        *,
        keep: Any = None,
        carry_errors: bool = False,
        httpx: Any = None,
    ) -> None:
        self.inner = inner
        self.recorder = recorder
        self._keep = keep
        self._httpx = httpx if httpx is not None else _module_of(inner)
        self.carry_errors = carry_errors

    @contextlib.contextmanager
    def _carrying(self) -> Iterator[None]:
        try:
            yield
        except ReplayError as exc:
            if not self.carry_errors:
                raise
            raise CarriedReplayError(exc) from None

    def handle_request(self, request: Any) -> Any:
        """Send ``request`` (outside a run), or replay / record it as a model step.

        Args:
            request: the httpx request.

        Returns:
            The httpx response: replayed, or live (decoded; a stream is recorded as it is read).

        Raises:
            DivergenceError, ReplayMissError: in a run, see
                :func:`redrive.recorders._step.begin_model` (as
                :class:`CarriedReplayError` when ``carry_errors``).
            Whatever the inner transport raises, a transport error marked
            ``retryable = True`` (nothing is recorded then).
        """
        with self._carrying():
            run = join_run("wrapped client request", f"{request.method} {request.url}")
            if run is None:
                return self.inner.handle_request(request)
            flow = _Flow(self._exchange(run, request))
            while flow.io is not None:
                flow.resume(*_attempt(flow.io.call))
            return flow.result

    async def handle_async_request(self, request: Any) -> Any:
        """The async form of :meth:`handle_request` (the I/O is awaited)."""
        with self._carrying():
            run = join_run("wrapped client request", f"{request.method} {request.url}")
            if run is None:
                return await self.inner.handle_async_request(request)
            flow = _Flow(self._exchange(run, request))
            while flow.io is not None:
                flow.resume(*await _aattempt(flow.io.acall))
            return flow.result

    def _exchange(self, run: Run, request: Any) -> _Exchange:
        """One exchange in a run, written once for both faces (each ``yield`` is an I/O)."""
        yield _Io(request.read, request.aread)
        recorder = self.recorder
        step: ModelStep = yield _Io(
            lambda: recorder.begin(run, request), lambda: recorder.abegin(run, request)
        )
        if step.recorded:
            return self._replayed(step, request)
        send = self.inner
        try:
            response = yield _Io(lambda: _send(send, request), lambda: _asend(send, request))
        except Exception as exc:
            mark_transport_error(exc, self._httpx)
            raise
        if _is_sse(response) and response.status_code < 400:
            tap = Tap(
                recorder,
                step,
                response,
                self._httpx,
                terminal_required=recorder.terminal_required,
            )
            stream = stream_class(self._httpx, RecordingStream)(tap, response)
            live = response_class(self._httpx)(
                response.status_code,
                headers=_live_headers(response),
                request=request,
                stream=stream,
                extensions=response.extensions,
            )
            live.tap = tap
            return live
        try:
            raw = yield _Io(lambda: _read_raw(response), lambda: _aread_raw(response))
        finally:
            yield _Io(response.close, response.aclose)
        status = response.status_code
        extensions = {k: v for k, v in response.extensions.items() if k != "network_stream"}
        if status >= 400:  # recorded (the same answer again) or transient (try again)
            extensions[RETRYABLE_EXTENSION] = is_transient(status, response.headers)
        headers = response.headers.multi_items()
        codings = stored_codings(headers)
        if raw is None:  # a test double's response, read (decoded) already
            body = response.content
            live = self._wire(status, _live_headers(response), request, body, codings, extensions)
        else:
            live = self._response(
                status, headers, request, stream=self._httpx.ByteStream(raw), extensions=extensions
            )
            try:
                body = self._response(status, headers=headers, content=raw).content
            except self._httpx.DecodingError:
                return live  # not what its coding says: the caller's read raises, as live
        if recorder.should_record(request, response):
            payload = response_payload(status, headers, body=body, content_encoding=codings)
            yield _Io(
                lambda: recorder.record(step, payload), lambda: recorder.arecord(step, payload)
            )
        return live

    def _replayed(self, step: ModelStep, request: Any) -> Any:
        payload: dict[str, Any] = step.response
        status = int(payload["status"])
        extensions = {RETRYABLE_EXTENSION: False} if status >= 400 else {}
        headers = replay_headers(payload)
        if not payload.get("stream"):
            body, codings = as_bytes(payload.get("body")), payload.get("content_encoding")
            return self._wire(status, headers, request, body, codings, extensions)
        chunks = [as_bytes(c) for c in payload.get("chunks") or []]
        end = None
        if payload.get("partial"):
            end = PartialEnd(step.run.run_id, step.seq, step.name, len(chunks))
        stream = stream_class(self._httpx, ReplayStream)(chunks, end)
        return self._response(status, headers, request, stream=stream, extensions=extensions)

    def _response(self, status: int, headers: Any, request: Any = None, **parts: Any) -> Any:
        return self._httpx.Response(status, headers=headers, request=request, **parts)

    def _wire(
        self,
        status: int,
        headers: list[tuple[str, str]],
        request: Any,
        body: bytes,
        codings: str | None,
        extensions: dict[str, Any],
    ) -> Any:
        """An unread response of a decoded ``body``, encoded again as ``codings`` say.

        httpx then reads it as it reads a live one (``iter_raw`` the encoded
        bytes, ``iter_bytes`` the decoded; see :mod:`redrive.recorders._reencode`).
        A coding without an encoder installed here: the body decoded, without the header.
        """
        raw = encode_content(body, codings, self._httpx) if codings else None
        framing = [("content-length", str(len(body if raw is None else raw)))]
        if raw is not None and codings:
            framing.insert(0, ("content-encoding", codings))
        return self._response(
            status,
            [*headers, *framing],
            request,
            stream=self._httpx.ByteStream(body if raw is None else raw),
            extensions=extensions,
        )

    def close(self) -> None:
        """Close the inner transport (sync)."""
        self.inner.close()

    async def aclose(self) -> None:
        """Close the inner transport (async)."""
        await self.inner.aclose()

    def __enter__(self) -> RecordingTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RecordingTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: The same class: one transport serves async clients too (kept for imports and isinstance).
AsyncRecordingTransport = RecordingTransport
