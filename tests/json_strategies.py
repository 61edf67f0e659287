"""Hypothesis strategies of JSON a provider accepts: arbitrary, hostile, and provider-shaped.

``json_values`` is any JSON value: null, bools, ints of any size, finite floats
(``-0.0``, ``1e308``, ``5e-324``), unicode text, empty and nested arrays and
objects whose keys are often the very field names redrive reads
(:data:`HOSTILE_KEYS`: ``type``, ``role``, ``content``, ``id``, ``tool_calls``...).
``json_schemas`` are JSON Schemas as tools declare them (type lists such as
``["string", "null"]``, properties named ``type``). The request and response
strategies build the shapes the OpenAI (chat completions, Responses) and
Anthropic (Messages) SDKs send and receive, with arbitrary JSON inserted at
every position (:func:`anywhere` replaces one part of a shape, at any depth,
by arbitrary JSON).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tests.strategies import text

#: Field names redrive reads somewhere (a view, the match walk, usage, otel, the scrubber).
HOSTILE_KEYS = (
    "type", "role", "content", "text", "id", "tool_calls", "arguments", "input", "name",
    "messages", "model", "stream", "function", "functions", "tools", "tool_choice", "choices",
    "delta", "message", "usage", "output", "error", "object", "response", "index", "call_id",
    "tool_call_id", "tool_use_id", "idempotency_key", "partial_json", "content_block",
    "stop_reason", "finish_reason", "system", "instructions", "input_tokens", "output_tokens",
    "prompt_tokens", "completion_tokens", "status", "code", "body", "chunks", "headers", "path",
    "query", "method", "view", "args", "result", "value", "data", "properties", "items",
    "anyOf", "required", "enum", "$ref", "signature", "thinking", "token", "api_key",
    "authorization", "started_at", "label", "", "0", "-1", "a.b", "x[0]", "'q'", "ключ", "🔑",
    "event", "retry", "client_secret", "REFRESHTOKEN", "x-api-key", "db_password", "apiKey",
)  # fmt: skip
#: Fields a stream's reader looks at (the SSE fields; event names and ids inside the JSON).
STREAM_KEYS = ("type", "event", "data", "id", "retry", "object", "choices", "delta", "index")
#: Text values redrive compares against (object types, roles, event names, markers).
HOSTILE_TEXT = (
    "function", "tool_use", "function_call", "server_tool_use", "tool_call", "text",
    "text_delta", "input_json_delta", "message_start", "message_delta", "content_block_start",
    "content_block_delta", "error", "response.completed", "response.failed", "response",
    "system", "developer", "user", "assistant", "[DONE]", "[REDACTED]", "data: {}", "{", "[]",
    "null", "string", "object",
)  # fmt: skip

keys = st.one_of(st.sampled_from(HOSTILE_KEYS), text)

#: Finite floats, with the edges spelled out (JSON has no NaN or infinity).
floats = st.one_of(
    st.sampled_from((0.0, -0.0, 1e308, -1e308, 5e-324, 1.5, -2.5e-7)),
    st.floats(allow_nan=False, allow_infinity=False),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(min_value=-(10**40), max_value=10**40),  # beyond 64 bits: JSON has no limit
    floats,
    st.sampled_from(HOSTILE_TEXT),
    text,
)

#: Any JSON value (objects keyed by hostile names as often as by random text).
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=12,
)


def nested(depth: int, leaf: Any = None) -> Any:
    """A value nested ``depth`` levels: arrays and objects alternating around ``leaf``."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"type": value}
    return value


def nested_text(depth: int, leaf: str = '"leaf"') -> str:
    """The JSON text of :func:`nested` (``json.dumps`` recurses: it cannot write a deep one)."""
    opening = "".join("[" if level % 2 else '{"type": ' for level in reversed(range(depth)))
    closing = "".join("]" if level % 2 else "}" for level in range(depth))
    return opening + leaf + closing


_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")


