"""A wrapped client whose transport is another package's class records and replays.

Found with BerriAI/litellm#8961's loop (tests/integrations/test_signed_peer_reports.py):
litellm calls Anthropic through an ``httpx.AsyncClient`` whose transport is
litellm's own aiohttp transport (``litellm.llms.custom_httpx.aiohttp_transport``,
an ``httpx.AsyncBaseTransport`` subclass). The recording transport took the
httpx module to build responses from out of the inner transport's *package*
(``litellm``), so every exchange failed with ``module 'litellm' has no
attribute 'ByteStream'``. The same held for any transport class defined
outside httpx: a user's subclass of ``MockTransport`` or ``HTTPTransport``, an
aiohttp bridge. The module is now the client's (or, for a bare transport, the
httpx its class derives from).

Here the transport classes are defined in this module (package ``tests``),
for httpx and httpx2, sync and async, JSON and server-sent events, through
``redrive.wrap`` of an httpx client and of an OpenAI SDK client handed one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import openai
import pytest

import redrive
from redrive.recorders._transports import _module_of

CHAT = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}
EVENTS = 'data: {"n": 1}\n\ndata: {"n": 2}\n\ndata: [DONE]\n\n'


class HttpxLocal(httpx.MockTransport):
    """A transport of another package, built on httpx."""


class Httpx2Local(httpx2.MockTransport):
    """A transport of another package, built on httpx2."""


TRANSPORTS: dict[str, tuple[Any, type[Any]]] = {
    "httpx": (httpx, HttpxLocal),
    "httpx2": (httpx2, Httpx2Local),
}


def _answer(module: Any, sent: list[str]) -> Any:
    def answer(request: Any) -> Any:
        sent.append(request.url.path)
        if json.loads(request.content).get("stream"):
            headers = {"content-type": "text/event-stream"}
            return module.Response(200, headers=headers, content=EVENTS.encode())
        return module.Response(200, json=CHAT)

    return answer


def test_the_httpx_module_of_a_transport_of_another_package_is_the_one_it_derives_from() -> None:
    assert _module_of(HttpxLocal(lambda r: None)) is httpx
    assert _module_of(Httpx2Local(lambda r: None)) is httpx2


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("name", sorted(TRANSPORTS))
def test_an_httpx_client_on_a_transport_of_another_package_records_and_replays(
    name: str, face: str, stream: bool
) -> None:
    module, local = TRANSPORTS[name]
    sent: list[str] = []
    journal = redrive.open_journal(":memory:")
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": stream}

    def client() -> Any:
        kind = module.Client if face == "sync" else module.AsyncClient
        plain = kind(transport=local(_answer(module, sent)), base_url="http://h/v1")
        return redrive.wrap(plain, provider="openai")

    def exchange(**options: Any) -> bytes:
        if face == "sync":
            with redrive.run(journal, "t", **options) as run:
                return bytes(run.finish(client().post("/chat/completions", json=body).read()))

        async def go() -> bytes:
            async with redrive.run(journal, "t", **options) as run:
                response = await client().post("/chat/completions", json=body)
                return bytes(run.finish(await response.aread()))

        return asyncio.run(go())

    live = exchange()
    assert exchange(live=False) == live
    assert sent == ["/v1/chat/completions"]
    assert (live == EVENTS.encode()) if stream else (json.loads(live) == CHAT)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_an_sdk_client_handed_a_transport_of_another_package_records_and_replays(
    face: str,
) -> None:
    sent: list[str] = []
    journal = redrive.open_journal(":memory:")
    answer = _answer(httpx2, sent)
    asked = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}

    def ask(**options: Any) -> str | None:
        if face == "sync":
            http = httpx2.Client(transport=Httpx2Local(answer))
            client = redrive.wrap(
                openai.OpenAI(base_url="http://h/v1", api_key="k", http_client=http)
            )
            with redrive.run(journal, "s", **options) as run:
                reply = client.chat.completions.create(**asked)  # type: ignore[call-overload]
                return run.finish(reply.choices[0].message.content)

        async def go() -> str | None:
            http = httpx2.AsyncClient(transport=Httpx2Local(answer))
            client = redrive.wrap(
                openai.AsyncOpenAI(base_url="http://h/v1", api_key="k", http_client=http)
            )
            async with redrive.run(journal, "s", **options) as run:
                reply = await client.chat.completions.create(**asked)  # type: ignore[call-overload]
                return run.finish(reply.choices[0].message.content)

        return asyncio.run(go())

    assert ask() == "hi"
    assert ask(live=False) == "hi"
    assert sent == ["/v1/chat/completions"]
