"""Server-sent-event streams of model steps: the live tap and the replayed stream.

Each stream class serves httpx's sync and async byte-stream interfaces at
once (``__iter__``/``close`` and ``__aiter__``/``aclose``), as httpx's own
``ByteStream`` does: the logic (what is recorded, when, and what a replay
does at a partial stream's end) lives once, in :class:`Tap` and
:class:`PartialEnd`; the two faces only move bytes.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..errors import DivergenceError, DivergenceReason
from ._exchange import response_payload
from ._provider import StreamError, set_retryable, stream_error
from ._sse import is_terminal_event, parse_event, split_events
from ._step import ModelStep, before_next_step

if TYPE_CHECKING:
    from ._recorder import HttpRecorder

__all__ = [
    "PartialEnd",
    "RecordingStream",
    "ReplayStream",
    "Tap",
    "mark_transport_error",
    "response_class",
    "stream_class",
]


def mark_transport_error(exc: BaseException, httpx: Any) -> bool:
    """Set ``retryable = True`` on an httpx transport error (the SDK's error's ``__cause__``).

    Args:
        exc: what the inner transport or a live stream raised.
        httpx: the httpx module the transport belongs to (anything else is left as is).

    Returns:
        True when ``exc`` is a transport error of that module.
    """
    transport_error = getattr(httpx, "TransportError", None)
    if transport_error is None or not isinstance(exc, transport_error):
        return False
    with contextlib.suppress(AttributeError, TypeError):  # an exception type with __slots__
        exc.retryable = True
    return True


#: Exceptions that end an iteration normally: a close made while one is handled is the
#: loop's choice, not a crash (litellm's stream wrapper closes the response in its
#: ``except StopAsyncIteration`` once it has what it needs, before the final event)
_ITERATION_ENDS: Final = (StopIteration, StopAsyncIteration)


def _exception_in_flight(baseline: BaseException | None) -> bool:
    """True when an exception other than ``baseline`` is unwinding through the caller.

    The end of an iteration (:data:`_ITERATION_ENDS`) being handled is not one.
    """
    current = sys.exc_info()[1]
    return (
        current is not None and current is not baseline and not isinstance(current, _ITERATION_ENDS)
    )


class Tap:
    """Collects a live SSE stream's events and records the step when the stream is closed.

    What a stream's end means (one rule with the HTTP status of a response):

    * its final event arrived (``[DONE]``, ``message_stop``, ``response.completed``,
      ``response.incomplete``...): a finished step, recorded whole;
    * an in-band error event (:func:`~redrive.recorders._provider.stream_error`):
      a permanent one is the step's outcome, recorded whole (a replay raises the
      same SDK exception); a transient one (overloaded, rate limit, server
      error) is not a finished step: not recorded, and the exception unwinding
      through the stream's close carries ``retryable = True``, as a transient
      HTTP status does;
    * the server ended the stream without its final event (a provider with a
      known stream grammar, ``terminal_required``): not a finished step; the
      reader gets a ``RemoteProtocolError`` marked retryable, as for a dropped
      connection; a stream that fails transiently in-band and that the SDK
      reads to its end without raising (OpenAI Responses' ``response.failed``)
      ends the same way;
    * the caller closed it before its end: recorded as ``partial``;
    * the connection broke, or the close happens while an exception unwinds
      (a crash, a cancellation, the generator's teardown): not recorded.

    Args:
        recorder: journals the finished exchange (:class:`~redrive.recorders.http.HttpRecorder`).
        step: the live model step the stream answers.
        response: the live httpx response (its status and headers are kept).
        httpx: the httpx module (to mark its transport errors ``retryable``).
        terminal_required: the provider's stream grammar ends every complete
            stream with a final event (OpenAI, Anthropic).
    """

    def __init__(
        self,
        recorder: HttpRecorder,
        step: ModelStep,
        response: Any,
        httpx: Any,
        *,
        terminal_required: bool = False,
    ) -> None:
        self.recorder = recorder
        self.step = step
        self.httpx = httpx
        self.terminal_required = terminal_required
        self.status = response.status_code
        self.headers = list(response.headers.multi_items())
        self.events: list[bytes] = []
        self.rest = b""
        self.terminal = False
        self.error: StreamError | None = None
        self.eof = False
        self.broken = False
        self.cut = False
        self.done = False
        # an exception already being handled where the stream was opened is not an interruption
        self.baseline = sys.exc_info()[1]
        # a loop that stops reading without closing the stream still acted on what it
        # read: journal it before the loop's next step (not later, out of order)
        before_next_step(step.run, self.settle)

    def settle(self) -> None:
        """Journal the stream as the loop saw it, if it is still open (called by the run)."""
        if not self.done and not self.broken:
            self.close()

    def feed(self, data: bytes) -> None:
        """Take the next bytes the caller reads: complete events are kept, the rest waits."""
        events, self.rest = split_events(self.rest + data)
        for event in events:
            self.events.append(event)
            if self.terminal:
                continue
            error = stream_error(parse_event(event))
            if error is not None:
                self.error = error
                self.terminal = True
            elif is_terminal_event(event):
                self.terminal = True

    @property
    def transient(self) -> bool:
        """True when the stream failed in-band with a transient error."""
        return self.error is not None and self.error.transient

    @property
    def truncated(self) -> bool:
        """True when the server ended a stream whose grammar needs a final event without it."""
        return self.eof and self.terminal_required and not self._complete()

    def _complete(self) -> bool:
        # a rest cut after its event's last line end (a CR whose LF was not read) ends
        # the event for the SDK's own parser too: a final event there completes the stream
        return self.terminal or (
            self.rest.endswith((b"\r", b"\n")) and is_terminal_event(self.rest)
        )

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Around the caller's reading: an error breaks the stream, the end is its eof.

        Raises:
            httpx.RemoteProtocolError: (marked ``retryable``) the stream ended
                without its final event, or after a transient in-band error.
        """
        try:
            yield
        except Exception as exc:
            self.broken = True
            self.cut = mark_transport_error(exc, self.httpx)
            raise
        self.eof = True
        if self.truncated or self.transient:
            self.broken = self.cut = True
            raise self._ended_early()

    def _ended_early(self) -> BaseException:
        if self.error is not None:
            what = f"failed in-band with the transient {self.error.kind or 'error'!r}"
        else:
            what = "ended without its final event"
        exc = self.httpx.RemoteProtocolError(
            f"the stream of {self.step.name!r} {what}: it is not a finished step; "
            "resuming the run asks again"
        )
        mark_transport_error(exc, self.httpx)
        return exc  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def closing(self) -> Iterator[bool]:
        """Around the caller's close: yields whether to read the rest (errors there are ignored).

        After the final event the rest is framing: it is read and kept, for fidelity.
        """
        with contextlib.suppress(Exception):
            yield self.terminal and not self.eof

    def mark_unwinding(self) -> None:
        """Mark the exception unwinding through a close, as the stream's end decides.

        The SDK raises its own exception for an in-band error (or wraps a
        transport error) and closes the response while it unwinds (see
        :func:`response_class`): a transient failure or a cut marks it
        ``retryable = True``, a recorded in-band error ``retryable = False``
        (an exception that has a boolean flag keeps it).
        """
        exc = sys.exc_info()[1]
        if exc is None or exc is self.baseline or not isinstance(exc, Exception):
            return
        if self.transient or self.cut:
            set_retryable(exc, True)
        elif self.error is not None:
            set_retryable(exc, False)

    def outcome(self) -> dict[str, Any] | None:
        """Mark the stream done; return the response payload to journal, or None.

        None when it was done already, cut off, truncated or failed transiently
        (then the step is requested again on resume). A stream closed before
        its final event is ``partial``.
        """
        if self.done:
            return None
        self.done = True
        self.mark_unwinding()
        complete = self._complete()
        if self.transient or self.truncated:
            return None  # not a finished step: requested again on resume
        if not complete and not self.eof and (self.broken or _exception_in_flight(self.baseline)):
            return None  # cut off: not a finished step; requested again on resume
        chunks = self.events + ([self.rest] if self.rest else [])
        return response_payload(
            self.status, self.headers, chunks=chunks, partial=not (complete or self.eof)
        )

    def close(self) -> None:
        """Journal the stream's :meth:`outcome`, if it has one."""
        payload = self.outcome()
        if payload is not None:
            self.recorder.record(self.step, payload)

    async def aclose(self) -> None:
        """The async form of :meth:`close`."""
        payload = self.outcome()
        if payload is not None:
            await self.recorder.arecord(self.step, payload)


class RecordingStream:
    """The live stream the caller reads (sync or async), fed to a :class:`Tap` on the way.

    Args:
        tap: collects the events and records the step.
        inner: the live httpx response whose bytes are passed on.
    """

    def __init__(self, tap: Tap, inner: Any) -> None:
        self._tap = tap
        self._inner = inner
        self._bytes: Iterator[bytes] | None = None
        self._abytes: AsyncIterator[bytes] | None = None

    def __iter__(self) -> Iterator[bytes]:
        self._bytes = self._bytes or self._inner.iter_bytes()
        with self._tap.reading():
            for data in self._bytes:
                self._tap.feed(data)
                yield data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._abytes = self._abytes or self._inner.aiter_bytes()
        with self._tap.reading():
            async for data in self._abytes:
                self._tap.feed(data)
                yield data

    def close(self) -> None:
        """Record the step as the caller saw it (see :class:`Tap`), then close the response."""
        try:
            with self._tap.closing() as drain:
                for _ in self if drain else ():
                    pass
            self._tap.close()
        finally:
            self._inner.close()

    async def aclose(self) -> None:
        """The async form of :meth:`close`."""
        try:
            with self._tap.closing() as drain:
                async for _ in self if drain else _no_bytes():
                    pass
            await self._tap.aclose()
        finally:
            await self._inner.aclose()


async def _no_bytes() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover  (makes this an async generator)


@attrs.frozen
class PartialEnd:
    """Where a replayed partial stream ends: reading past it is a divergence.

    Attributes:
        run_id: the run replayed.
        seq: the seq of the step's recorded request.
        name: the step name.
        events: how many events the loop read when recorded.
    """

    run_id: str
    seq: int | None
    name: str
    events: int

    def error(self) -> DivergenceError:
        """The divergence raised when the replayed loop reads on past the recorded events."""
        return DivergenceError(
            f"run {self.run_id!r} seq {self.seq}: the recorded stream of {self.name!r} was "
            f"closed by the loop after {self.events} event(s), but the replayed loop reads on "
            "past them. The loop is not deterministic here: make it stop reading where it "
            "stopped when recorded (a new run would make this run's side effects again).",
            run_id=self.run_id,
            seq=self.seq,
            kind="model",
            name=self.name,
            reason=DivergenceReason.STREAM_OVERRUN,
        )


class ReplayStream:
    """A recorded stream handed back event by event (sync or async).

    Args:
        chunks: the recorded events, as bytes.
        end: where a partial stream ends (reading past it raises), or None.
    """

    def __init__(self, chunks: list[bytes], end: PartialEnd | None) -> None:
        self._chunks = chunks
        self._end = end

    def _past_end(self) -> None:
        if self._end is not None:
            raise self._end.error()

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks
        self._past_end()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        self._past_end()

    def close(self) -> None:
        """Nothing to release."""

    async def aclose(self) -> None:
        """Nothing to release."""


class _TapResponse:
    """Mixed into an httpx ``Response`` of a live stream: every close marks what unwinds.

    httpx closes a response itself when its stream ends or breaks (before an
    SDK wraps the error it got); the SDK closes it again while its own
    exception unwinds. Each close hands that exception to the tap
    (:meth:`Tap.mark_unwinding`), so the exception the loop gets carries
    ``retryable`` as the stream's end decides.
    """

    tap: Tap | None = None

    def close(self) -> None:
        """Mark the exception unwinding (if any), then close the response."""
        if self.tap is not None:
            self.tap.mark_unwinding()
        super().close()  # type: ignore[misc]

    async def aclose(self) -> None:
        """The async form of :meth:`close`."""
        if self.tap is not None:
            self.tap.mark_unwinding()
        await super().aclose()  # type: ignore[misc]


def response_class(httpx: Any) -> type:
    """The httpx module's ``Response`` with :class:`_TapResponse` mixed in (set ``.tap``)."""
    key = (httpx.__name__, "Response")
    cls = _STREAM_CLASSES.get(key)
    if cls is None:
        cls = type("Response", (_TapResponse, httpx.Response), {})
        _STREAM_CLASSES[key] = cls
    return cls


def stream_class(httpx: Any, impl: type) -> type:
    """Mix a stream class into the httpx module's sync and async byte-stream base classes."""
    key = (httpx.__name__, impl.__name__)
    cls = _STREAM_CLASSES.get(key)
    if cls is None:
        cls = type(impl.__name__, (impl, httpx.SyncByteStream, httpx.AsyncByteStream), {})
        _STREAM_CLASSES[key] = cls
    return cls


_STREAM_CLASSES: dict[tuple[str, str], type] = {}
