"""The conformance matrix's bare tool loops: litellm and the OpenAI and Anthropic SDKs.

Each is the loop a user writes without an agent framework: ask the model,
run each tool call it asks for through a :func:`redrive.tool`, send the
results back, until it answers. Same driver shape as matrix_drivers.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redrive
from tests.integrations.matrix_child import PROMPT, Effects

SCHEMA = {
    "type": "function",
    "function": {
        "name": "send_email",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"],
        },
    },
}


# --- litellm ----------------------------------------------------------------------------------


def _email_tool(job: dict[str, Any]) -> Callable[..., str]:
    """The ``send_email`` redrive tool of a bare loop (its side effect in the job's log)."""
    effects = Effects(job["effects"])

    @redrive.tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        return effects.send(to, idempotency_key)

    return send_email


def _tool_loop(ask: Callable[[list[dict[str, Any]]], Any], job: dict[str, Any]) -> Any:
    """A bare Chat Completions tool loop over ``ask(messages) -> message``."""
    send_email = _email_tool(job)
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    while True:
        done = _chat_turn(ask(messages), messages, send_email)
        if done is not None:
            return done


def _chat_turn(message: Any, messages: list[dict[str, Any]], send: Callable[..., str]) -> Any:
    """Run a Chat Completions turn's tool calls into ``messages``; the answer when none."""
    if not message.tool_calls:
        return {"output": message.content}
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        result = send(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


async def litellm_loop(job: dict[str, Any], run: redrive.Run) -> Any:
    import litellm
    from openai import AsyncOpenAI

    client = redrive.wrap(AsyncOpenAI(base_url=job["base_url"], api_key="sk-test", max_retries=0))

    async def ask(messages: list[dict[str, Any]]) -> Any:
        stream = await litellm.acompletion(
            model="openai/gpt-4o",
            messages=messages,
            tools=[SCHEMA],
            stream=True,
            client=client,
            api_base=job["base_url"],
            api_key="sk-test",
        )
        chunks = [chunk async for chunk in stream]
        return litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message

    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    send_email = _email_tool(job)
    while True:
        done = _chat_turn(await ask(messages), messages, send_email)
        if done is not None:
            return done


def litellm_sync(job: dict[str, Any], run: redrive.Run) -> Any:
    import litellm
    from openai import OpenAI

    client = redrive.wrap(OpenAI(base_url=job["base_url"], api_key="sk-test", max_retries=0))

    def ask(messages: list[dict[str, Any]]) -> Any:
        response = litellm.completion(
            model="openai/gpt-4o",
            messages=messages,
            tools=[SCHEMA],
            client=client,
            api_base=job["base_url"],
            api_key="sk-test",
        )
        return response.choices[0].message

    return _tool_loop(ask, job)


# --- bare SDKs --------------------------------------------------------------------------------


def openai_chat_sync(job: dict[str, Any], run: redrive.Run) -> Any:
    from openai import OpenAI

    client = redrive.wrap(OpenAI(base_url=job["base_url"], api_key="sk-test", max_retries=0))

    def ask(messages: list[dict[str, Any]]) -> Any:
        made = client.chat.completions.create(model="gpt-4o", messages=messages, tools=[SCHEMA])
        return made.choices[0].message

    return _tool_loop(ask, job)


async def openai_responses_stream(job: dict[str, Any], run: redrive.Run) -> Any:
    from openai import AsyncOpenAI

    client = redrive.wrap(AsyncOpenAI(base_url=job["base_url"], api_key="sk-test", max_retries=0))
    send_email = _email_tool(job)

    items: list[Any] = [{"role": "user", "content": PROMPT}]
    tool = {
        "type": "function",
        "name": "send_email",
        "parameters": SCHEMA["function"]["parameters"],
    }  # type: ignore[index]
    while True:
        async with client.responses.stream(model="gpt-4o", input=items, tools=[tool]) as stream:
            async for _ in stream:
                pass
            response = await stream.get_final_response()
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            return {"output": response.output_text, "usage": response.usage.total_tokens}
        for call in calls:
            items.append(call.model_dump(exclude_none=True))
            result = send_email(**json.loads(call.arguments))
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": result}
            )


def _anthropic_tools() -> list[dict[str, Any]]:
    return [{"name": "send_email", "input_schema": SCHEMA["function"]["parameters"]}]  # type: ignore[index]


def anthropic_sync(job: dict[str, Any], run: redrive.Run) -> Any:
    from anthropic import Anthropic

    root = job["base_url"].removesuffix("/v1")
    client = redrive.wrap(Anthropic(base_url=root, api_key="sk-ant-t", max_retries=0))
    send_email = _email_tool(job)

    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    while True:
        made = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=100, messages=messages, tools=_anthropic_tools()
        )
        done = _anthropic_turn(made, messages, send_email)
        if done is not None:
            return done


def _anthropic_turn(made: Any, messages: list[dict[str, Any]], send: Callable[..., str]) -> Any:
    """Run a Messages turn's tool uses into ``messages``; return the answer when there are none."""
    uses = [b for b in made.content if b.type == "tool_use"]
    if not uses:
        return {"output": made.content[0].text, "usage": made.usage.output_tokens}
    messages.append({"role": "assistant", "content": [b.model_dump() for b in made.content]})
    results = [
        {"type": "tool_result", "tool_use_id": b.id, "content": send(**b.input)} for b in uses
    ]
    messages.append({"role": "user", "content": results})
    return None


async def anthropic_stream(job: dict[str, Any], run: redrive.Run) -> Any:
    from anthropic import AsyncAnthropic

    root = job["base_url"].removesuffix("/v1")
    client = redrive.wrap(AsyncAnthropic(base_url=root, api_key="sk-ant-t", max_retries=0))
    send_email = _email_tool(job)

    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    while True:
        async with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=100, messages=messages, tools=_anthropic_tools()
        ) as stream:
            made = await stream.get_final_message()
        done = _anthropic_turn(made, messages, send_email)
        if done is not None:
            return done


#: scenario name -> (driver, face)
BARE_DRIVERS: dict[str, tuple[Callable[..., Any], str]] = {
    "litellm-stream": (litellm_loop, "async"),
    "litellm-sync": (litellm_sync, "sync"),
    "openai-chat-sync": (openai_chat_sync, "sync"),
    "openai-responses-stream": (openai_responses_stream, "async"),
    "anthropic-sync": (anthropic_sync, "sync"),
    "anthropic-stream": (anthropic_stream, "async"),
}
