"""redrive.wrap on the real Anthropic SDK, driven against a local server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

import redrive
from redrive.storage import Journal
from tests.sdkserver import Reply, ScriptServer, serve

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test-model",
    "content": [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 7},
}
MESSAGES = [{"role": "user", "content": "weather in Oslo?"}]


def _event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


STREAM = [
    _event(
        "message_start",
        message={
            **MESSAGE,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 12, "output_tokens": 1},
        },
    ),
    _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Check"}),
    _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "ing."}),
    _event("content_block_stop", index=0),
    _event(
        "content_block_start",
        index=1,
        content_block={"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
    ),
    _event(
        "content_block_delta",
        index=1,
        delta={"type": "input_json_delta", "partial_json": '{"city": '},
    ),
    _event(
        "content_block_delta",
        index=1,
        delta={"type": "input_json_delta", "partial_json": '"Oslo"}'},
    ),
    _event("content_block_stop", index=1),
    _event(
        "message_delta",
        delta={"stop_reason": "tool_use", "stop_sequence": None},
        usage={"output_tokens": 7},
    ),
    _event("message_stop"),
]


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


@pytest.fixture
def journal() -> Journal:
    return redrive.open_journal(":memory:")


@pytest.fixture
def wrapped(server: ScriptServer) -> Iterator[anthropic.Anthropic]:
    client = redrive.wrap(
        anthropic.Anthropic(api_key="sk-ant-test", base_url=server.url, max_retries=0)
    )
    yield client
    client.close()


def test_messages_create_records_then_replays(
    server: ScriptServer, journal: Journal, wrapped: anthropic.Anthropic
) -> None:
    """messages.create replays its recorded message, and the view names the tool call."""
    server.add(Reply(body=MESSAGE))
    outs = []
    for _ in range(2):
        with redrive.run(journal, "r1"):
            outs.append(
                wrapped.messages.create(
                    model="claude-test-model", max_tokens=100, messages=MESSAGES
                )
            )
    assert outs[0] == outs[1]
    assert len(server.requests) == 1
    frame = next(f for f in journal.frames("r1") if f.kind == "model_response")
    assert frame.name == "anthropic:POST /v1/messages"
    view = frame.data()["view"]
    assert view["tool_calls"] == [
        {"id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}
    ]
    assert view["usage"] == {"input_tokens": 12, "output_tokens": 7}


def test_messages_stream_helper_replays_events_and_final_message(
    server: ScriptServer, journal: Journal, wrapped: anthropic.Anthropic
) -> None:
    """messages.stream() replays the same event sequence and final message it recorded."""
    server.add(Reply(chunks=STREAM))
    results = []
    for _ in range(2):
        with (
            redrive.run(journal, "r1"),
            wrapped.messages.stream(
                model="claude-test-model", max_tokens=100, messages=MESSAGES
            ) as stream,
        ):
            events = [event.model_dump() for event in stream]
            results.append((events, stream.get_final_message().model_dump()))
    assert results[0] == results[1]
    assert results[0][1]["content"][1]["input"] == {"city": "Oslo"}
    assert len(server.requests) == 1
    frame = next(f for f in journal.frames("r1") if f.kind == "model_response")
    assert frame.data()["view"]["tool_calls"][0]["input"] == {"city": "Oslo"}
    assert frame.data()["response"]["chunks"] == STREAM


def test_async_stream_true_records_then_replays(server: ScriptServer, journal: Journal) -> None:
    """An async create(stream=True) replays the recorded events in order."""
    server.add(Reply(chunks=STREAM))
    client = redrive.wrap(
        anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=server.url, max_retries=0)
    )

    async def main() -> list[list[Any]]:
        out = []
        for _ in range(2):
            async with redrive.run(journal, "r1"):
                stream = await client.messages.create(
                    model="claude-test-model", max_tokens=100, messages=MESSAGES, stream=True
                )
                out.append([event.model_dump() async for event in stream])
        await client.close()
        return out

    first, second = asyncio.run(main())
    assert first == second
    assert len(first) == len(STREAM)
    assert len(server.requests) == 1


def test_401_replays_as_authentication_error(
    server: ScriptServer, journal: Journal, wrapped: anthropic.Anthropic
) -> None:
    """A recorded 401 replays as anthropic.AuthenticationError without a request."""
    body = {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    server.add(Reply(status=401, body=body))
    for _ in range(2):
        with (
            pytest.raises(anthropic.AuthenticationError),
            redrive.run(journal, "r1", retryable=(anthropic.AuthenticationError,)),
        ):
            wrapped.messages.create(model="claude-test-model", max_tokens=10, messages=MESSAGES)
    assert len(server.requests) == 1


def test_overloaded_529_is_not_journaled_and_is_asked_again(
    server: ScriptServer, journal: Journal, wrapped: anthropic.Anthropic
) -> None:
    """A 529 overloaded error is not the step's outcome; resume asks live, then it replays."""
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.add(Reply(status=529, body=body), Reply(body=MESSAGE))
    with pytest.raises(anthropic.APIStatusError) as info, redrive.run(journal, "r1"):
        wrapped.messages.create(model="claude-test-model", max_tokens=10, messages=MESSAGES)
    assert getattr(info.value, "retryable", None) is True
    assert journal.get_run("r1").status == "paused"
    assert not [f for f in journal.frames("r1") if f.kind.startswith("model")]
    for _ in range(2):
        with redrive.run(journal, "r1"):
            out = wrapped.messages.create(
                model="claude-test-model", max_tokens=10, messages=MESSAGES
            )
    assert out.id == "msg_1"
    assert len(server.requests) == 2


def test_stream_helper_left_early_replays_the_same_events(journal: Journal) -> None:
    """Leaving messages.stream() after the first text delta records it partial; replay matches."""
    requests = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(request)  # one event per read: no network coalescing
        return httpx2.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=iter([event.encode() for event in STREAM]),
        )

    wrapped = redrive.wrap(
        anthropic.Anthropic(
            api_key="sk-ant-test",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        )
    )
    results = []
    for _ in range(2):
        with redrive.run(journal, "r1") as run:
            with wrapped.messages.stream(
                model="claude-test-model", max_tokens=100, messages=MESSAGES
            ) as stream:
                events = []
                for event in stream:
                    events.append(event.model_dump())
                    if event.type == "text":
                        break
            run.finish(len(events))
        results.append(events)
    assert results[0] == results[1]
    assert results[0][-1]["type"] == "text"
    assert len(requests) == 1
    wrapped.close()
    frame = next(f for f in journal.frames("r1") if f.kind == "model_response")
    assert frame.data()["response"]["partial"] is True
    assert frame.data()["response"]["chunks"] == STREAM[:3]