@st.composite
def json_schemas(draw: st.DrawFn, depth: int = 2) -> Any:
    """A JSON Schema as a tool declares its parameters: type lists, hostile property names."""
    kind = draw(
        st.one_of(
            st.sampled_from(_TYPES),
            st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3, unique=True),
        )
    )
    schema: dict[str, Any] = {"type": kind}
    if depth > 0 and draw(st.booleans()):
        schema["properties"] = draw(
            st.dictionaries(keys, json_schemas(depth=depth - 1), max_size=3)
        )
        schema["required"] = draw(st.lists(st.sampled_from(HOSTILE_KEYS), max_size=2))
    if depth > 0 and draw(st.booleans()):
        schema["anyOf"] = draw(st.lists(json_schemas(depth=depth - 1), max_size=2))
    if draw(st.booleans()):
        schema["enum"] = draw(st.lists(scalars, max_size=3))
    if draw(st.booleans()):
        schema[draw(keys)] = draw(json_values)
    return schema


def _positions(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value`` (the root included), for :func:`anywhere`."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_positions(item, (*path, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(_positions(item, (*path, i)))
    return out


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replaced(copy[head], rest, new)
    return copy


@st.composite
def anywhere(draw: st.DrawFn, shape: Any, times: int = 2) -> Any:
    """``shape`` with up to ``times`` of its parts (any depth) replaced by arbitrary JSON.

    The root itself is never replaced (a request stays an object), and a part
    may also gain a hostile key.
    """
    value = shape
    for _ in range(draw(st.integers(min_value=0, max_value=times))):
        paths = [p for p in _positions(value) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        value = _replaced(value, path, draw(json_values))
    if draw(st.booleans()):
        path = draw(st.sampled_from(_positions(value)))
        target = value
        for step in path:
            target = target[step]
        if isinstance(target, dict):
            value = _replaced(value, path, {**target, draw(keys): draw(json_values)})
    return value


# -- provider-shaped requests ----------------------------------------------------------------

tool_schema = json_schemas()


@st.composite
def openai_chat_request(draw: st.DrawFn) -> dict[str, Any]:
    """A chat completions body: messages, tool calls and results, tools with any schema."""
    args = json.dumps(draw(json_values))
    shape = {
        "model": draw(st.sampled_from(("gpt-4o", "gpt-4o-mini"))),
        "messages": [
            {"role": "system", "content": draw(text)},
            {"role": "user", "content": draw(text)},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": draw(keys), "arguments": args},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": draw(text)},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": draw(keys),
                    "description": draw(text),
                    "parameters": draw(tool_schema),
                    "strict": draw(st.booleans()),
                },
            }
        ],
    }
    return draw(anywhere(shape))


@st.composite
def openai_responses_request(draw: st.DrawFn) -> dict[str, Any]:
    """A Responses body: input items (messages, function calls and outputs), tools."""
    shape = {
        "model": "gpt-4o",
        "instructions": draw(text),
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": draw(text)}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": draw(text)},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": draw(keys),
                "arguments": json.dumps(draw(json_values)),
            },
            {"type": "function_call_output", "call_id": "call_1", "output": draw(text)},
        ],
        "tools": [{"type": "function", "name": draw(keys), "parameters": draw(tool_schema)}],
    }
    return draw(anywhere(shape))


@st.composite
def anthropic_request(draw: st.DrawFn) -> dict[str, Any]:
    """A Messages body: text, thinking, tool_use and tool_result blocks, tools with any schema."""
    shape = {
        "model": "claude-sonnet-4-5",
        "max_tokens": draw(st.integers(min_value=1, max_value=8192)),
        "system": [{"type": "text", "text": draw(text)}],
        "messages": [
            {"role": "user", "content": draw(text)},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": draw(text), "signature": draw(text)},
                    {"type": "tool_use", "id": "toolu_1", "name": draw(keys), "input": draw(
                        st.dictionaries(keys, json_values, max_size=3)
                    )},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": draw(
                    text
                )}],
            },
        ],
        "tools": [{"name": draw(keys), "input_schema": draw(tool_schema)}],
    }  # fmt: skip
    return draw(anywhere(shape))


#: A request body of any provider's shape, or any JSON object at all.
request_bodies = st.one_of(
    openai_chat_request(),
    openai_responses_request(),
    anthropic_request(),
    st.dictionaries(keys, json_values, max_size=5),
)


