"""Every response API reads recorded and replayed responses as it reads live ones (issue 27.5).

The matrix: {sync, async} x {an httpx client, the OpenAI and Anthropic SDKs'
``with_raw_response`` and ``with_streaming_response``} x {JSON, SSE, gzip JSON}
x {read, iter_raw, iter_bytes, iter_text, iter_lines} x {recording, replay}.
Each cell makes the same calls on three responses to the same scripted
server reply (:mod:`tests.sdkserver`): the live one of an unwrapped client,
the one a wrapped client hands back while recording, and the one it replays;
the three results must be equal. A result is what each call returned (or the
exception type it raised: ``StreamConsumed`` after the SDK read the body is
httpx's own answer, live too), then what a ``read()`` after it gives, and the
response's ``content-encoding``. The encoded bytes of ``iter_raw`` are compared
as what they decode to: the server stamps its gzip with the time; redrive's
replay encodes the stored (decoded) body again.

One test item per (face, client, body) drives the five APIs as five steps of
one run (recorded, then replayed), so the matrix costs 30 items.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.storage import Journal
from tests.sdkserver import Reply, ScriptServer, serve

METHODS = ["read", "iter_raw", "iter_bytes", "iter_text", "iter_lines"]
CLIENTS = ["httpx", "openai-raw", "openai-streaming", "anthropic-raw", "anthropic-streaming"]
BODIES = ["json", "sse", "gzip"]

CHAT = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "ok\nline two"},
            "finish_reason": "stop",
        }
    ],
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "ok\nline two"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 2},
}
CHAT_SSE = [
    'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o",'
    '"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}\n\n',
    'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o",'
    '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    "data: [DONE]\n\n",
]


def _event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


MESSAGE_SSE = [
    _event("message_start", message={**MESSAGE, "content": [], "stop_reason": None}),
    _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "ok"}),
    _event("content_block_stop", index=0),
    _event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
    _event("message_stop"),
]


def _reply(client: str, body: str) -> Reply:
    anthropic_api = client.startswith("anthropic")
    if body == "sse":
        return Reply(chunks=MESSAGE_SSE if anthropic_api else CHAT_SSE)
    return Reply(body=MESSAGE if anthropic_api else CHAT, gzip=body == "gzip")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


def _is_gzip(data: bytes) -> bool:
    return data[:2] == b"\x1f\x8b"


def _result(method: str, value: Any) -> Any:
    """A call's result, comparable across live, recorded and replayed responses."""
    if method == "iter_lines":
        return value
    if method == "iter_text":
        return "".join(value)
    if isinstance(value, list):
        value = b"".join(value)
    if _is_gzip(value):
        try:
            return ("gzip", gzip.decompress(value))
        except (OSError, EOFError, zlib.error):  # a body that only starts like gzip
            return value
    return value


# -- opening a response, one way per client ------------------------------------------------


def _client(face: str, kind: str, url: str) -> Any:
    """An unwrapped client of ``kind`` for ``face`` against the server at ``url``."""
    sync = face == "sync"
    if kind == "httpx":
        return (httpx.Client if sync else httpx.AsyncClient)(base_url=url + "/v1")
    if kind.startswith("openai"):
        sdk: Any = openai.OpenAI if sync else openai.AsyncOpenAI
        return sdk(api_key="sk-test", base_url=url + "/v1", max_retries=0)
    sdk = anthropic.Anthropic if sync else anthropic.AsyncAnthropic
    return sdk(api_key="sk-ant-test", base_url=url, max_retries=0)


def _call(kind: str, sdk: Any, ask: str, stream: bool) -> Any:
    """The context manager (streaming) or call (raw) that opens the response of one request."""
    if kind == "httpx":
        body = {"q": ask, "stream": stream}
        return sdk.stream("POST", "/chat/completions", json=body)
    if kind.startswith("openai"):
        api = sdk.chat.completions
        args: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": ask}]}
    else:
        api = sdk.messages
        args = {
            "model": "claude-test",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": ask}],
        }
    if stream:
        args["stream"] = True
    wrapper = api.with_raw_response if kind.endswith("raw") else api.with_streaming_response
    return wrapper.create(**args)


