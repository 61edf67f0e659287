"""redrive.wrap on the real OpenAI SDK, driven against a local server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import redrive
from redrive.storage import Journal
from tests.sdkserver import Reply, ScriptServer, serve

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hello there"},
         "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


@pytest.fixture
def journal() -> Journal:
    return redrive.open_journal(":memory:")


_open: list[Any] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def client(server: ScriptServer, **options: Any) -> openai.OpenAI:
    wrapped = redrive.wrap(
        openai.OpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0, **options)
    )
    _open.append(wrapped)
    return wrapped


def test_chat_records_then_replays_without_a_call(server: ScriptServer, journal: Journal) -> None:
    """A finished run replays the chat completion from the journal and sends nothing."""
    server.add(Reply(body=CHAT, headers={"x-request-id": "req_1"}))
    wrapped = client(server)
    with redrive.run(journal, "r1") as run:
        live = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert run.live_steps == 1
    with redrive.run(journal, "r1") as run:
        replayed = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert len(server.requests) == 1
    assert run.replayed_steps == 1
    assert replayed == live
    assert replayed.choices[0].message.content == "hello there"
    assert replayed._request_id == "req_1"


def test_outside_a_run_the_wrapped_client_passes_through(
    server: ScriptServer, journal: Journal
) -> None:
    """Without a run every call goes to the server and nothing is journaled."""
    server.add(Reply(body=CHAT), Reply(body=CHAT))
    wrapped = client(server)
    wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert len(server.requests) == 2
    assert journal.runs() == []


def test_step_name_and_request_leave_transport_noise_out(
    server: ScriptServer, journal: Journal
) -> None:
    """The model_request frame holds method, path, query and parsed body, and no header."""
    server.add(Reply(body=CHAT))
    with redrive.run(journal, "r1"):
        client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    request = next(f for f in journal.frames("r1") if f.kind == "model_request")
    assert request.name == "openai:POST /chat/completions"
    assert request.data()["args"] == {
        "method": "POST",
        "path": "/chat/completions",
        "query": {},
        "body": {"model": "gpt-4o", "messages": MESSAGES},
    }
    view = request.data()["view"]
    assert view["provider"] == "openai"
    assert view["usage"]["total_tokens"] == 5


def test_prompt_change_diverges_at_the_message_path(
    server: ScriptServer, journal: Journal
) -> None:
    """A one-character prompt change raises DivergenceError with the message's JSON path."""
    server.add(Reply(body=CHAT))
    wrapped = client(server)
    with redrive.run(journal, "r1"):
        wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    with pytest.raises(redrive.DivergenceError) as info, redrive.run(journal, "r1"):
        wrapped.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi!"}]
        )
    assert "messages[0].content" in str(info.value)
    assert len(server.requests) == 1


def test_gzip_response_is_stored_decoded(server: ScriptServer, journal: Journal) -> None:
    """A gzip body is journaled decoded, without content-encoding, and replays intact."""
    server.add(Reply(body=CHAT, gzip=True))
    wrapped = client(server)
    with redrive.run(journal, "r1"):
        live = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    response = next(f for f in journal.frames("r1") if f.kind == "model_response")
    stored = response.data()["response"]
    assert stored["body"].startswith("{")
    assert "content-encoding" not in dict(stored["headers"])
    with redrive.run(journal, "r1"):
        assert wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES) == live


