"""The conformance matrix's framework scenarios: one agent loop per framework feature.

The Agents SDK, pydantic-ai and LangChain / LangGraph loops (the bare tool
loops of litellm and the OpenAI and Anthropic SDKs are in matrix_bare.py).
Each driver takes the job (``base_url``, ``effects``, ``workdir``...) and the
active run, runs the loop through the real framework against the scripted
server, and returns a JSON value the parent compares across attempts (the
answer, and the usage the framework reports where it reports one).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redrive
from tests.integrations.matrix_child import PROMPT, Effects, die_at

# --- OpenAI Agents SDK ------------------------------------------------------------------------


class KillingSession:
    """A session that dies right after its second write, when the job asks for it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)
        self.writes = 0

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(await self.inner.get_items(limit))

    async def add_items(self, items: list[Any]) -> None:
        await self.inner.add_items(items)
        self.writes += 1
        if self.writes == 2:
            die_at("session_write")

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()


def _agents_setup(job: dict[str, Any], sync: bool = False) -> tuple[Any, Any, Any]:
    import agents
    from openai import AsyncOpenAI

    from redrive.integrations.openai_agents import function_tool

    agents.set_tracing_disabled(True)
    effects = Effects(job["effects"])
    failing = job["scenario"] == "agents-tool-error"

    @function_tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer.

        Args:
            to: the address.
            body: the text.
        """
        sent = effects.send(to, idempotency_key)
        if failing:
            raise RuntimeError("the mailbox is full")
        return sent

    client = redrive.wrap(AsyncOpenAI(base_url=job["base_url"], api_key="sk-test", max_retries=0))
    if job["scenario"] == "agents-responses":
        model: Any = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
    else:
        model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
    return agents, model, send_email


def _agents_result(result: Any) -> dict[str, Any]:
    output = result.final_output
    if hasattr(output, "model_dump"):
        output = output.model_dump()
    return {"output": output, "usage": result.context_wrapper.usage.total_tokens}


async def agents_loop(job: dict[str, Any], run: redrive.Run) -> Any:
    agents, model, send_email = _agents_setup(job)
    name = job["scenario"]
    agent = agents.Agent(name="support", instructions="Help.", model=model, tools=[send_email])
    if name == "agents-handoff":
        billing = agent.clone(name="billing")
        agent = agents.Agent(name="triage", instructions="Route.", model=model, handoffs=[billing])
    if name == "agents-structured":
        from pydantic import BaseModel

        class Sent(BaseModel):
            sent: bool
            summary: str

        agent = agent.clone(output_type=Sent)
    if name == "agents-stream":
        streamed = agents.Runner.run_streamed(agent, PROMPT)
        async for _ in streamed.stream_events():
            pass
        return {"output": streamed.final_output}
    if name == "agents-session":
        from redrive.integrations.openai_agents import RecordedSession

        store = agents.SQLiteSession("conv-1", str(Path(job["workdir"]) / "sessions.db"))
        session = RecordedSession(KillingSession(store))
        result = await agents.Runner.run(agent, PROMPT, session=session)
        items = await store.get_items()
        inputs = [i for i in items if i.get("role") == "user"]
        return {**_agents_result(result), "items": len(items), "inputs": len(inputs)}
    return _agents_result(await agents.Runner.run(agent, PROMPT))


def agents_sync(job: dict[str, Any], run: redrive.Run) -> Any:
    agents, model, send_email = _agents_setup(job)
    agent = agents.Agent(name="support", instructions="Help.", model=model, tools=[send_email])
    return _agents_result(agents.Runner.run_sync(agent, PROMPT))


# --- pydantic-ai ------------------------------------------------------------------------------


def _pydantic_agent(job: dict[str, Any]) -> Any:
    import pydantic_ai

    from redrive.integrations.pydantic_ai import tool

    effects = Effects(job["effects"])

    @tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer."""
        if job["scenario"] == "pydantic-retry" and body[:1].islower():
            raise pydantic_ai.ModelRetry("start the body with a capital letter")
        return effects.send(to, idempotency_key)

    if job["scenario"] == "pydantic-anthropic":
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        root = job["base_url"].removesuffix("/v1")
        client = redrive.wrap(AsyncAnthropic(base_url=root, api_key="sk-ant-t", max_retries=0))
        model: Any = AnthropicModel(
            "claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=client)
        )
    else:
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        oclient = redrive.wrap(
            AsyncOpenAI(base_url=job["base_url"], api_key="sk-test", max_retries=0)
        )
        model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=oclient))
    output_type: Any = str
    if job["scenario"] == "pydantic-structured":
        from pydantic import BaseModel

        class Sent(BaseModel):
            sent: bool
            summary: str

        output_type = Sent
    return pydantic_ai.Agent(
        model, instructions="Help.", tools=[send_email], output_type=output_type
    )


