"""A brief model outage, scripted: the faults, and one agent loop per integration and face.

Each loop asks the model (the scripted server at ``base_url``) to apologise to
a customer: the model calls the tool ``send_email`` (its side effect: a line
appended to a file outside the loop), then answers. The loops use the real
packages, each as its users wire it to redrive (a wrapped SDK client, the
framework's redrive tool adapter); every SDK has ``max_retries=0`` and a short
timeout, so a fault reaches the loop at once.

:func:`serve` runs a server on which a :data:`DROP` entry closes the
connection without answering, and a :data:`HOLD` entry never answers (the
client's timeout fires).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redrive
from tests.integrations import fakeapi
from tests.integrations.fakeapi import HOLD, HoldingServer, _HoldingHandler
from tests.sdkserver import Received, Reply

# litellm fetches its cost map over the network at import unless told not to
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__all__ = ["DROP", "FAULTS", "LOOPS", "PERMANENT", "PROMPT", "TURNS", "fault", "serve"]

PROMPT = "Ada's order arrived damaged; email her an apology."
#: seconds a client waits for a response (a held one times out)
TIMEOUT = 0.5
#: closes the connection without a response (the client sees a dropped connection)
DROP = Reply(status=-1)
#: the faults of a brief outage
FAULTS = ("drop", "429", "503", "529", "timeout")
#: errors that are the request's answer: sending it again gives the same
PERMANENT = ("400",)
#: each status's error type in the providers' bodies
ANTHROPIC = {
    400: "invalid_request_error",
    401: "authentication_error",
    429: "rate_limit_error",
    503: "api_error",
    529: "overloaded_error",
}
OPENAI = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    429: "rate_limit_exceeded",
    503: "server_error",
    529: "server_error",
}


def fault(kind: str, anthropic: bool = False) -> Reply:
    """The scripted reply for one fault (an error body in the provider's own shape)."""
    if kind == "drop":
        return DROP
    if kind == "timeout":
        return HOLD
    status = int(kind)
    if anthropic:
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": ANTHROPIC[status], "message": kind},
        }
    else:
        code = OPENAI[status]
        body = {"error": {"message": kind, "type": code, "code": code}}
    return Reply(status=status, body=body)


class _OutageHandler(_HoldingHandler):
    def _serve(self) -> None:
        server = self.server
        with server.lock:
            dropped = bool(server.script) and server.script[0] is DROP
            if dropped:
                server.script.pop(0)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append(Received(self.command, self.path, headers, body))
        if not dropped:
            super()._serve()
            return
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)  # no status line: the client's read fails


@contextmanager
def serve() -> Iterator[HoldingServer]:
    """Run a :class:`HoldingServer` that also knows :data:`DROP`, for the block's duration."""
    with fakeapi.serve() as server:
        server.RequestHandlerClass = _OutageHandler  # read for each request it accepts
        yield server


def _effect(effects: str, to: str) -> str:
    with open(effects, "a") as log:
        log.write(f"email to {to}\n")
    return f"sent to {to}"


SCHEMA = {
    "type": "function",
    "function": {
        "name": "send_email",
        "description": "Send an email to a customer.",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"],
        },
    },
}


def _send_email(effects: str) -> Callable[..., str]:
    @redrive.tool(name="send_email", restart_safe=False)
    def send_email(to: str, body: str) -> str:
        return _effect(effects, to)

    return send_email


