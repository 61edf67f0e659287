"""redrive.wrap on the real OpenAI SDK, driven against a local server on 127.0.0.1."""

from __future__ import annotations

import asyncio
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
