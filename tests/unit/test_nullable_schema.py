"""Issue 27 item 9: a tool schema with a type list (a nullable field) or a property named
``type`` records, replays and imports (it crashed the match view: unhashable type).

Through the real OpenAI and Anthropic SDKs (sync and async) against the scripted
server, and through ``import_cassette`` and ``redrive import-cassette`` of a
crewAI-like cassette.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import redrive
from redrive import cli
from redrive.recorders.cassettes import import_cassette
from tests.json_strategies import NULLABLE_SCHEMA
from tests.sdkserver import Reply, ScriptServer, serve

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"query": "x", "type": null}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"type": None}}],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 2},
}
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {"name": "search", "description": "look", "parameters": NULLABLE_SCHEMA},
    }
]
ANTHROPIC_TOOLS = [{"name": "search", "description": "look", "input_schema": NULLABLE_SCHEMA}]
ASK = [{"role": "user", "content": "find it"}]


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


def _openai(server: ScriptServer, is_async: bool) -> Any:
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return redrive.wrap(cls(api_key="sk-test", base_url=server.url + "/v1", max_retries=0))


def _anthropic(server: ScriptServer, is_async: bool) -> Any:
    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    return redrive.wrap(cls(api_key="sk-ant-test", base_url=server.url, max_retries=0))


def _twice(server: ScriptServer, client: Any, call: Any) -> tuple[Any, Any]:
    """Record ``call(client)`` live in a run, then replay the finished run; both results.

    ``call`` returns the result, or a coroutine of it (an async client): both
    executions then run on one event loop, as an async client needs.
    """
    journal = redrive.open_journal(":memory:")

    async def aonce() -> tuple[Any, int]:
        async with redrive.run(journal, "crew") as run:
            result = await call(client)
        return result, run.replayed_steps

    def once() -> tuple[Any, int]:
        with redrive.run(journal, "crew") as run:
            result = call(client)
        return result, run.replayed_steps

    if isinstance(client, openai.AsyncOpenAI | anthropic.AsyncAnthropic):

        async def both() -> tuple[tuple[Any, int], tuple[Any, int]]:
            try:
                return await aonce(), await aonce()
            finally:
                await client.close()

        (live, replayed_live), (replayed, replayed_count) = asyncio.run(both())
    else:
        with client:
            (live, replayed_live), (replayed, replayed_count) = once(), once()
    assert (replayed_live, replayed_count) == (0, 1)
    assert len(server.requests) == 1  # the replay sent nothing
    return live, replayed


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_nullable_tool_schema_records_and_replays_through_the_openai_sdk(
    server: ScriptServer, is_async: bool
) -> None:
    """A chat completion whose tool has ``"type": ["integer", "null"]`` and a property named
    ``type`` is recorded live and replayed from the journal, with the same completion."""
    server.add(Reply(body=CHAT))
    client = _openai(server, is_async)

    def call(c: Any) -> Any:
        return c.chat.completions.create(model="gpt-4o", messages=ASK, tools=OPENAI_TOOLS)

    live, replayed = _twice(server, client, call)
    assert replayed == live
    assert json.loads(server.requests[0].body)["tools"][0]["function"]["parameters"] == (
        NULLABLE_SCHEMA
    )


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_nullable_tool_schema_records_and_replays_through_the_anthropic_sdk(
    server: ScriptServer, is_async: bool
) -> None:
    """The same schema as an Anthropic ``input_schema``: recorded, replayed, equal."""
    server.add(Reply(body=MESSAGE))
    client = _anthropic(server, is_async)

    def call(c: Any) -> Any:
        return c.messages.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=ASK, tools=ANTHROPIC_TOOLS
        )

    live, replayed = _twice(server, client, call)
    assert replayed == live
    assert live.content[0].input == {"type": None}


def test_a_changed_nullable_schema_still_diverges(server: ScriptServer) -> None:
    """The type list takes part in the match: a schema that drops ``null`` is another request."""
    server.add(Reply(body=CHAT))
    client = _openai(server, False)
    journal = redrive.open_journal(":memory:")
    with redrive.run(journal, "crew"):
        client.chat.completions.create(model="gpt-4o", messages=ASK, tools=OPENAI_TOOLS)
    changed = json.loads(json.dumps(OPENAI_TOOLS))
    changed[0]["function"]["parameters"]["properties"]["limit"]["type"] = ["integer"]
    with pytest.raises(redrive.DivergenceError) as info, redrive.run(journal, "crew"):
        client.chat.completions.create(model="gpt-4o", messages=ASK, tools=changed)
    assert any("limit" in path for path, _a, _b in info.value.diff or [])


def _crewai_cassette(path: Path) -> Path:
    """A cassette as crewAI's test suite stores one (vcrpy, JSON bodies as text)."""
    request = {"model": "gpt-4o", "messages": ASK, "tools": OPENAI_TOOLS, "tool_choice": "auto"}
    interaction = {
        "request": {
            "method": "POST",
            "uri": "https://api.openai.com/v1/chat/completions",
            "body": json.dumps(request),
            "headers": {"content-type": ["application/json"]},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"content-type": ["application/json"]},
            "body": {"string": json.dumps(CHAT)},
        },
    }
    path.write_text(json.dumps({"interactions": [interaction], "version": 1}))
    return path


def test_crewai_like_cassette_imports_and_replays_through_the_sdk(tmp_path: Path) -> None:
    """import_cassette of a nullable-schema cassette, then a replay through the real SDK."""
    path = _crewai_cassette(tmp_path / "crew.json")
    journal = redrive.open_journal(":memory:")
    run_id = import_cassette(path, journal)

    def offline(request: httpx2.Request) -> httpx2.Response:
        raise AssertionError(f"replay sent {request.method} {request.url}")

    client = redrive.wrap(
        openai.OpenAI(
            api_key="sk-x", http_client=httpx2.Client(transport=httpx2.MockTransport(offline))
        )
    )
    with redrive.run(journal, run_id, live=False):
        out = client.chat.completions.create(
            model="gpt-4o", messages=ASK, tools=OPENAI_TOOLS, tool_choice="auto"
        )
    assert out.choices[0].message.tool_calls[0].function.name == "search"  # type: ignore[index,union-attr]


def test_import_cassette_command_takes_a_nullable_schema(tmp_path: Path) -> None:
    """``redrive import-cassette`` exits 0 (it printed a traceback and exited 1)."""
    path = _crewai_cassette(tmp_path / "crew.json")
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(["--journal", str(tmp_path / "runs.duckdb"), "import-cassette", str(path)])
    assert code == 0, err.getvalue()