def test_async_client_records_then_replays(server: ScriptServer, journal: Journal) -> None:
    """The async client records live and then replays from the journal."""
    server.add(Reply(body=CHAT))
    wrapped = redrive.wrap(
        openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
    )

    async def main() -> list[Any]:
        out = []
        for _ in range(2):
            async with redrive.run(journal, "r1"):
                out.append(await wrapped.chat.completions.create(model="gpt-4o",
                                                                 messages=MESSAGES))
        await wrapped.close()
        return out

    first, second = asyncio.run(main())
    assert first == second
    assert len(server.requests) == 1


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> str:
    data = {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        data = {**data, "choices": [], "usage": usage}
    return f"data: {json.dumps(data)}\n\n"


STREAM = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]}),
    _chunk({}, finish="tool_calls"),
    _chunk({}, usage={"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}),
    "data: [DONE]\n\n",
]


def _stream_dump(stream: Any) -> list[Any]:
    return [chunk.model_dump() for chunk in stream]


def test_stream_true_records_chunks_and_replays_them_in_order(
    server: ScriptServer, journal: Journal
) -> None:
    """stream=True is journaled as its SSE events and replays the same chunk sequence."""
    server.add(Reply(chunks=STREAM))
    wrapped = client(server)
    with redrive.run(journal, "r1"):
        live = _stream_dump(wrapped.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True))
    response = next(f for f in journal.frames("r1") if f.kind == "model_response")
    stored = response.data()
    assert stored["response"]["stream"] is True
    assert stored["response"]["chunks"] == STREAM
    assert stored["view"]["tool_calls"] == [
        {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert stored["view"]["usage"]["total_tokens"] == 13
    with redrive.run(journal, "r1"):
        replayed = _stream_dump(wrapped.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True))
    assert replayed == live
    assert len(live) == 6
    assert len(server.requests) == 1


def test_stream_helper_replays_its_events_and_final_completion(
    server: ScriptServer, journal: Journal
) -> None:
    """client.chat.completions.stream() gives the same events and final completion on replay."""
    server.add(Reply(chunks=STREAM))
    wrapped = client(server)
    results = []
    for _ in range(2):
        with redrive.run(journal, "r1"), wrapped.chat.completions.stream(
            model="gpt-4o", messages=MESSAGES
        ) as stream:
            events = [event.type for event in stream]
            results.append((events, stream.get_final_completion().model_dump()))
    assert results[0] == results[1]
    assert "tool_calls.function.arguments.done" in results[0][0]
    assert len(server.requests) == 1


def test_stream_closed_early_is_not_a_finished_step(
    server: ScriptServer, journal: Journal
) -> None:
    """A stream the caller closes before its end is requested again, live, on resume."""
    server.add(Reply(chunks=STREAM), Reply(chunks=STREAM))
    wrapped = client(server)
    with pytest.raises(ConnectionError), redrive.run(journal, "r1"):
        stream = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        next(iter(stream))
        stream.close()
        raise ConnectionError("the worker went away")
    assert not [f for f in journal.frames("r1") if f.kind.startswith("model")]
    with redrive.run(journal, "r1"):
        resumed = _stream_dump(wrapped.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True))
    assert len(resumed) == 6
    assert len(server.requests) == 2


def test_stream_cut_by_the_connection_is_requested_again(
    server: ScriptServer, journal: Journal
) -> None:
    """A stream whose connection drops mid-way is not recorded; resume fetches it whole."""
    server.add(Reply(chunks=STREAM, cut_after=3), Reply(chunks=STREAM))
    wrapped = client(server)
    with pytest.raises(ConnectionError), redrive.run(journal, "r1"):
        try:
            _stream_dump(wrapped.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True))
        except openai.APIConnectionError as exc:
            raise ConnectionError("stream cut") from exc
    with redrive.run(journal, "r1") as run:
        assert len(_stream_dump(wrapped.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True))) == 6
    assert run.live_steps == 1
    assert len(server.requests) == 2


def test_stream_without_final_event_replays_as_recorded(
    server: ScriptServer, journal: Journal
) -> None:
    """A stream that ended upstream without [DONE] is recorded and replays exactly."""
    server.add(Reply(chunks=STREAM[:3]))
    wrapped = client(server)
    outs = []
    for _ in range(2):
        with redrive.run(journal, "r1"):
            outs.append(_stream_dump(wrapped.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True)))
    assert outs[0] == outs[1]
    assert len(outs[0]) == 3
    assert len(server.requests) == 1