# -- provider-shaped responses ---------------------------------------------------------------


@st.composite
def openai_chat_response(draw: st.DrawFn) -> dict[str, Any]:
    """A chat completion: a message with text and tool calls, usage, logprobs."""
    shape = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": draw(text),
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": draw(keys),
                                "arguments": json.dumps(draw(json_values)),
                            },
                        }
                    ],
                },
                "logprobs": {"content": [{"token": draw(text), "logprob": draw(floats)}]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    return draw(anywhere(shape))


@st.composite
def openai_responses_response(draw: st.DrawFn) -> dict[str, Any]:
    """A Responses object: output items, usage."""
    shape = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-4o",
        "output": [
            {"type": "message", "id": "msg_1", "content": [{"type": "output_text", "text": "x"}]},
            {"type": "function_call", "call_id": "call_1", "name": draw(keys), "arguments": "{}"},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    return draw(anywhere(shape))


@st.composite
def anthropic_response(draw: st.DrawFn) -> dict[str, Any]:
    """A Messages response: text and tool_use blocks, usage, stop reason."""
    shape = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": draw(text)},
            {"type": "tool_use", "id": "toolu_1", "name": draw(keys), "input": draw(json_values)},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    return draw(anywhere(shape))


#: A response body of any provider's shape, any JSON value, or an error object.
response_bodies = st.one_of(
    openai_chat_response(),
    openai_responses_response(),
    anthropic_response(),
    json_values,
    st.builds(lambda e: {"type": "error", "error": e}, json_values),
)


#: An event's JSON keyed by the fields stream code reads, each holding JSON of any shape
#: (objects and arrays whose keys may be credential names, at any depth).
stream_fields = st.dictionaries(st.sampled_from(STREAM_KEYS), json_values, min_size=1, max_size=4)


@st.composite
def sse_streams(draw: st.DrawFn) -> list[str]:
    """A server-sent-event stream's events: provider-shaped and arbitrary JSON data lines.

    An event may carry an ``id:`` line, and its ``event:`` name is the JSON ``type``
    when that is a name (a ``type`` of another shape gets no ``event:`` line).
    """
    events = []
    for data in draw(
        st.lists(
            st.one_of(
                anthropic_stream_event(),
                st.builds(lambda c: {"object": "chat.completion.chunk", "choices": c}, json_values),
                st.builds(lambda r: {"type": "response.completed", "response": r}, json_values),
                stream_fields,
                json_values,
            ),
            max_size=5,
        )
    ):
        name = data.get("type") if isinstance(data, dict) else None
        head = f"event: {name}\n" if isinstance(name, str) and name.isidentifier() else ""
        if draw(st.booleans()):
            head += f"id: {draw(st.integers(min_value=0, max_value=99))}\n"
        events.append(f"{head}data: {json.dumps(data)}\n\n")
    return events


@st.composite
def anthropic_stream_event(draw: st.DrawFn) -> Any:
    """An Anthropic stream event with arbitrary JSON in its fields."""
    kind = draw(
        st.sampled_from(
            ("message_start", "content_block_start", "content_block_delta", "message_delta")
        )
    )
    shape = {
        "message_start": {"type": kind, "message": {"usage": {"input_tokens": 1}}},
        "content_block_start": {"type": kind, "index": 0, "content_block": {"type": "tool_use"}},
        "content_block_delta": {
            "type": kind,
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "{"},
        },
        "message_delta": {"type": kind, "delta": {"stop_reason": "end_turn"}, "usage": {}},
    }[kind]
    return draw(anywhere(shape))


# -- a crewAI-like tool: nullable fields and a property named "type" -------------------------

#: A tool schema as crewAI (pydantic ``Optional[...]`` fields) sends it.
NULLABLE_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to look for"},
        "limit": {"type": ["integer", "null"], "default": None},
        "type": {"type": ["string", "null"], "enum": ["web", "news", None]},
    },
    "required": ["query", "limit", "type"],
    "additionalProperties": False,
}