def _pydantic_result(output: Any, usage: Any) -> dict[str, Any]:
    if hasattr(output, "model_dump"):
        output = output.model_dump()
    return {"output": output, "usage": usage.total_tokens}


async def pydantic_loop(job: dict[str, Any], run: redrive.Run) -> Any:
    agent = _pydantic_agent(job)
    if job["scenario"] == "pydantic-stream":
        async with agent.run_stream(PROMPT) as streamed:
            output = await streamed.get_output()
            return _pydantic_result(output, streamed.usage())
    result = await agent.run(PROMPT)
    return _pydantic_result(result.output, result.usage())


def pydantic_sync(job: dict[str, Any], run: redrive.Run) -> Any:
    result = _pydantic_agent(job).run_sync(PROMPT)
    return _pydantic_result(result.output, result.usage())


# --- LangChain / LangGraph --------------------------------------------------------------------


def _graph(job: dict[str, Any], checkpointer: Any = None, human: bool = False) -> Any:
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from redrive.integrations.langchain import openai_http_clients, tool

    effects = Effects(job["effects"])

    @tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer."""
        return effects.send(to, idempotency_key)

    tools: list[Any] = [send_email]
    if human:
        from langchain_core.tools import tool as plain_tool
        from langgraph.types import interrupt

        @plain_tool
        def ask_human(question: str) -> str:
            """Ask the person in charge."""
            return str(interrupt(question))

        tools.append(ask_human)
    sync_http, async_http = openai_http_clients(job["base_url"])
    llm = ChatOpenAI(
        model="gpt-4o",
        base_url=job["base_url"],
        api_key="sk-test",  # type: ignore[arg-type]
        max_retries=0,
        streaming=job["scenario"] == "langgraph-stream",
        http_client=sync_http,
        http_async_client=async_http,
    ).bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    is_async = job["scenario"] in ("langgraph-tools", "langgraph-interrupt-async")
    builder.add_node("model", acall_model if is_async else call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


async def langgraph_loop(job: dict[str, Any], run: redrive.Run) -> Any:
    state = await _graph(job).ainvoke({"messages": [("user", PROMPT)]})
    return {"output": state["messages"][-1].content}


def langgraph_sync(job: dict[str, Any], run: redrive.Run) -> Any:
    state = _graph(job).invoke({"messages": [("user", PROMPT)]})
    return {"output": state["messages"][-1].content}


def langgraph_interrupt(job: dict[str, Any], journal: Any) -> Any:
    """A job of two queue messages on one run id: start the graph, then resume its interrupt.

    The first stops at ``interrupt()`` (the run is suspended); the second
    resumes it with ``Command(resume=...)``. A message is acked (a line in
    ``acked.log``) once its block ended, so a process killed mid-message gets
    it again, as a queue redelivers it.
    """
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    from redrive.integrations.langgraph import invoke

    acked = Path(job["workdir"]) / f"acked-{job['cell']}.log"
    done = acked.read_text().splitlines() if acked.exists() else []
    if job.get("mode") == "offline":
        return json.loads(done[-1])
    conn = sqlite3.connect(str(Path(job["workdir"]) / "checkpoints.db"), check_same_thread=False)
    graph = _graph(job, SqliteSaver(conn), human=True)
    config = {"configurable": {"thread_id": "ticket-7"}}
    messages = [{"messages": [("user", PROMPT)]}, Command(resume="yes")]
    output: Any = None
    for message in messages[len(done) :]:
        with redrive.run(journal, job["run_id"]) as run:
            state = invoke(graph, message, config)
            die_at("before_finish")
            output = run.finish(state["messages"][-1].content)
        with acked.open("a") as log:
            log.write(json.dumps({"output": output, "status": run.status}) + "\n")
    return json.loads(acked.read_text().splitlines()[-1])


#: scenario name -> (driver, face: "sync", "async" or "own")
DRIVERS: dict[str, tuple[Callable[..., Any], str]] = {
    "agents-tools": (agents_loop, "async"),
    "agents-sync": (agents_sync, "sync"),
    "agents-stream": (agents_loop, "async"),
    "agents-responses": (agents_loop, "async"),
    "agents-session": (agents_loop, "async"),
    "agents-handoff": (agents_loop, "async"),
    "agents-structured": (agents_loop, "async"),
    "agents-tool-error": (agents_loop, "async"),
    "pydantic-tools": (pydantic_loop, "async"),
    "pydantic-sync": (pydantic_sync, "sync"),
    "pydantic-stream": (pydantic_loop, "async"),
    "pydantic-structured": (pydantic_loop, "async"),
    "pydantic-retry": (pydantic_loop, "async"),
    "pydantic-anthropic": (pydantic_loop, "async"),
    "langgraph-tools": (langgraph_loop, "async"),
    "langgraph-sync": (langgraph_sync, "sync"),
    "langgraph-stream": (langgraph_loop, "async"),
    "langgraph-interrupt": (langgraph_interrupt, "own"),
}
