"""redrive.otel against the real OpenAI and Anthropic SDKs: usage with cached and reasoning
tokens, and tool-call ids of parallel calls of one tool (issue 25, failures 2 and 3)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.schemas import Schemas

import redrive
from redrive import otel
from redrive._otel_spans import _CallIds
from tests.sdkserver import Reply, ScriptServer, serve
from tests.unit.test_otel import PUBLISHED

#: the two parallel calls of one tool the model asks for, in the response's order
CALLS = [("A", {"order": "A-1"}), ("B", {"order": "B-2"})]
MODEL = "model-x-2026"


def _sse(events: list[dict[str, Any]], *, named: bool) -> list[str]:
    out = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(event)}\n\n")
    return out


def _anthropic(stream: bool) -> Reply:
    """Anthropic Messages: 12 fresh input tokens, 4,000 read from the cache, 300 written to it."""
    usage = {
        "input_tokens": 12,
        "cache_read_input_tokens": 4000,
        "cache_creation_input_tokens": 300,
        "output_tokens": 40,
    }
    blocks = [
        {"type": "tool_use", "id": f"toolu_{i}", "name": "lookup", "input": a} for i, a in CALLS
    ]
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL}
    if not stream:
        body = {**message, "content": blocks, "stop_reason": "tool_use", "stop_sequence": None}
        return Reply(body={**body, "usage": usage})
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**start, "usage": {**usage, "output_tokens": 1}}}
    ]
    for index, block in enumerate(blocks):
        partial = json.dumps(block["input"])
        events += [
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {**block, "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": partial},
            },
            {"type": "content_block_stop", "index": index},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 40},
        },
        {"type": "message_stop"},
    ]
    return Reply(chunks=_sse(events, named=True), headers={"content-type": "text/event-stream"})


_OPENAI_USAGE = {
    "prompt_tokens": 4312,
    "completion_tokens": 40,
    "total_tokens": 4352,
    "prompt_tokens_details": {"cached_tokens": 4000},
    "completion_tokens_details": {"reasoning_tokens": 5},
}


def _chat(stream: bool) -> Reply:
    """OpenAI chat: 4,312 prompt tokens (4,000 cached), 40 completion tokens (5 reasoning)."""
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps(a)},
        }
        for i, a in CALLS
    ]
    head = {"id": "chatcmpl-1", "created": 1, "model": MODEL}
    if not stream:
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        return Reply(
            body={**head, "object": "chat.completion", "choices": [choice], "usage": _OPENAI_USAGE}
        )
    chunk = {**head, "object": "chat.completion.chunk"}
    deltas = [{"role": "assistant", "tool_calls": [{"index": n, **c}]} for n, c in enumerate(calls)]
    events: list[dict[str, Any]] = [
        {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    events.append({**chunk, "choices": [], "usage": _OPENAI_USAGE})
    chunks = [*_sse(events, named=False), "data: [DONE]\n\n"]
    return Reply(chunks=chunks, headers={"content-type": "text/event-stream"})


def _responses(stream: bool) -> Reply:
    """OpenAI Responses: the same counts under ``input_tokens`` / ``*_tokens_details``."""
    output = [
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "lookup",
            "arguments": json.dumps(a),
            "status": "completed",
        }
        for i, a in CALLS
    ]
    usage = {
        "input_tokens": 4312,
        "input_tokens_details": {"cached_tokens": 4000},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 5},
        "total_tokens": 4352,
    }
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": MODEL,
        "output": output,
        "usage": usage,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    if not stream:
        return Reply(body=response)
    events = [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {**response, "status": "in_progress", "output": [], "usage": None},
        },
        {"type": "response.completed", "sequence_number": 1, "response": response},
    ]
    return Reply(chunks=_sse(events, named=True), headers={"content-type": "text/event-stream"})


@redrive.tool(read_only=True)
def lookup(order: str) -> str:
    """Look an order up."""
    return f"{order}: shipped"


def _ask(api: str, client: Any, stream: bool) -> Callable[[], None]:
    """One model call through the real SDK, wrapped (the stream read to its end)."""
    if api == "anthropic":

        def ask() -> None:
            reply = client.messages.create(
                model="claude-x",
                max_tokens=100,
                messages=[{"role": "user", "content": "where are A-1 and B-2?"}],
                stream=stream,
            )
            list(reply) if stream else None

        return ask
    if api == "chat":

        def ask() -> None:
            extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if stream else {}
            reply = client.chat.completions.create(
                model="gpt-x",
                messages=[{"role": "user", "content": "where?"}],
                stream=stream,
                **extra,
            )
            list(reply) if stream else None

        return ask

    def ask() -> None:
        reply = client.responses.create(model="gpt-x", input="where?", stream=stream)
        list(reply) if stream else None

    return ask


def _check(spans: list[ReadableSpan], api: str) -> None:
    """Usage as the conventions count it; each tool span carries its own call's id."""
    (chat,) = [s for s in spans if s.name.startswith("chat")]
    attrs = dict(chat.attributes or {})
    assert attrs[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 4312
    assert attrs[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 40
    assert attrs[gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 4000
    if api == "anthropic":
        assert attrs[gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 300
        assert gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS not in attrs
    else:
        assert attrs[gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 5
    assert attrs[gen_ai.GEN_AI_RESPONSE_MODEL] == MODEL
    tools = sorted(
        (s for s in spans if s.name == "execute_tool lookup"),
        key=lambda s: int(str((s.attributes or {})["redrive.step.seq"])),
    )
    prefix = "toolu_" if api == "anthropic" else "call_"
    # the loop ran the calls in the reverse of the response's order: B-2 first, then A-1
    assert [(s.attributes or {})[gen_ai.GEN_AI_TOOL_CALL_ID] for s in tools] == [
        prefix + "B",
        prefix + "A",
    ]
    for span in spans:
        for key in span.attributes or {}:
            assert key.startswith("redrive.") or key in PUBLISHED, key


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_usage_and_call_ids_live_exported_and_replayed(
    server: ScriptServer, api: str, stream: bool
) -> None:
    """Live spans, the after-the-fact export and the replayed spans all count cached and
    reasoning tokens as the conventions do and pair each parallel call with its own id."""
    reply = {"anthropic": _anthropic, "chat": _chat, "responses": _responses}[api](stream)
    server.add(reply)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    journal = redrive.open_journal(":memory:")
    client: Any = redrive.wrap(
        anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        if api == "anthropic"
        else openai.OpenAI(api_key="k", base_url=server.url + "/v1", max_retries=0)
    )
    ask = _ask(api, client, stream)

    def body() -> None:
        with redrive.run(journal, "r") as run:
            ask()
            for _, args in reversed(CALLS):
                lookup(**args)
            run.finish("done")

    otel.instrument(provider)
    try:
        body()
        _check(list(memory.get_finished_spans()), api)
        memory.clear()
        body()  # finished: every step handed back from the journal
        assert len(server.requests) == 1
        _check(list(memory.get_finished_spans()), api)
    finally:
        otel.uninstrument()
        client.close()
    memory.clear()
    otel.export_run(journal, "r", provider)
    _check(list(memory.get_finished_spans()), api)
    provider.shutdown()


def test_the_schema_is_one_the_conventions_package_publishes() -> None:
    """SEMCONV_VERSION names a schema of the installed opentelemetry-semantic-conventions."""
    assert f"https://opentelemetry.io/schemas/{otel.SEMCONV_VERSION}" in {s.value for s in Schemas}


_SHAPES: dict[str, Callable[[str, dict[str, Any]], dict[str, Any]]] = {
    "anthropic tool_use": lambda i, a: {"type": "tool_use", "id": i, "name": "t", "input": a},
    "openai chat": lambda i, a: {
        "id": i,
        "type": "function",
        "function": {"name": "t", "arguments": json.dumps(a)},
    },
    "responses": lambda i, a: {"call_id": i, "id": "fc", "name": "t", "arguments": json.dumps(a)},
    "redrive view": lambda i, a: {"id": i, "name": "t", "arguments": json.dumps(a)},
}


@given(
    shape=st.sampled_from(sorted(_SHAPES)),
    count=st.integers(1, 6),
    order=st.randoms(use_true_random=False),
)
def test_parallel_calls_of_one_tool_keep_their_ids(shape: str, count: int, order: Any) -> None:
    """Whatever order the tool steps ran in, each takes the id of the call with its arguments."""
    calls = [(f"id{n}", {"n": n, "tag": "x" * n}) for n in range(count)]
    ids = _CallIds()
    ids.model({"view": {"tool_calls": [_SHAPES[shape](i, a) for i, a in calls]}}, None)
    ran = list(calls)
    order.shuffle(ran)
    assert [ids.take("t", a) for _, a in ran] == [i for i, _ in ran]


def _text_reply(text: str) -> Reply:
    """An Anthropic message that asks for no tool."""
    body = {"id": "msg_g", "type": "message", "role": "assistant", "model": MODEL}
    content = [{"type": "text", "text": text}]
    usage = {"input_tokens": 9, "output_tokens": 1}
    return Reply(body={**body, "content": content, "stop_reason": "end_turn", "usage": usage})


def test_a_model_call_between_a_response_and_its_tools_keeps_their_ids(
    server: ScriptServer,
) -> None:
    """A guardrail call (a model step that asks for no tool) between the response and the
    parallel tool calls it asked for leaves each tool span its own call's id: live,
    exported and replayed (hermes-otel#73 and koog#801 are this kind on other tracers)."""
    server.add(_anthropic(False), _text_reply("safe"))
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    journal = redrive.open_journal(":memory:")
    client: Any = redrive.wrap(anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0))

    def body() -> None:
        with redrive.run(journal, "r") as run:
            for model in ("claude-x", "claude-guard"):
                question = [{"role": "user", "content": f"{model}: where are A-1 and B-2?"}]
                client.messages.create(model=model, max_tokens=100, messages=question)
            run.finish([lookup(**args) for _, args in reversed(CALLS)])

    def ids() -> list[Any]:
        spans = [s for s in memory.get_finished_spans() if s.name == "execute_tool lookup"]
        spans.sort(key=lambda s: int(str((s.attributes or {})["redrive.step.seq"])))
        memory.clear()
        return [(s.attributes or {}).get(gen_ai.GEN_AI_TOOL_CALL_ID) for s in spans]

    otel.instrument(provider)
    try:
        body()
        assert ids() == ["toolu_B", "toolu_A"]
        body()  # replayed
        assert ids() == ["toolu_B", "toolu_A"]
    finally:
        otel.uninstrument()
        client.close()
    otel.export_run(journal, "r", provider)
    assert ids() == ["toolu_B", "toolu_A"]
    provider.shutdown()


@given(
    count=st.integers(1, 5),
    between=st.integers(0, 3),
    order=st.randoms(use_true_random=False),
)
def test_calls_stay_paired_across_model_steps_that_ask_for_no_tool(
    count: int, between: int, order: Any
) -> None:
    """Model steps asking for no tool, between a response and its tools, change no pairing;
    after them, a tool step matching no call by its arguments takes no id."""
    calls = [(f"id{n}", {"n": n}) for n in range(count)]
    ids = _CallIds()
    ids.model(
        {"view": {"tool_calls": [_SHAPES["anthropic tool_use"](i, a) for i, a in calls]}}, None
    )
    for _ in range(between):
        ids.model({"view": {"text": "fine"}}, None)
    ran = list(calls)
    order.shuffle(ran)
    taken = [ids.take("t", a) for _, a in ran[:-1]]
    assert taken == [i for i, _ in ran[:-1]]
    last_id, _ = ran[-1]
    expected = last_id if between == 0 else None  # rewritten arguments: by position only
    assert ids.take("t", {"rewritten": True}) == expected
