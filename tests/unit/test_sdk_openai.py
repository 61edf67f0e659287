"""redrive.wrap on the real OpenAI SDK, driven against a local server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import openai
import pytest

import redrive
from redrive.recorders.cassettes import import_cassette
from redrive.storage import Journal
from tests.sdkserver import Reply, ScriptServer, serve

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello there"},
            "finish_reason": "stop",
        }
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


def test_prompt_change_diverges_at_the_message_path(server: ScriptServer, journal: Journal) -> None:
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
                out.append(await wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES))
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
    _chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
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
        live = _stream_dump(
            wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        )
    response = next(f for f in journal.frames("r1") if f.kind == "model_response")
    stored = response.data()
    assert stored["response"]["stream"] is True
    assert stored["response"]["chunks"] == STREAM
    assert stored["view"]["tool_calls"] == [
        {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert stored["view"]["usage"]["total_tokens"] == 13
    with redrive.run(journal, "r1"):
        replayed = _stream_dump(
            wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        )
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
        with (
            redrive.run(journal, "r1"),
            wrapped.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream,
        ):
            events = [event.type for event in stream]
            results.append((events, stream.get_final_completion().model_dump()))
    assert results[0] == results[1]
    assert "tool_calls.function.arguments.done" in results[0][0]
    assert len(server.requests) == 1


def _model_frames(journal: Journal, run_id: str) -> list[Any]:
    return [f for f in journal.frames(run_id) if f.kind.startswith("model")]


class _Chunked:
    """An in-process endpoint that sends STREAM one event per read (no network coalescing)."""

    def __init__(self) -> None:
        self.requests = 0

    def _count(self) -> dict[str, str]:
        self.requests += 1
        return {"content-type": "text/event-stream"}

    def sync(self) -> openai.OpenAI:
        def handler(request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(
                200, headers=self._count(), content=iter([c.encode() for c in STREAM])
            )

        wrapped = redrive.wrap(
            openai.OpenAI(
                api_key="sk-test",
                max_retries=0,
                http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
            )
        )
        _open.append(wrapped)
        return wrapped

    def async_(self) -> openai.AsyncOpenAI:
        async def events() -> AsyncIterator[bytes]:
            for chunk in STREAM:
                yield chunk.encode()

        async def handler(request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(200, headers=self._count(), content=events())

        return redrive.wrap(
            openai.AsyncOpenAI(
                api_key="sk-test",
                max_retries=0,
                http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
            )
        )


def test_stream_closed_early_is_recorded_partial_and_replays_offline(journal: Journal) -> None:
    """A stream closed after one chunk is journaled partial; the finished run replays it offline."""
    endpoint = _Chunked()
    wrapped = endpoint.sync()
    outs = []
    for _ in range(2):
        with redrive.run(journal, "r1") as run:
            stream = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
            first = next(iter(stream)).model_dump()
            stream.close()
            run.note("after", {"seen": first["choices"][0]["delta"]})
            run.finish("done")
        outs.append(first)
    assert outs[0] == outs[1]
    assert endpoint.requests == 1
    assert run.replayed_steps >= 1 and run.live_steps == 0
    stored = next(f for f in journal.frames("r1") if f.kind == "model_response").data()
    assert stored["response"]["partial"] is True
    assert stored["response"]["chunks"] == STREAM[:1]
    assert stored["view"]["partial"] is True


def test_stream_left_by_break_inside_with_replays_the_same_chunks(journal: Journal) -> None:
    """Breaking out of a with-stream loop records what was read; replay yields the same chunks."""
    endpoint = _Chunked()
    wrapped = endpoint.sync()
    outs = []
    for _ in range(2):
        with redrive.run(journal, "r1") as run:
            seen = []
            with wrapped.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True
            ) as stream:
                for chunk in stream:
                    seen.append(chunk.model_dump())
                    if len(seen) == 3:
                        break
            run.finish(len(seen))
        outs.append(seen)
    assert outs[0] == outs[1]
    assert len(outs[0]) == 3
    assert endpoint.requests == 1
    assert run.status == "succeeded"
    stored = next(f for f in journal.frames("r1") if f.kind == "model_response").data()
    assert stored["response"]["chunks"] == STREAM[:3]


def test_replay_reading_past_a_partial_stream_diverges(journal: Journal) -> None:
    """A replayed loop that reads further than the recorded early close raises DivergenceError."""
    endpoint = _Chunked()
    wrapped = endpoint.sync()
    with redrive.run(journal, "r1") as run:
        stream = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        next(iter(stream))
        stream.close()
        run.finish("one")
    with (
        pytest.raises(redrive.DivergenceError, match="closed by the loop after 1 event"),
        redrive.run(journal, "r1", live=False),
    ):
        _stream_dump(
            wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        )
    assert endpoint.requests == 1


def test_stream_unwound_by_an_exception_is_requested_again(journal: Journal) -> None:
    """A stream closed while an exception unwinds through it is not journaled; resume asks again."""
    endpoint = _Chunked()
    wrapped = endpoint.sync()
    with (
        pytest.raises(ConnectionError),
        redrive.run(journal, "r1"),
        wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True) as s,
    ):
        next(iter(s))
        raise ConnectionError("the worker went away")
    assert _model_frames(journal, "r1") == []
    with redrive.run(journal, "r1") as run:
        resumed = _stream_dump(
            wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        )
    assert len(resumed) == 6
    assert run.live_steps == 1
    assert endpoint.requests == 2


def test_stream_cut_by_the_connection_is_requested_again(
    server: ScriptServer, journal: Journal
) -> None:
    """A stream whose connection drops mid-way is not recorded; resume fetches it whole."""
    server.add(Reply(chunks=STREAM, cut_after=3), Reply(chunks=STREAM))
    wrapped = client(server)
    with pytest.raises(ConnectionError) as info, redrive.run(journal, "r1"):
        try:
            _stream_dump(
                wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
            )
        except openai.APIConnectionError as exc:
            raise ConnectionError("stream cut") from exc
    assert getattr(info.value.__cause__.__cause__, "retryable", None) is True
    assert _model_frames(journal, "r1") == []
    with redrive.run(journal, "r1") as run:
        assert (
            len(
                _stream_dump(
                    wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
                )
            )
            == 6
        )
    assert run.live_steps == 1
    assert len(server.requests) == 2


def test_stream_without_final_event_is_requested_again(
    server: ScriptServer, journal: Journal
) -> None:
    """A stream the server ends without [DONE] is not a finished step: resume asks again.

    (Issue 16: it was recorded as finished and replayed short.) The reader gets
    an ``APIConnectionError`` marked retryable, as for a dropped connection.
    """
    server.add(Reply(chunks=STREAM[:3]), Reply(chunks=STREAM))
    wrapped = client(server)
    with pytest.raises(openai.APIConnectionError) as info, redrive.run(journal, "r1"):
        _stream_dump(
            wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        )
    assert getattr(info.value, "retryable", None) is True
    assert journal.get_run("r1").status == "paused"
    assert _model_frames(journal, "r1") == []
    outs = []
    for _ in range(2):
        with redrive.run(journal, "r1"):
            outs.append(
                _stream_dump(
                    wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
                )
            )
    assert outs[0] == outs[1]
    assert len(outs[0]) == 6
    assert len(server.requests) == 2


def test_raw_and_streaming_response_work_on_replay(server: ScriptServer, journal: Journal) -> None:
    """with_raw_response and with_streaming_response give status, headers, text and parse()."""
    server.add(Reply(body=CHAT, headers={"x-request-id": "req_9"}))
    wrapped = client(server)
    seen = []
    for _ in range(2):
        with redrive.run(journal, "r1"):
            raw = wrapped.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=MESSAGES
            )
            seen.append(
                (raw.status_code, raw.headers["x-request-id"], raw.text, raw.parse().model_dump())
            )
    assert seen[0] == seen[1]
    with (
        redrive.run(journal, "r1"),
        wrapped.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=MESSAGES
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["x-request-id"] == "req_9"
        assert b"".join(response.iter_bytes()) == seen[0][2].encode()
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (422, openai.UnprocessableEntityError),
    ],
)
def test_non_retryable_error_replays_as_the_same_error(
    server: ScriptServer, journal: Journal, status: int, error: type[Exception]
) -> None:
    """A 400/401/404/422 is journaled and replays as the same SDK error, with no request."""
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
    assert getattr(info.value, "retryable", None) is False
    assert [f.kind for f in _model_frames(journal, "r1")] == ["model_request", "model_response"]


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (408, {}),
        (409, {}),
        (429, {}),
        (500, {}),
        (503, {}),
        (529, {}),
        (400, {"x-should-retry": "true"}),
    ],
)
def test_transient_error_is_not_journaled_and_is_asked_again(
    server: ScriptServer, journal: Journal, status: int, headers: dict[str, str]
) -> None:
    """A transient error is not the step's outcome: the run stays resumable; resume asks again."""
    body = {"error": {"message": f"status {status}", "type": "x", "code": None}}
    server.add(Reply(status=status, body=body, headers=headers), Reply(body=CHAT))
    wrapped = client(server)
    with pytest.raises(openai.APIStatusError) as info, redrive.run(journal, "r1"):
        wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.status_code == status
    assert getattr(info.value, "retryable", None) is True
    assert journal.get_run("r1").status == "paused"
    assert _model_frames(journal, "r1") == []
    for _ in range(2):  # resume asks live; the finished run then replays it
        with redrive.run(journal, "r1") as run:
            out = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            run.finish(out.id)
    assert run.output == "chatcmpl-1"
    assert len(server.requests) == 2


