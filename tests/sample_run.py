"""A small recorded run for the OpenTelemetry and timeline tests.

One agent loop against the real OpenAI SDK on a local scripted server: a chat
completion asking for two parallel tool calls (``lookup`` succeeds, ``charge``
raises), then a streamed chat completion with the answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai

import redrive
from redrive.storage import Journal
from tests.sdkserver import Reply, ScriptServer

TOOL_CALLS = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_lookup",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"order": "A-1"}'},
                    },
                    {
                        "id": "call_charge",
                        "type": "function",
                        "function": {"name": "charge", "arguments": '{"cents": 500}'},
                    },
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
}


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> str:
    body: dict[str, Any] = {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 2,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return "data: " + json.dumps(body) + "\n\n"


STREAM = [
    _chunk({"role": "assistant", "content": "Order A-1 "}),
    _chunk({"content": "is on its way."}, finish="stop"),
    _chunk({}, usage={"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26}),
    "data: [DONE]\n\n",
]


class ChargeDeclined(RuntimeError):
    """The payment tool's failure."""


@redrive.tool(read_only=True)
async def lookup(order: str) -> dict[str, str]:
    """Look an order up."""
    return {"order": order, "status": "shipped", "api_key": "sk-proj-abcdefghijklmnop1234"}


@redrive.tool()
async def charge(cents: int) -> str:
    """Charge a card (always declined here)."""
    raise ChargeDeclined(f"card declined for {cents} cents")


async def agent(client: openai.AsyncOpenAI, *, crash_after_first: bool = False) -> str:
    """The loop: one tool-calling turn with two parallel calls, then a streamed answer.

    ``crash_after_first``: the execution is interrupted once the first model call returned.
    """
    messages: list[Any] = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Where is order A-1? Charge 5 USD."},
    ]
    first = await client.chat.completions.create(model="gpt-4o", messages=messages)
    if crash_after_first:
        raise asyncio.CancelledError  # the job runner timed out: the run stays resumable
    calls = first.choices[0].message.tool_calls or []
    tools: dict[str, Any] = {"lookup": lookup, "charge": charge}

    async def call(c: Any) -> str:
        try:
            return json.dumps(await tools[c.function.name](**json.loads(c.function.arguments)))
        except ChargeDeclined as exc:
            return f"error: {exc}"

    results = await asyncio.gather(*(call(c) for c in calls))
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages += [
        {"role": "tool", "tool_call_id": c.id, "content": r}
        for c, r in zip(calls, results, strict=True)
    ]
    stream = await client.chat.completions.create(
        model="gpt-4o", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    text = ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    return text


def script_replies(*, order: str = "A-1", cents: int = 500) -> list[Reply]:
    """The replies :func:`agent` needs (the model asking for ``order``, ``cents``)."""
    body = json.loads(json.dumps(TOOL_CALLS))
    calls = body["choices"][0]["message"]["tool_calls"]
    calls[0]["function"]["arguments"] = json.dumps({"order": order})
    calls[1]["function"]["arguments"] = json.dumps({"cents": cents})
    return [Reply(body=body), Reply(chunks=STREAM)]


def script(server: ScriptServer, *, order: str = "A-1", cents: int = 500) -> None:
    """Queue the replies :func:`agent` needs on ``server`` (asking for ``order``, ``cents``)."""
    server.add(*script_replies(order=order, cents=cents))


def record(
    server: ScriptServer,
    journal: Journal,
    run_id: str = "support:42",
    *,
    order: str = "A-1",
    cents: int = 500,
    crash_after_first: bool = False,
) -> str:
    """Record one run of :func:`agent` into ``journal``; return its output.

    ``order`` and ``cents`` are what the scripted model asks the tools for.
    ``crash_after_first``: the execution is interrupted after the first model
    call (``asyncio.CancelledError`` propagates) and only that reply is scripted.
    """
    if crash_after_first:
        server.add(script_replies(order=order, cents=cents)[0])
    else:
        script(server, order=order, cents=cents)

    async def main() -> str:
        client = redrive.wrap(
            openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
        )
        try:
            async with redrive.run(journal, run_id, input={"order": "A-1"}) as run:
                output = str(run.finish(await agent(client, crash_after_first=crash_after_first)))
        finally:
            await client.close()
        return output

    return asyncio.run(main())