def _api(response: Any, method: str, is_async: bool) -> Any:
    """The bound method the caller calls: the SDK response's own, else its httpx response's.

    The streaming responses (``APIResponse``) have ``read`` and the ``iter_*``
    but ``iter_raw`` (read from ``.http_response``); the raw ones
    (``LegacyAPIResponse``) are read through ``.http_response``.
    """
    http = getattr(response, "http_response", None)
    if (
        http is not None
        and method != "iter_raw"
        and not type(response).__name__.startswith("Legacy")
    ):
        return getattr(response, method)  # the SDK's own (async methods keep their names)
    target = response if http is None else http
    if is_async:
        method = "aread" if method == "read" else "a" + method
    return getattr(target, method)


def _http(response: Any) -> Any:
    return getattr(response, "http_response", response)


def _sync_apply(response: Any, method: str) -> list[Any]:
    out: list[Any] = [response.headers.get("content-encoding")]
    for name, api in ((method, _api(response, method, False)), ("read", _http(response).read)):
        try:
            value = api()
            out.append(_result(name, value if name == "read" else list(value)))
        except Exception as exc:
            out.append(type(exc).__name__)
    return out


async def _async_apply(response: Any, method: str) -> list[Any]:
    out: list[Any] = [response.headers.get("content-encoding")]
    for name, api in ((method, _api(response, method, True)), ("read", _http(response).aread)):
        try:
            if name == "read":
                value = await api()
            else:
                value = [chunk async for chunk in api()]
            out.append(_result(name, value))
        except Exception as exc:
            out.append(type(exc).__name__)
    return out


def _sync_cell(sdk: Any, kind: str, method: str, stream: bool) -> list[Any]:
    call = _call(kind, sdk, method, stream)
    if kind.endswith("raw") and kind != "httpx":
        response = call
        try:
            return _sync_apply(response, method)
        finally:
            response.http_response.close()
    with call as response:
        return _sync_apply(response, method)


async def _async_cell(sdk: Any, kind: str, method: str, stream: bool) -> list[Any]:
    if kind.endswith("raw") and kind != "httpx":
        response = await _call(kind, sdk, method, stream)
        try:
            return await _async_apply(response, method)
        finally:
            await response.http_response.aclose()
    async with _call(kind, sdk, method, stream) as response:
        return await _async_apply(response, method)


def _sync_pass(server: ScriptServer, sdk: Any, kind: str, body: str, live: bool) -> list[Any]:
    out = []
    for method in METHODS:
        if live:
            server.add(_reply(kind, body))
        out.append(_sync_cell(sdk, kind, method, body == "sse"))
    return out


async def _async_pass(
    server: ScriptServer, sdk: Any, kind: str, body: str, live: bool
) -> list[Any]:
    out = []
    for method in METHODS:
        if live:
            server.add(_reply(kind, body))
        out.append(await _async_cell(sdk, kind, method, body == "sse"))
    return out


def _drive_sync(server: ScriptServer, journal: Journal, kind: str, body: str) -> list[list[Any]]:
    plain = _client("sync", kind, server.url)
    wrapped = redrive.wrap(_client("sync", kind, server.url))
    try:
        results = [_sync_pass(server, plain, kind, body, live=True)]
        for live in (True, False):
            with redrive.run(journal, "r"):
                results.append(_sync_pass(server, wrapped, kind, body, live=live))
    finally:
        plain.close()
        wrapped.close()
    return results


async def _drive_async(
    server: ScriptServer, journal: Journal, kind: str, body: str
) -> list[list[Any]]:
    plain = _client("async", kind, server.url)
    wrapped = redrive.wrap(_client("async", kind, server.url))
    try:
        results = [await _async_pass(server, plain, kind, body, live=True)]
        for live in (True, False):
            async with redrive.run(journal, "r"):
                results.append(await _async_pass(server, wrapped, kind, body, live=live))
    finally:
        await (plain.aclose() if kind == "httpx" else plain.close())
        await (wrapped.aclose() if kind == "httpx" else wrapped.close())
    return results


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("face", ["sync", "async"])
def test_every_response_api_reads_recorded_and_replayed_as_live(
    server: ScriptServer, face: str, kind: str, body: str
) -> None:
    """Live, recording and replay give each API the same result, call for call."""
    journal = redrive.open_journal(":memory:")
    sent = len(server.requests)
    if face == "sync":
        live, recording, replay = _drive_sync(server, journal, kind, body)
    else:
        live, recording, replay = asyncio.run(_drive_async(server, journal, kind, body))
    for method, want, rec, rep in zip(METHODS, live, recording, replay, strict=True):
        assert rec == want, f"recording, {method}"
        assert rep == want, f"replay, {method}"
    assert len(server.requests) - sent == 2 * len(METHODS)  # the replay sent nothing
    if body == "gzip":  # the journal keeps the body decoded, and the coding beside it
        stored = [f.data()["response"] for f in journal.frames("r") if f.kind == "model_response"]
        assert all(s["content_encoding"] == "gzip" and s["body"].startswith("{") for s in stored)


