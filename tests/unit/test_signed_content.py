"""Issue 27 items 2-3: content a provider signs round-trips byte for byte through a resume.

The scripted server signs each thinking block it sends (an HMAC of the
thinking text) and answers ``400 invalid_request_error: Invalid signature in
thinking block`` when a request sends one back altered, as Anthropic does.
The thinking text holds ``?key=demo-7f3a9c21``, which the default scrubber
masks anywhere else: recorded, crashed after the tool, resumed (the first
model call replayed from the journal, its thinking block sent back live),
then replayed whole with no request at all.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Any

import anthropic
import pytest

import redrive
from tests.sdkserver import Reply, ScriptServer, serve

_KEY = b"server-signing-key"
THINKING = "I will look it up at https://api.example/v1/p?key=demo-7f3a9c21 first."


def _sign(text: str) -> str:
    return hmac.new(_KEY, text.encode(), hashlib.sha256).hexdigest()


def _event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def _message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-model",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 3},
    }


TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}
FIRST = _message(
    [{"type": "thinking", "thinking": THINKING, "signature": _sign(THINKING)}, TOOL_USE],
    "tool_use",
)
FINAL = _message([{"type": "text", "text": "done"}], "end_turn")


def _first_stream() -> list[str]:
    half = len(THINKING) // 2 + 3  # the key is split across the two deltas
    start = {**FIRST, "content": [], "stop_reason": None}
    return [
        _event("message_start", message=start),
        _event(
            "content_block_start",
            index=0,
            content_block={"type": "thinking", "thinking": "", "signature": ""},
        ),
        _event(
            "content_block_delta",
            index=0,
            delta={"type": "thinking_delta", "thinking": THINKING[:half]},
        ),
        _event(
            "content_block_delta",
            index=0,
            delta={"type": "thinking_delta", "thinking": THINKING[half:]},
        ),
        _event(
            "content_block_delta",
            index=0,
            delta={"type": "signature_delta", "signature": _sign(THINKING)},
        ),
        _event("content_block_stop", index=0),
        _event("content_block_start", index=1, content_block=TOOL_USE),
        _event("content_block_stop", index=1),
        _event(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 3},
        ),
        _event("message_stop"),
    ]


def _final_stream() -> list[str]:
    start = {**FINAL, "content": [], "stop_reason": None}
    return [
        _event("message_start", message=start),
        _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "done"}),
        _event("content_block_stop", index=0),
        _event(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage={"output_tokens": 3},
        ),
        _event("message_stop"),
    ]


def _validate(body: bytes) -> Reply | None:
    """Refuse a thinking block whose signature is not that of its text (Anthropic's 400)."""
    for m, message in enumerate(json.loads(body)["messages"]):
        content = message["content"]
        for c, block in enumerate(content if isinstance(content, list) else []):
            if block.get("type") == "thinking" and block["signature"] != _sign(block["thinking"]):
                where = f"messages.{m}.content.{c}"
                error = {"type": "invalid_request_error", "message": f"{where}: Invalid signature"}
                return Reply(400, {"type": "error", "error": error})
    return None


def _script(server: ScriptServer, stream: bool) -> None:
    if stream:
        server.add(Reply(chunks=_first_stream()), Reply(chunks=_final_stream(), check=_validate))
    else:
        server.add(Reply(body=FIRST), Reply(body=FINAL, check=_validate))


def _options(messages: list[Any]) -> dict[str, Any]:
    return {
        "model": "claude-test-model",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
        "messages": messages,
    }


def _create(client: Any, messages: list[Any], stream: bool) -> Any:
    if not stream:
        return client.messages.create(**_options(messages))
    with client.messages.stream(**_options(messages)) as events:
        return events.get_final_message()


async def _acreate(client: Any, messages: list[Any], stream: bool) -> Any:
    if not stream:
        return await client.messages.create(**_options(messages))
    async with client.messages.stream(**_options(messages)) as events:
        return await events.get_final_message()


@redrive.tool(read_only=True)
def lookup() -> str:
    """The loop's tool (its result is replayed on resume)."""
    return "found"


class WorkerDied(ConnectionError):
    """The crash between the tool and the second model call."""


def _messages(first: Any) -> list[Any]:
    return [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": lookup()}],
        },
    ]


def _loop(client: Any, stream: bool, crash: bool) -> str:
    first = _create(client, [{"role": "user", "content": "find it"}], stream)
    messages = _messages(first)
    if crash:
        raise WorkerDied("worker died after the tool")
    return str(_create(client, messages, stream).content[0].text)


async def _aloop(client: Any, stream: bool, crash: bool) -> str:
    first = await _acreate(client, [{"role": "user", "content": "find it"}], stream)
    messages = _messages(first)
    if crash:
        raise WorkerDied("worker died after the tool")
    return str((await _acreate(client, messages, stream)).content[0].text)


@pytest.mark.parametrize(("face", "stream"), [("sync", False), ("sync", True), ("async", True)])
def test_a_signed_thinking_block_survives_record_crash_resume_replay(
    face: str, stream: bool
) -> None:
    """The resumed request sends back the thinking block as signed; the replay needs no server."""
    journal = redrive.open_journal(":memory:")
    with serve() as server:
        _script(server, stream)
        if face == "sync":
            client: Any = redrive.wrap(
                anthropic.Anthropic(api_key="sk-ant-x", base_url=server.url, max_retries=0)
            )

            def attempt(crash: bool) -> str:
                with redrive.run(journal, "signed") as run:
                    out = _loop(client, stream, crash)
                    run.finish(out)
                    return out
        else:

            def attempt(crash: bool) -> str:
                async def go() -> str:  # a client per event loop, closed with it
                    async with (
                        redrive.wrap(
                            anthropic.AsyncAnthropic(
                                api_key="sk-ant-x", base_url=server.url, max_retries=0
                            )
                        ) as aclient,
                        redrive.run(journal, "signed") as run,
                    ):
                        out = await _aloop(aclient, stream, crash)
                        run.finish(out)
                        return out

                return asyncio.run(go())

        try:
            _attempts(server, attempt)
        finally:
            if face == "sync":
                client.close()
    stored = json.dumps([f.data() for f in journal.frames("signed")], default=str)
    assert _sign(THINKING) in stored


def _attempts(server: ScriptServer, attempt: Any) -> None:
    """Record and crash, resume (the thinking block goes back live), replay (no request)."""
    with pytest.raises(WorkerDied):
        attempt(crash=True)
    assert len(server.requests) == 1
    assert attempt(crash=False) == "done"  # main: 400 Invalid signature here
    assert len(server.requests) == 2
    sent = json.loads(server.requests[1].body)["messages"][1]["content"][0]
    assert sent["thinking"] == THINKING
    assert attempt(crash=False) == "done"  # a finished run replays: no request
    assert len(server.requests) == 2