def test_transient_error_after_sdk_retries_is_not_journaled(
    server: ScriptServer, journal: Journal
) -> None:
    """A 503 that outlasts the SDK's own retries is not journaled; the resume's answer is."""
    busy = Reply(status=503, body={"error": {"message": "busy"}}, headers={"retry-after-ms": "1"})
    server.add(busy, busy, Reply(body=CHAT))
    wrapped = client(server).with_options(max_retries=1)
    _open.append(wrapped)
    with pytest.raises(openai.InternalServerError) as info, redrive.run(journal, "r1"):
        wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert getattr(info.value, "retryable", None) is True  # also on a with_options copy
    assert len(server.requests) == 2
    assert _model_frames(journal, "r1") == []
    with redrive.run(journal, "r1") as run:
        assert wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES).id == "chatcmpl-1"
    assert run.live_steps == 1
    assert len(server.requests) == 3


def test_connection_refused_is_marked_retryable_and_not_journaled(journal: Journal) -> None:
    """A refused connection is not journaled and its transport error carries retryable=True."""
    with serve() as gone:
        url = gone.url
    wrapped = redrive.wrap(openai.OpenAI(api_key="sk-test", base_url=url + "/v1", max_retries=0))
    _open.append(wrapped)
    with (
        pytest.raises(openai.APIConnectionError) as info,
        redrive.run(journal, "r1", retryable=(openai.APIConnectionError,)),
    ):
        wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert getattr(info.value.__cause__, "retryable", None) is True
    assert _model_frames(journal, "r1") == []


