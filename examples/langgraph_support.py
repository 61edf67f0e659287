"""A support agent as a LangGraph graph on ChatOpenAI, recorded and replayed by redrive.

Run it twice with the same job id: the second run replays the journal (no
model call, no email sent again). Needs ``pip install 'redrive[langchain]'``
and ``OPENAI_API_KEY`` (or ``OPENAI_BASE_URL``).

redrive and a LangGraph checkpointer divide the work: the checkpointer keeps
a thread's state between invocations; redrive makes one invocation
crash-safe (see the docstring of redrive.integrations.langchain).

    python examples/langgraph_support.py 42
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import redrive
from redrive.integrations.langchain import openai_http_clients, tool

journal = redrive.open_journal("runs.duckdb")


@tool(restart_safe=True)
def send_email(to: str, body: str, idempotency_key: str) -> str:
    """Send an email to a customer."""
    print(f"[email to {to}, key {idempotency_key}]", file=sys.stderr)
    return f"sent to {to}"


sync_http, async_http = openai_http_clients()  # every OpenAI request is a recorded step
llm = ChatOpenAI(model="gpt-4o", http_client=sync_http, http_async_client=async_http)
model = llm.bind_tools([send_email])


async def call_model(state: MessagesState) -> dict[str, Any]:
    """The graph's model node."""
    return {"messages": [await model.ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("model", call_model)
builder.add_node("tools", ToolNode([send_email]))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", tools_condition)
builder.add_edge("tools", "model")
graph = builder.compile()


async def handle(job_id: str, text: str) -> str:
    """Invoke the graph for one job; a retry with the same job id resumes or replays it."""
    async with redrive.run(journal, f"support:{job_id}", input={"text": text}) as run:
        state = await graph.ainvoke({"messages": [("user", text)]})
        return run.finish(str(state["messages"][-1].content))


if __name__ == "__main__":
    job = sys.argv[1] if len(sys.argv) > 1 else "42"
    print(asyncio.run(handle(job, "ada@example.com: my order arrived damaged")))