# -- the kind: any body, coding, chunking and sequence of calls, at the transport ---------------

_CODINGS = {
    "identity": lambda data: data,
    "gzip": gzip.compress,
    "deflate": zlib.compress,
}
_CALLS = ["read", "iter_raw", "iter_bytes", "iter_text", "iter_lines"]


class _Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A live body arriving in the given pieces (sync and async)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [b""]


def _sync_calls(response: Any, calls: list[str]) -> list[Any]:
    out: list[Any] = [response.headers.get("content-encoding")]
    for call in calls:
        try:
            value = getattr(response, call)()
            out.append(_result(call, value if call == "read" else list(value)))
        except Exception as exc:
            out.append(type(exc).__name__)
    return out


async def _async_calls(response: Any, calls: list[str]) -> list[Any]:
    out: list[Any] = [response.headers.get("content-encoding")]
    for call in calls:
        try:
            if call == "read":
                value = await response.aread()
            else:
                value = [chunk async for chunk in getattr(response, "a" + call)()]
            out.append(_result(call, value))
        except Exception as exc:
            out.append(type(exc).__name__)
    return out


def _decoded(coding: str, call: str, value: Any) -> Any:
    """``iter_raw``'s bytes as what they decode to (a compressor's output may differ)."""
    if call == "iter_raw" and coding == "deflate" and isinstance(value, bytes) and value:
        return ("deflate", zlib.decompress(value))
    return value


@given(
    body=st.one_of(
        st.binary(max_size=300),
        st.text(max_size=200).map(str.encode),
        st.lists(st.text(alphabet="ab\r\n é", max_size=12), max_size=6).map(
            lambda lines: "\n".join(lines).encode()
        ),
    ),
    coding=st.sampled_from(sorted(_CODINGS)),
    cuts=st.lists(st.integers(0, 400), max_size=4),
    calls=st.lists(st.sampled_from(_CALLS), min_size=1, max_size=3),
    face=st.sampled_from(["sync", "async"]),
    content_type=st.sampled_from(["application/json", "text/plain; charset=utf-8", ""]),
)
def test_any_sequence_of_calls_reads_as_live(
    body: bytes, coding: str, cuts: list[int], calls: list[str], face: str, content_type: str
) -> None:
    """Any body, coding, chunking and call sequence: live, recording and replay agree."""
    wire = _CODINGS[coding](body)
    headers = {"content-type": content_type} if content_type else {}
    if coding != "identity":
        headers["content-encoding"] = coding

    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, stream=_Chunks(_pieces(wire, cuts)))

    journal = redrive.open_journal(":memory:")
    if face == "sync":

        def one(client: httpx.Client) -> list[Any]:
            with client.stream("GET", "/x") as response:
                return _sync_calls(response, calls)

        plain = httpx.Client(transport=httpx.MockTransport(server), base_url="http://h/v1")
        wrapped = redrive.wrap(
            httpx.Client(transport=httpx.MockTransport(server), base_url="http://h/v1")
        )
        results = [one(plain)]
        for _ in range(2):
            with redrive.run(journal, "r"):
                results.append(one(wrapped))
    else:

        async def aone(client: httpx.AsyncClient) -> list[Any]:
            async with client.stream("GET", "/x") as response:
                return await _async_calls(response, calls)

        async def main() -> list[list[Any]]:
            transport = httpx.MockTransport(server)
            plain = httpx.AsyncClient(transport=transport, base_url="http://h/v1")
            wrapped = redrive.wrap(httpx.AsyncClient(transport=transport, base_url="http://h/v1"))
            out = [await aone(plain)]
            for _ in range(2):
                async with redrive.run(journal, "r"):
                    out.append(await aone(wrapped))
            return out

        results = asyncio.run(main())
    live, recording, replay = (
        [_decoded(coding, call, v) for call, v in zip(["headers", *calls], r, strict=True)]
        for r in results
    )
    assert recording == live
    assert replay == live