@pytest.mark.parametrize("is_async", [False, True])
def test_connection_error_itself_carries_retryable(journal: Journal, is_async: bool) -> None:
    """The SDK's APIConnectionError itself (not only its cause) carries retryable=True."""
    with serve() as gone:
        url = gone.url
    options: dict[str, Any] = {"api_key": "sk-test", "base_url": url + "/v1", "max_retries": 0}

    async def acall() -> None:
        client = redrive.wrap(openai.AsyncOpenAI(**options))
        try:
            await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        finally:
            await client.close()

    with pytest.raises(openai.APIConnectionError) as info, redrive.run(journal, "r1"):
        if is_async:
            asyncio.run(acall())
        else:
            wrapped = redrive.wrap(openai.OpenAI(**options))
            _open.append(wrapped)
            wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert getattr(info.value, "retryable", None) is True
    assert journal.get_run("r1").status == "paused"


def test_live_recorded_error_carries_retryable_false(
    server: ScriptServer, journal: Journal
) -> None:
    """A live 400 is the step's outcome: its SDK error says retryable=False, as on replay."""
    server.add(Reply(status=400, body={"error": {"message": "bad", "type": "x", "code": None}}))
    with pytest.raises(openai.BadRequestError) as info, redrive.run(journal, "r1"):
        client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert getattr(info.value, "retryable", None) is False
    assert journal.get_run("r1").status == "failed"