def _chat_turn(message: Any, messages: list[dict[str, Any]], send: Callable[..., str]) -> Any:
    """Apply one chat completion turn; return the final text, or None to ask again."""
    if not message.tool_calls:
        return message.content
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        result = send(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


# --- bare SDKs --------------------------------------------------------------------------------


def openai_sync(url: str, effects: str) -> Any:
    import openai

    client = redrive.wrap(
        openai.OpenAI(base_url=url, api_key="sk-t", max_retries=0, timeout=TIMEOUT)
    )
    send, messages = _send_email(effects), [{"role": "user", "content": PROMPT}]
    with client:
        while True:
            reply = client.chat.completions.create(
                model="gpt-4o", messages=messages, tools=[SCHEMA]
            )  # type: ignore[arg-type, list-item]
            if (final := _chat_turn(reply.choices[0].message, messages, send)) is not None:
                return final


async def openai_async(url: str, effects: str) -> Any:
    import openai

    client = redrive.wrap(
        openai.AsyncOpenAI(base_url=url, api_key="sk-t", max_retries=0, timeout=TIMEOUT)
    )
    send, messages = _send_email(effects), [{"role": "user", "content": PROMPT}]
    async with client:
        while True:
            reply = await client.chat.completions.create(
                model="gpt-4o", messages=messages, tools=[SCHEMA]
            )  # type: ignore[arg-type, list-item]
            if (final := _chat_turn(reply.choices[0].message, messages, send)) is not None:
                return final


ANTHROPIC_TOOL = {
    "name": "send_email",
    "description": "Send an email to a customer.",
    "input_schema": SCHEMA["function"]["parameters"],  # type: ignore[index]
}


def _anthropic_turn(reply: Any, messages: list[dict[str, Any]], send: Callable[..., str]) -> Any:
    uses = [block for block in reply.content if block.type == "tool_use"]
    if not uses:
        return "".join(block.text for block in reply.content if block.type == "text")
    messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
    results = [
        {"type": "tool_result", "tool_use_id": use.id, "content": send(**use.input)} for use in uses
    ]
    messages.append({"role": "user", "content": results})
    return None


def anthropic_sync(url: str, effects: str) -> Any:
    import anthropic

    root = url.removesuffix("/v1")
    client = redrive.wrap(
        anthropic.Anthropic(base_url=root, api_key="sk-ant-t", max_retries=0, timeout=TIMEOUT)
    )
    send, messages = _send_email(effects), [{"role": "user", "content": PROMPT}]
    with client:
        while True:
            reply = client.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=messages, tools=[ANTHROPIC_TOOL]
            )  # type: ignore[arg-type, list-item]
            if (final := _anthropic_turn(reply, messages, send)) is not None:
                return final


async def anthropic_async(url: str, effects: str) -> Any:
    import anthropic

    root = url.removesuffix("/v1")
    client = redrive.wrap(
        anthropic.AsyncAnthropic(base_url=root, api_key="sk-ant-t", max_retries=0, timeout=TIMEOUT)
    )
    send, messages = _send_email(effects), [{"role": "user", "content": PROMPT}]
    async with client:
        while True:
            reply = await client.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=messages, tools=[ANTHROPIC_TOOL]
            )  # type: ignore[arg-type, list-item]
            if (final := _anthropic_turn(reply, messages, send)) is not None:
                return final


# --- OpenAI Agents SDK ------------------------------------------------------------------------


