"""More conformance-matrix scenarios: state features added to the matrix after its first table.

Drivers for the scenarios listed after the first ones in
tests/integrations/matrix_cells.py: provider-signed thinking through the bare
Anthropic SDK, LangChain tool errors (``handle_tool_error``) and structured
output, and pydantic-ai ``message_history`` kept by the user. The
transient-error column reuses the first drivers (:data:`MORE_DRIVERS` maps
those scenario names to them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redrive
from tests.integrations import matrix_bare as bare
from tests.integrations import matrix_drivers as first
from tests.integrations.matrix_child import PROMPT, Effects, die_at

# --- Anthropic SDK: extended thinking ---------------------------------------------------------


def anthropic_thinking(job: dict[str, Any], run: redrive.Run) -> Any:
    """A Messages tool loop with thinking on: the signed block goes back in the next request."""
    from anthropic import Anthropic

    root = job["base_url"].removesuffix("/v1")
    client: Any = redrive.wrap(Anthropic(base_url=root, api_key="sk-ant-t", max_retries=0))
    send_email = bare._email_tool(job)
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    seen: list[dict[str, Any]] = []
    while True:
        made = client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=messages,
            tools=bare._anthropic_tools(),
        )
        seen += [b.model_dump() for b in made.content if b.type == "thinking"]
        done = bare._anthropic_turn(made, messages, send_email)
        if done is not None:
            return {**done, "thinking": seen}


# --- OpenAI Agents SDK: tool approvals -------------------------------------------------------


async def _approval_delivery(job: dict[str, Any], journal: Any, live: bool) -> Any:
    """One delivery: run the agent; each tool approval it asks waits for a person's decision.

    The SDK's ``RunState`` (serialized and loaded back, as the SDK documents
    for a pause) carries the interrupted turn; the decision comes from
    :func:`redrive.await_approval`, which suspends the run until
    ``journal.decide`` records it. Returns the answer, or None when suspended.
    """
    import agents

    _, model, send_email = first._agents_setup(job)
    send_email.needs_approval = True  # the SDK pauses the run before each call
    agent = agents.Agent(name="support", instructions="Help.", model=model, tools=[send_email])
    async with redrive.run(journal, job["run_id"], live=live) as run:
        result = await agents.Runner.run(agent, PROMPT)
        while result.interruptions:
            state = await agents.RunState.from_string(agent, result.to_state().to_string())
            for item in result.interruptions:
                call = item.raw_item
                name = f"{item.tool_name}:{getattr(call, 'call_id', None) or call['call_id']}"
                if redrive.await_approval(name, {"tool": item.tool_name}).approved:
                    state.approve(item)
                else:
                    state.reject(item)
            result = await agents.Runner.run(agent, state)
        output = first._agents_result(result)
        die_at("before_finish")
        return run.finish(output)
    return None


def agents_approval(job: dict[str, Any], journal: Any) -> Any:
    """Two deliveries of one run id: the agent asks to send, a person approves, it sends.

    Between them the person's decision is recorded (``journal.decide``) for
    every approval the suspended run asked. An offline job replays the run.
    """
    import asyncio

    from redrive.replay import pending_approvals

    if job.get("mode") == "offline":
        return asyncio.run(_approval_delivery(job, journal, live=False))
    output = asyncio.run(_approval_delivery(job, journal, live=True))
    if output is None:
        for asked in pending_approvals(journal, job["run_id"]):
            journal.decide(job["run_id"], asked["name"], True, by="ops@example.com")
        output = asyncio.run(_approval_delivery(job, journal, live=True))
    return output


# --- LangChain / LangGraph --------------------------------------------------------------------


def _chat_openai(job: dict[str, Any]) -> Any:
    """A ``ChatOpenAI`` on the scripted server, through redrive's HTTP clients."""
    from langchain_openai import ChatOpenAI

    from redrive.integrations.langchain import openai_http_clients

    clients = openai_http_clients(job["base_url"])
    key: Any = "sk-test"
    return ChatOpenAI(
        model="gpt-4o",
        base_url=job["base_url"],
        api_key=key,
        max_retries=0,
        http_client=clients[0],
        http_async_client=clients[1],
    )


