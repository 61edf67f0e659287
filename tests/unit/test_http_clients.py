"""``redrive.wrap`` of any httpx client, and of SDK clients pointed at OpenAI-compatible servers.

Each test records real HTTP traffic to a local scripted server
(:mod:`tests.sdkserver`), then replays the finished run: the replay gets the
same answers and the server receives no request at all.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import openai
import pytest

import redrive
from redrive.frames import Kind
from tests.sdkserver import Reply, serve
from tests.unit.test_sdk_openai import CHAT, MESSAGES

SSE = [
    'data: {"delta": "Hel"}\n\n',
    'data: {"delta": "lo"}\n\n',
    "data: [DONE]\n\n",
]


def _script() -> list[Reply]:
    return [
        Reply(body={"city": "Oslo", "temp_c": -3.5}, gzip=True),
        Reply(body={"hits": [1, 2, 3]}),
        Reply(chunks=SSE),
        Reply(status=404, body={"error": "no such city"}),
    ]


def _calls_sync(client: httpx2.Client) -> list[Any]:
    out: list[Any] = []
    response = client.get("/forecast", params={"city": "Oslo", "api_key": "SECRET-KEY-1"})
    out.append([response.status_code, response.json()])
    response = client.post("/search", json={"q": "weather", "limit": 3})
    out.append([response.status_code, response.json()])
    with client.stream("GET", "/events") as stream:
        out.append([stream.status_code, list(stream.iter_lines())])
    response = client.get("/forecast", params={"city": "Atlantis"})
    out.append([response.status_code, response.json()])
    return out


async def _calls_async(client: httpx2.AsyncClient) -> list[Any]:
    out: list[Any] = []
    response = await client.get("/forecast", params={"city": "Oslo", "api_key": "SECRET-KEY-1"})
    out.append([response.status_code, response.json()])
    response = await client.post("/search", json={"q": "weather", "limit": 3})
    out.append([response.status_code, response.json()])
    async with client.stream("GET", "/events") as stream:
        out.append([stream.status_code, [line async for line in stream.aiter_lines()]])
    response = await client.get("/forecast", params={"city": "Atlantis"})
    out.append([response.status_code, response.json()])
    return out


def _drive(face: str, base_url: str, journal: Any, run_id: str) -> list[Any]:
    """Run the calls through a wrapped httpx client of ``face`` inside ``run_id``."""
    if face == "sync":
        with httpx2.Client(base_url=base_url) as client:
            wrapped = redrive.wrap(client, provider="weather")
            assert wrapped is client
            with redrive.run(journal, run_id):
                return _calls_sync(wrapped)

    async def main() -> list[Any]:
        async with httpx2.AsyncClient(base_url=base_url) as client:
            wrapped = redrive.wrap(client, provider="weather")
            async with redrive.run(journal, run_id):
                return await _calls_async(wrapped)

    return asyncio.run(main())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_any_httpx_client_records_and_replays_without_requests(face: str) -> None:
    """A plain JSON API client: JSON, gzip, a stream and an error replay with zero requests."""
    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(*_script())
        recorded = _drive(face, server.url + "/api/", journal, "weather:1")
        sent = len(server.requests)
        replayed = _drive(face, server.url + "/api/", journal, "weather:1")
        assert len(server.requests) == sent == 4
    assert replayed == recorded
    assert recorded[0] == [200, {"city": "Oslo", "temp_c": -3.5}]
    assert recorded[2] == [
        200,
        ['data: {"delta": "Hel"}', "", 'data: {"delta": "lo"}', "", "data: [DONE]", ""],
    ]
    assert recorded[3] == [404, {"error": "no such city"}]
    names = [f.name for f in journal.frames("weather:1") if f.kind == Kind.MODEL_REQUEST]
    assert names == [
        "weather:GET /forecast",
        "weather:POST /search",
        "weather:GET /events",
        "weather:GET /forecast",
    ]
    written = b"".join(f.payload for f in journal.frames("weather:1"))
    assert b"SECRET-KEY-1" not in written


def test_wrapped_httpx_client_outside_a_run_is_a_plain_client() -> None:
    """Outside any run the wrapped client sends as before; wrapping twice changes nothing."""
    with serve() as server, httpx2.Client(base_url=server.url) as client:
        server.add(Reply(body={"ok": True}))
        wrapped = redrive.wrap(redrive.wrap(client))
        transport = wrapped._transport
        assert redrive.wrap(wrapped)._transport is transport
        assert wrapped.get("/ping").json() == {"ok": True}
        assert len(server.requests) == 1


def test_wrap_refuses_what_is_no_client() -> None:
    """Something that is neither an SDK client nor an httpx client is a TypeError."""
    with pytest.raises(TypeError, match="not an OpenAI or Anthropic SDK client"):
        redrive.wrap(object())


def _chunk(content: str | None, finish: str | None = None) -> str:
    """One Chat Completions stream event, shaped from the test_sdk_openai chat body."""
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    data = {**CHAT, "object": "chat.completion.chunk", "choices": [choice]}
    del data["usage"]
    return f"data: {json.dumps(data)}\n\n"


@pytest.mark.parametrize("face", ["sync", "async"])
def test_openai_sdk_against_a_local_openai_compatible_server(face: str) -> None:
    """``redrive.wrap(openai.OpenAI(base_url=<local>/v1))`` (vLLM/Ollama-shaped) replays offline."""
    messages = MESSAGES

    def script() -> list[Reply]:
        chunks = [_chunk("Hi"), _chunk(" there"), _chunk(None, "stop"), "data: [DONE]\n\n"]
        return [Reply(body=CHAT), Reply(chunks=chunks)]

    def sync(base_url: str, journal: Any) -> list[Any]:
        client = redrive.wrap(openai.OpenAI(api_key="ollama", base_url=base_url, max_retries=0))
        with redrive.run(journal, "local:1"):
            done = client.chat.completions.create(model="gpt-4o", messages=messages)
            stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
            parts = [c.choices[0].delta.content for c in stream]
        client.close()
        return [done.model_dump(), parts]

    async def asynchronous(base_url: str, journal: Any) -> list[Any]:
        client = redrive.wrap(
            openai.AsyncOpenAI(api_key="ollama", base_url=base_url, max_retries=0)
        )
        async with redrive.run(journal, "local:1"):
            done = await client.chat.completions.create(model="gpt-4o", messages=messages)
            stream = await client.chat.completions.create(
                model="gpt-4o", messages=messages, stream=True
            )
            parts = [c.choices[0].delta.content async for c in stream]
        await client.close()
        return [done.model_dump(), parts]

    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(*script())
        base_url = server.url + "/v1"
        if face == "sync":
            recorded, replayed = sync(base_url, journal), sync(base_url, journal)
        else:
            recorded = asyncio.run(asynchronous(base_url, journal))
            replayed = asyncio.run(asynchronous(base_url, journal))
        assert len(server.requests) == 2
    assert replayed == recorded
    assert recorded[0]["choices"][0]["message"]["content"] == "hello there"
    assert recorded[1] == ["Hi", " there", None]
    names = [f.name for f in journal.frames("local:1") if f.kind == Kind.MODEL_REQUEST]
    assert names == ["openai:POST /chat/completions"] * 2
