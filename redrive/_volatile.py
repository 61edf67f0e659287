"""What differs between two recordings of the same behaviour (pure): volatile fields.

One place for the parts of a recorded exchange that describe the transport
or the moment, not the answer, so every reader that compares recordings
leaves out the same ones: the pytest plugin's settled recordings
(:mod:`redrive._plugin_settle`) and :func:`redrive.diff_runs` (``redrive diff``,
the two-run ``redrive view``).

- :data:`VOLATILE_HEADERS`: response headers such as ``date``, ``server``,
  processing times, rate-limit counters and request ids.
- :data:`VOLATILE_BODY_KEYS`: fields a provider mints for each response: the
  ``id`` of the response envelope (OpenAI ``chat.completion``/``.chunk`` and
  ``response`` objects, Anthropic ``message``) and of the items it holds
  (tool calls, output messages, reasoning items), ``created`` /
  ``created_at`` timestamps, a stream event's ``item_id``, and
  ``system_fingerprint`` (the serving configuration). Only in an object
  whose ``type`` or ``object`` names one of :data:`MINTED_TYPES`: an ``id``
  in a tool's ``input`` is the user's data and stays.
"""

from __future__ import annotations

from typing import Any, Final

from ._jsontext import NOT_JSON, loads

__all__ = [
    "MINTED_TYPES",
    "VOLATILE_BODY_KEYS",
    "VOLATILE_HEADERS",
    "settled_response",
    "volatile_header",
]

#: Response headers (lower case) whose value describes the transport, not the answer.
#: Names ending a prefix with ``-`` match every header that starts with it.
VOLATILE_HEADERS: Final = frozenset(
    {
        "date",
        "age",
        "expires",
        "server",
        "via",
        "cf-ray",
        "request-id",
        "x-request-id",
        "openai-processing-ms",
        "x-envoy-upstream-service-time",
        "x-ratelimit-",
        "anthropic-ratelimit-",
        "set-cookie",
    }
)

#: ``type`` / ``object`` values of the objects a provider mints ids and times for
#: (OpenAI Chat Completions and Responses, Anthropic Messages).
MINTED_TYPES: Final = frozenset(
    {
        "chat.completion",
        "chat.completion.chunk",
        "response",
        "message",
        "reasoning",
        "function",
        "function_call",
        "tool_use",
        "server_tool_use",
        "tool_call",
    }
)

#: Keys of a minted object (see :data:`MINTED_TYPES`) that differ in every recording.
VOLATILE_BODY_KEYS: Final = frozenset(
    {"id", "call_id", "item_id", "created", "created_at", "system_fingerprint"}
)


def volatile_header(name: Any) -> bool:
    """True when response header ``name`` (any case) is one of :data:`VOLATILE_HEADERS`."""
    low = str(name).lower()
    return low in VOLATILE_HEADERS or any(
        low.startswith(p) for p in VOLATILE_HEADERS if p.endswith("-")
    )


def _minted(value: dict[str, Any]) -> bool:
    return any(
        isinstance(value.get(k), str) and value[k] in MINTED_TYPES for k in ("type", "object")
    )


def _settled_tree(value: Any, *, event: bool = False) -> Any:
    """``value`` without the volatile keys of its minted objects (iterative deep copy).

    ``event``: ``value`` is a stream event: its own ``item_id`` is minted too.
    """
    root: list[Any] = [None]
    stack: list[tuple[Any, list[Any] | dict[Any, Any], Any, bool]] = [(value, root, 0, event)]
    while stack:
        item, holder, slot, is_event = stack.pop()
        if isinstance(item, dict):
            drop = _minted(item) or is_event
            copy: dict[Any, Any] = {}
            holder[slot] = copy
            for key, child in item.items():
                if drop and key in VOLATILE_BODY_KEYS:
                    continue
                stack.append((child, copy, key, False))
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            holder[slot] = items
            stack.extend((child, items, i, False) for i, child in enumerate(item))
        else:
            holder[slot] = item
    return root[0]


def _events(chunks: list[Any]) -> list[Any]:
    """The ``data:`` payloads of a server-sent-event stream, whatever its chunking."""
    text = "".join(c if isinstance(c, str) else bytes(c).decode("utf-8", "replace") for c in chunks)
    out: list[Any] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = [
            line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")
        ]
        if not lines:
            continue
        data = "\n".join(lines)
        parsed = loads(data)
        out.append(data if parsed is NOT_JSON else _settled_tree(parsed, event=True))
    return out


def settled_response(response: Any) -> Any:
    """Return a recorded HTTP response as two recordings of the same answer share it.

    ``response`` is ``{"status", "headers", "body" | "chunks", ...}``: volatile
    headers are dropped, the JSON body (or each stream event's JSON, whatever
    the chunking) parsed with its minted ids and times left out.

    Any other value (a model callable's own return value) is returned as it is.
    """
    if not (isinstance(response, dict) and ("body" in response or "chunks" in response)):
        return response
    out = {k: v for k, v in response.items() if k not in ("headers", "body", "chunks")}
    headers = response.get("headers")
    if isinstance(headers, list):
        out["headers"] = [
            pair
            for pair in headers
            if not (isinstance(pair, list | tuple) and pair and volatile_header(pair[0]))
        ]
    chunks = response.get("chunks")
    if isinstance(chunks, list):
        out["events"] = _events(chunks)
    body = response.get("body")
    if isinstance(body, str | bytes):
        parsed = loads(body)
        out["body"] = body if parsed is NOT_JSON else _settled_tree(parsed)
    elif body is not None:
        out["body"] = body
    return out
