"""Server-sent-event framing: the one parser of SSE bytes the recorders and views use.

A live stream is cut into events at blank lines (:func:`split_events`) as it
arrives; each event is stored as it was received (its bytes, blank line
included). :func:`parse_event` reads one event's ``event:`` name and ``data:``
lines (joined by newlines, as the SSE standard says); the stream's end
(:func:`is_terminal_event`) and the semantic views (:func:`sse_data`) are read
through it.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from .._jsontext import NOT_JSON, loads

__all__ = ["SseEvent", "is_terminal_event", "parse_event", "split_events", "sse_data"]

_LINE_END = re.compile(rb"\r\n|\r|\n")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
#: Event names (or JSON ``type`` values) that end a stream (Anthropic, OpenAI Responses).
#: An ``error`` event ends it too; whether it is the step's outcome or a transient
#: failure is decided by ``redrive.recorders._provider.stream_error``.
TERMINAL_EVENTS = frozenset(
    {"message_stop", "response.completed", "response.failed", "response.incomplete", "error"}
)


@attrs.frozen
class SseEvent:
    """One parsed server-sent event.

    Attributes:
        name: the ``event:`` field, or None when the event has none.
        data: the ``data:`` lines joined by ``"\\n"`` (one leading space of each
            dropped), or None when the event has no data line.
    """

    name: str | None
    data: str | None

    def json(self) -> Any:
        """The data parsed as JSON, or None for no data, ``[DONE]`` and data that is not JSON."""
        if self.data is None or self.data.strip() == "[DONE]":
            return None
        value = loads(self.data)
        return None if value is NOT_JSON else value


def split_events(data: bytes) -> tuple[list[bytes], bytes]:
    """Split server-sent-event bytes into complete events (each with its blank line) and a rest.

    An event ends at an empty line; a line ends at ``\\r\\n``, ``\\r`` or
    ``\\n``, mixed freely (the SSE standard, WHATWG HTML "Parsing an event
    stream"). A ``\\r`` that ends ``data`` stays in the rest: the ``\\n`` of
    its CRLF may come in the next read.

    Args:
        data: bytes of a stream, from an event boundary on.

    Returns:
        ``(events, rest)``: ``rest`` is the bytes after the last event boundary.
    """
    events = []
    start = line_start = 0
    for match in _LINE_END.finditer(data):
        if match.group() == b"\r" and match.end() == len(data):
            break  # perhaps the first half of a CRLF cut between two reads
        if match.start() == line_start:  # an empty line: the event is complete
            events.append(data[start : match.end()])
            start = match.end()
        line_start = match.end()
    return events, data[start:]


def parse_event(event: bytes | str) -> SseEvent:
    """Read one event's name and data (bytes are decoded as UTF-8, bad bytes replaced).

    Lines are split at ``\\r\\n``, ``\\r`` and ``\\n`` only (a U+2028 inside
    JSON text does not cut a line). Comment lines and other fields are ignored.
    """
    text = event.decode("utf-8", "replace") if isinstance(event, bytes) else str(event)
    name: str | None = None
    data: list[str] = []
    for line in _LINE_BREAK.split(text):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    return SseEvent(name, "\n".join(data) if data else None)


def is_terminal_event(event: bytes) -> bool:
    """True when an SSE event ends its stream: ``[DONE]``, ``message_stop``, ``response.*``.

    Args:
        event: one event's bytes (see :func:`split_events`).

    Returns:
        True for a ``data: [DONE]``, an ``event:`` name in :data:`TERMINAL_EVENTS`,
        or JSON data whose ``type`` is one of them.
    """
    parsed = parse_event(event)
    if parsed.name in TERMINAL_EVENTS:
        return True
    data = (parsed.data or "").strip()
    if data == "[DONE]":
        return True
    if data.startswith("{") and '"type"' in data:
        value = parsed.json()
        kind = value.get("type") if isinstance(value, dict) else None
        return isinstance(kind, str) and kind in TERMINAL_EVENTS  # a "type" may be any JSON
    return False


def sse_data(chunks: list[Any]) -> list[tuple[str | None, Any]]:
    """Return ``[(event name or None, parsed JSON data), ...]`` of recorded SSE chunks.

    Args:
        chunks: the stored events (text or bytes), as in a response payload's ``chunks``.

    Returns:
        One pair per event with JSON data; ``[DONE]``, events without data and
        data that is not JSON are skipped.
    """
    out: list[tuple[str | None, Any]] = []
    for chunk in chunks:
        event = parse_event(chunk if isinstance(chunk, bytes) else str(chunk))
        value = event.json()
        if value is not None or (event.data or "").strip() == "null":
            out.append((event.name, value))
    return out