@pytest.mark.parametrize(
    ("status", "error"), [(429, openai.RateLimitError), (500, openai.InternalServerError)]
)
def test_cassette_transient_error_replays_as_recorded(
    tmp_path: Any, status: int, error: type[Exception]
) -> None:
    """A 429/500 recorded in an imported cassette replays as that error, with retryable=False."""
    body = json.dumps({"error": {"message": f"recorded {status}", "type": "x", "code": None}})
    request = json.dumps({"model": "gpt-4o", "messages": MESSAGES})
    cassette = tmp_path / "transient.yaml"
    cassette.write_text(
        "interactions:\n"
        "- request:\n"
        "    method: POST\n"
        "    uri: https://api.openai.com/v1/chat/completions\n"
        f"    body: {json.dumps(request)}\n"
        "    headers: {content-type: [application/json]}\n"
        "  response:\n"
        f"    status: {{code: {status}, message: x}}\n"
        "    headers: {content-type: [application/json]}\n"
        f"    body: {{string: {json.dumps(body)}}}\n"
    )
    journal = redrive.open_journal(":memory:")
    run_id = import_cassette(cassette, journal)

    def offline(request: Any) -> Any:
        raise AssertionError(f"replay sent a request: {request.url}")

    wrapped = redrive.wrap(
        openai.OpenAI(
            api_key="sk-x",
            max_retries=2,
            http_client=httpx2.Client(transport=httpx2.MockTransport(offline)),
        )
    )
    _open.append(wrapped)
    with (
        pytest.raises(error, match=f"recorded {status}") as info,
        redrive.run(journal, run_id, live=False),
    ):
        wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert getattr(info.value, "retryable", None) is False


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
        assert wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES).id == "chatcmpl-1"
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
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": f"your code is {secret}"},
            }
        ],
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


def test_async_stream_closed_early_replays_the_same_chunks(journal: Journal) -> None:
    """An async stream left after two chunks is journaled partial and replays them offline."""
    endpoint = _Chunked()
    wrapped = endpoint.async_()

    async def main() -> list[list[Any]]:
        out = []
        for _ in range(2):
            async with redrive.run(journal, "r1") as run:
                seen = []
                async with await wrapped.chat.completions.create(
                    model="gpt-4o", messages=MESSAGES, stream=True
                ) as stream:
                    async for chunk in stream:
                        seen.append(chunk.model_dump())
                        if len(seen) == 2:
                            break
                run.finish(len(seen))
            out.append(seen)
        await wrapped.close()
        return out

    first, second = asyncio.run(main())
    assert first == second
    assert len(first) == 2
    assert endpoint.requests == 1
    stored = next(f for f in journal.frames("r1") if f.kind == "model_response").data()
    assert stored["response"]["partial"] is True
    assert stored["response"]["chunks"] == STREAM[:2]


def test_async_stream_unwound_by_an_exception_is_not_journaled(journal: Journal) -> None:
    """An async stream closed while an exception unwinds through it leaves the step unfinished."""
    endpoint = _Chunked()
    wrapped = endpoint.async_()

    async def main() -> None:
        try:
            async with (
                redrive.run(journal, "r1"),
                await wrapped.chat.completions.create(
                    model="gpt-4o", messages=MESSAGES, stream=True
                ) as stream,
            ):
                async for _ in stream:
                    raise ConnectionError("the worker went away")
        finally:
            await wrapped.close()

    with pytest.raises(ConnectionError):
        asyncio.run(main())
    assert endpoint.requests == 1
    assert _model_frames(journal, "r1") == []


def test_stream_abandoned_without_close_is_journaled_before_the_next_step(
    journal: Journal,
) -> None:
    """A stream left open by `break` (no close, no with) is journaled before the next step."""
    endpoint = _Chunked()
    wrapped = endpoint.sync()
    sent: list[str] = []

    @redrive.tool
    def send_email(body: str) -> str:
        sent.append(body)
        return "sent"

    outs = []
    for _ in range(2):
        with redrive.run(journal, "abandon") as run:
            first = ""
            stream = wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
            for chunk in stream:
                first = json.dumps(chunk.model_dump()["choices"])
                break  # read enough; the stream object stays open
            run.finish(send_email(first))
        outs.append(run.output)
        del stream
    assert outs[0] == outs[1] == "sent" and len(sent) == 1
    assert endpoint.requests == 1
    kinds = [f.kind for f in journal.frames("abandon")]
    assert kinds.index("model_response") < kinds.index("tool_start")