def test_raw_and_streaming_response_work_on_replay(
    server: ScriptServer, journal: Journal
) -> None:
    """with_raw_response and with_streaming_response give status, headers, text and parse()."""
    server.add(Reply(body=CHAT, headers={"x-request-id": "req_9"}))
    wrapped = client(server)
    seen = []
    for _ in range(2):
        with redrive.run(journal, "r1"):
            raw = wrapped.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=MESSAGES
            )
            seen.append((raw.status_code, raw.headers["x-request-id"], raw.text,
                         raw.parse().model_dump()))
    assert seen[0] == seen[1]
    with redrive.run(journal, "r1"), wrapped.chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MESSAGES
    ) as response:
        assert response.status_code == 200
        assert response.headers["x-request-id"] == "req_9"
        assert b"".join(response.iter_bytes()) == seen[0][2].encode()
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, openai.AuthenticationError), (429, openai.RateLimitError),
     (500, openai.InternalServerError)],
)
def test_error_status_replays_as_the_same_error(
    server: ScriptServer, journal: Journal, status: int, error: type[Exception]
) -> None:
    """A recorded 401/429/500 replays as the SDK's error for that status, with no request."""
    body = {"error": {"message": f"status {status}", "type": "x", "code": None}}
    server.add(Reply(status=status, body=body))
    wrapped = client(server)
    messages = []
    for _ in range(2):
        with pytest.raises(error) as info, redrive.run(journal, "r1", retryable=(error,)):
            wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert len(server.requests) == 1


def test_sdk_retries_are_not_steps(server: ScriptServer, journal: Journal) -> None:
    """A 500 the SDK retried is not journaled; the step is the final 200 the caller got."""
    server.add(
        Reply(status=500, body={"error": {"message": "boom"}}, headers={"retry-after-ms": "1"}),
        Reply(body=CHAT),
    )
    wrapped = client(server).with_options(max_retries=2)
    _open.append(wrapped)
    with redrive.run(journal, "r1"):
        wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    responses = [f.data() for f in journal.frames("r1") if f.kind == "model_response"]
    assert [r["response"]["status"] for r in responses] == [200]
    assert len(server.requests) == 2
    with redrive.run(journal, "r1"):
        assert wrapped.chat.completions.create(
            model="gpt-4o", messages=MESSAGES
        ).id == "chatcmpl-1"
    assert len(server.requests) == 2


def test_parallel_async_calls_replay_by_content(server: ScriptServer, journal: Journal) -> None:
    """Calls issued concurrently from several tasks replay each its own response."""
    for i in range(3):
        server.add(Reply(body={**CHAT, "id": f"chatcmpl-{i}"}))
    wrapped = redrive.wrap(
        openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
    )

    async def one(i: int) -> tuple[str, str]:
        out = await wrapped.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": f"q{i}"}]
        )
        return (f"q{i}", out.id)

    async def main() -> list[dict[str, str]]:
        results = []
        for _ in range(2):
            async with redrive.run(journal, "r1"):
                results.append(dict(await asyncio.gather(*(one(i) for i in range(3)))))
        await wrapped.close()
        return results

    first, second = asyncio.run(main())
    assert first == second
    assert sorted(first.values()) == ["chatcmpl-0", "chatcmpl-1", "chatcmpl-2"]
    assert len(server.requests) == 3


def test_async_stream_records_then_replays(server: ScriptServer, journal: Journal) -> None:
    """An async stream=True call replays the same chunks it recorded."""
    server.add(Reply(chunks=STREAM))
    wrapped = redrive.wrap(
        openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
    )

    async def main() -> list[list[Any]]:
        out = []
        for _ in range(2):
            async with redrive.run(journal, "r1"):
                stream = await wrapped.chat.completions.create(
                    model="gpt-4o", messages=MESSAGES, stream=True
                )
                out.append([chunk.model_dump() async for chunk in stream])
        await wrapped.close()
        return out

    first, second = asyncio.run(main())
    assert first == second
    assert len(first) == 6
    assert len(server.requests) == 1


def test_redact_applies_to_json_response_bodies(server: ScriptServer, tmp_path: Any) -> None:
    """redact= patterns under $.body also scrub JSON response bodies before they are journaled."""
    secret = "RESPONSE-SECRET-0042"
    leaky = {
        **CHAT,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": f"your code is {secret}"}}],
    }
    server.add(Reply(body=leaky))
    path = tmp_path / "runs.duckdb"
    journal = redrive.open_journal(str(path))
    wrapped = client(server)
    pattern = ("$.body.choices[*].message.content",)
    with redrive.run(journal, "red", redact=pattern):
        live = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert secret in (live.choices[0].message.content or "")
    with redrive.run(journal, "red", redact=pattern):
        replayed = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert replayed.choices[0].message.content == "[REDACTED]"
    journal.close()
    for file in tmp_path.iterdir():
        assert secret.encode() not in file.read_bytes(), file