def _agents_agent(url: str, effects: str) -> Any:
    import agents
    import openai

    from redrive.integrations.openai_agents import function_tool

    agents.set_tracing_disabled(True)

    @function_tool(restart_safe=False)
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer.

        Args:
            to: the address.
            body: the text.
        """
        return _effect(effects, to)

    client = redrive.wrap(
        openai.AsyncOpenAI(base_url=url, api_key="sk-t", max_retries=0, timeout=TIMEOUT)
    )
    model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
    return agents.Agent(
        name="support", instructions="Help.", model=model, tools=[send_email]
    ), client


def _close_on_default_loop(client: Any) -> None:
    """Close an async client a framework's ``run_sync`` used, then the loop it ran on.

    The Agents SDK's and pydantic-ai's ``run_sync`` run on the thread's default
    event loop and leave it open for the next call; the test closes it.
    """
    policy = asyncio.get_event_loop_policy()
    loop = policy.get_event_loop()
    try:
        loop.run_until_complete(client.close())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
        policy.set_event_loop(None)


def agents_sync(url: str, effects: str) -> Any:
    import agents

    agent, client = _agents_agent(url, effects)
    try:
        return agents.Runner.run_sync(agent, PROMPT).final_output
    finally:
        _close_on_default_loop(client)


async def agents_async(url: str, effects: str) -> Any:
    import agents

    agent, client = _agents_agent(url, effects)
    async with client:
        return (await agents.Runner.run(agent, PROMPT)).final_output


# --- pydantic-ai ------------------------------------------------------------------------------


def _pydantic_agent(url: str, effects: str) -> Any:
    import openai
    import pydantic_ai
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from redrive.integrations.pydantic_ai import tool

    @tool(restart_safe=False)
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        return _effect(effects, to)

    client = redrive.wrap(
        openai.AsyncOpenAI(base_url=url, api_key="sk-t", max_retries=0, timeout=TIMEOUT)
    )
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
    return pydantic_ai.Agent(model, instructions="Help.", tools=[send_email]), client


def pydantic_sync(url: str, effects: str) -> Any:
    agent, client = _pydantic_agent(url, effects)
    try:
        return agent.run_sync(PROMPT).output
    finally:
        _close_on_default_loop(client)


async def pydantic_async(url: str, effects: str) -> Any:
    agent, client = _pydantic_agent(url, effects)
    async with client:
        return (await agent.run(PROMPT)).output


# --- LangChain / LangGraph --------------------------------------------------------------------


def _graph(url: str, effects: str, is_async: bool) -> Any:
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from redrive.integrations.langchain import openai_http_clients, tool

    @tool(restart_safe=False)
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        return _effect(effects, to)

    sync_http, async_http = openai_http_clients(url)
    llm = ChatOpenAI(
        model="gpt-4o",
        base_url=url,
        api_key="sk-t",  # type: ignore[arg-type]
        max_retries=0,
        timeout=TIMEOUT,
        http_client=sync_http,
        http_async_client=async_http,
    )
    model = llm.bind_tools([send_email])

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", acall_model if is_async else call_model)
    builder.add_node("tools", ToolNode([send_email]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(), sync_http, async_http


def langchain_sync(url: str, effects: str) -> Any:
    graph, sync_http, _unused = _graph(url, effects, False)
    with sync_http:
        state = graph.invoke({"messages": [("user", PROMPT)]})
    return state["messages"][-1].content


async def langchain_async(url: str, effects: str) -> Any:
    graph, _unused, async_http = _graph(url, effects, True)
    async with async_http:
        state = await graph.ainvoke({"messages": [("user", PROMPT)]})
    return state["messages"][-1].content


# --- LiteLLM ----------------------------------------------------------------------------------


def _litellm_args(url: str, client: Any, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "openai/gpt-4o",
        "messages": messages,
        "tools": [SCHEMA],
        "client": client,
        "api_base": url,
        "api_key": "sk-t",
        "timeout": TIMEOUT,
        "max_retries": 0,
    }


def litellm_sync(url: str, effects: str) -> Any:
    import litellm
    import openai

    client = redrive.wrap(
        openai.OpenAI(base_url=url, api_key="sk-t", max_retries=0, timeout=TIMEOUT)
    )
    send, messages = _send_email(effects), [{"role": "user", "content": PROMPT}]
    with client:
        while True:
            reply = litellm.completion(**_litellm_args(url, client, messages))
            if (final := _chat_turn(reply.choices[0].message, messages, send)) is not None:
                return final


async def litellm_async(url: str, effects: str) -> Any:
    import litellm
    import openai

    client = redrive.wrap(
        openai.AsyncOpenAI(base_url=url, api_key="sk-t", max_retries=0, timeout=TIMEOUT)
    )
    send, messages = _send_email(effects), [{"role": "user", "content": PROMPT}]
    async with client:
        while True:
            reply = await litellm.acompletion(**_litellm_args(url, client, messages))
            if (final := _chat_turn(reply.choices[0].message, messages, send)) is not None:
                return final


#: integration -> (its family for ``need``, the sync loop, the async loop, Anthropic-shaped?)
LOOPS: dict[str, tuple[str, Callable[[str, str], Any], Callable[[str, str], Any], bool]] = {
    "openai-sdk": ("", openai_sync, openai_async, False),
    "anthropic-sdk": ("", anthropic_sync, anthropic_async, True),
    "openai-agents": ("agents", agents_sync, agents_async, False),
    "pydantic-ai": ("pydantic", pydantic_sync, pydantic_async, False),
    "langgraph": ("langchain", langchain_sync, langchain_async, False),
    "litellm": ("litellm", litellm_sync, litellm_async, False),
}

#: the first model turn (the tool call) and the last (the final text)
TURNS = {
    False: (fakeapi.chat(False), fakeapi.chat(True)),
    True: (fakeapi.anthropic(False), fakeapi.anthropic(True)),
}