def _failing_graph(job: dict[str, Any]) -> Any:
    """A prebuilt ReAct agent; its tool sends, then raises a ``ToolException`` for the model."""
    from langchain_core.tools import ToolException
    from langgraph.prebuilt import create_react_agent

    from redrive.integrations.langchain import tool

    effects = Effects(job["effects"])

    @tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer."""
        effects.send(to, idempotency_key)
        raise ToolException("the mailbox is full")

    send_email.handle_tool_error = True  # LangChain: the error's text becomes the tool's result

    return create_react_agent(_chat_openai(job), [send_email])


def langgraph_tool_error(job: dict[str, Any], run: redrive.Run) -> Any:
    """The graph's tool fails after its side effect; the model hears the error and answers."""
    state = _failing_graph(job).invoke({"messages": [("user", PROMPT)]})
    told = [m.content for m in state["messages"] if m.type == "tool"]
    return {"output": state["messages"][-1].content, "told": told}


async def langchain_structured(job: dict[str, Any], run: redrive.Run) -> Any:
    """The tool graph, then ``with_structured_output`` turns the answer into a model."""
    from pydantic import BaseModel

    class Sent(BaseModel):
        sent: bool
        summary: str

    state = await first._graph(job).ainvoke({"messages": [("user", PROMPT)]})
    llm = _chat_openai(job)
    made = await llm.with_structured_output(Sent).ainvoke(state["messages"])
    assert isinstance(made, Sent), made
    return {"output": made.model_dump()}


# --- pydantic-ai: message_history -------------------------------------------------------------


def _history(path: Path) -> list[Any]:
    """The conversation the user stored after the previous run finished (one earlier turn)."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    if not path.exists():
        earlier = [
            {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "Hi, order 7?"}]},
            {"kind": "response", "parts": [{"part_kind": "text", "content": "It shipped."}]},
        ]
        path.write_bytes(json.dumps(earlier).encode())
    return list(ModelMessagesTypeAdapter.validate_json(path.read_bytes()))


async def pydantic_history(job: dict[str, Any], run: redrive.Run) -> Any:
    """Continue a conversation the user stored (``message_history=``) in a new run.

    The user's store owns the history before the run: it is read again, the
    same, by every attempt (docs/framework-state.md says when to write it).
    """
    history = _history(Path(job["workdir"]) / "history.json")
    result = await first._pydantic_agent(job).run(PROMPT, message_history=history)
    return {
        "output": result.output,
        "usage": result.usage().total_tokens,
        "messages": len(result.all_messages()),
    }


async def litellm_transient(job: dict[str, Any], run: redrive.Run) -> Any:
    """The streamed litellm loop with litellm's own retries off, so the error reaches the job.

    litellm retries a 429 or 503 itself (``max_retries``, whatever the wrapped
    client's own setting); inside a run those retries are fine (the failed
    call was not paid). Here they are turned off, as this process patches
    ``acompletion``, to see what the run does when the error reaches the job.
    """
    import functools

    import litellm

    litellm.acompletion = functools.partial(litellm.acompletion, max_retries=0)
    return await bare.litellm_loop(job, run)


#: scenario name -> (driver, face); the first drivers serve the transient-error column
MORE_DRIVERS: dict[str, tuple[Any, str]] = {
    "anthropic-thinking": (anthropic_thinking, "sync"),
    "agents-approval": (agents_approval, "own"),
    "langgraph-tool-error": (langgraph_tool_error, "sync"),
    "langchain-structured": (langchain_structured, "async"),
    "pydantic-history": (pydantic_history, "async"),
    "agents-transient": (first.agents_loop, "async"),
    "pydantic-transient": (first.pydantic_loop, "async"),
    "langgraph-transient": (first.langgraph_sync, "sync"),
    "litellm-transient": (litellm_transient, "async"),
    "openai-transient": (bare.openai_chat_sync, "sync"),
    "anthropic-transient": (bare.anthropic_stream, "async"),
}
