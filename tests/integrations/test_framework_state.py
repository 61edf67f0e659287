"""Frameworks that keep state of their own: who owns the history when a run resumes.

Issue 27, failures 1 and 2 (the crash-at-every-boundary versions are the
``agents-session`` and ``langgraph-interrupt`` cells of the conformance
matrix, tests/integrations/test_conformance_matrix.py):

1. An Agents SDK ``SQLiteSession`` under a resumed run resent its stored
   history plus the input (``DivergenceError``), and every failed attempt
   stored the input once more.
2. A LangGraph ``interrupt()`` resumed with ``Command(resume=...)``: under the
   same run id the run diverged and never finished; under a new one the tool
   call made before the interrupt (a card charge) ran again.

Here the run is interrupted in-process by a transient model error (a 503,
which leaves it resumable) or by the interrupt itself; both faces run.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, TOOL_ARGS, HoldingServer, chat, serve
from tests.integrations.matrix_scripts import interrupt as _interrupt
from tests.sdkserver import Reply

PROMPT = "Ada's order arrived damaged; email her an apology."
BUSY = Reply(status=503, body={"error": {"message": "overloaded", "type": "server_error"}})


@pytest.fixture
def server() -> Iterator[HoldingServer]:
    with serve() as running:
        yield running


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    """httpx clients a test made, closed at its end (no socket left to the collector)."""
    made: list[Any] = []
    yield made
    for client in made:
        if hasattr(client, "aclose"):
            asyncio.run(client.aclose())
        else:
            client.close()


# --- 1. OpenAI Agents SDK sessions ------------------------------------------------------------


def _agent(server: HoldingServer, sent: list[str]) -> tuple[Any, Any]:
    need("agents")
    import agents
    from openai import AsyncOpenAI

    from redrive.integrations.openai_agents import function_tool

    agents.set_tracing_disabled(True)

    @function_tool(restart_safe=False)
    def send_email(to: str, body: str) -> str:
        """Send an email.

        Args:
            to: the address.
            body: the text.
        """
        sent.append(to)
        return f"sent to {to}"

    client = redrive.wrap(
        AsyncOpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    )
    model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
    agent = agents.Agent(name="support", instructions="Help.", model=model, tools=[send_email])
    return agent, client


async def _attempt(
    journal: Any,
    server: HoldingServer,
    sent: list[str],
    session: Any,
    *,
    run_id: str = "support:1",
    text: str = PROMPT,
) -> Any:
    """One delivery of the job (its own client: each ``asyncio.run`` has its own loop)."""
    import agents

    agent, client = _agent(server, sent)
    try:
        async with redrive.run(journal, run_id) as run:
            result = await agents.Runner.run(agent, text, session=session)
            return run.finish(result.final_output)
    finally:
        await client.close()


def test_a_bare_session_is_refused_when_the_run_starts_with_what_to_do(
    server: HoldingServer, tmp_path: Path
) -> None:
    """A bare session is refused before the first attempt sends anything (not at the resume,
    after it paid and acted); followed, the advice (wrap it) runs the job once."""
    import agents

    need("agents")
    from redrive.integrations.openai_agents import RecordedSession, UnrecordedSessionError

    sent: list[str] = []
    server.add(chat(False), chat(True))
    store = agents.SQLiteSession("conv-1", str(tmp_path / "s.db"))
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    with pytest.raises(UnrecordedSessionError) as caught:
        asyncio.run(_attempt(journal, server, sent, store))
    assert "RecordedSession" in str(caught.value)
    assert sent == [] and asyncio.run(store.get_items()) == []
    assert asyncio.run(_attempt(journal, server, sent, RecordedSession(store))) == FINAL
    assert sent == ["ada@example.com"]


def test_a_recorded_session_resumes_with_one_copy_of_each_item(
    server: HoldingServer, tmp_path: Path
) -> None:
    """Interrupted after the tool (503), resumed twice more: one input, one email, one answer."""
    need("agents")
    import agents

    from redrive.integrations.openai_agents import RecordedSession

    sent: list[str] = []
    server.add(chat(False), BUSY, BUSY, chat(True))
    store = agents.SQLiteSession("conv-1", str(tmp_path / "s.db"))
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    for _ in range(2):  # each failed attempt must not store the input again
        with pytest.raises(Exception, match="overloaded"):
            asyncio.run(_attempt(journal, server, sent, RecordedSession(store)))
    assert asyncio.run(_attempt(journal, server, sent, RecordedSession(store))) == FINAL
    items = asyncio.run(store.get_items())
    assert [i.get("role") for i in items].count("user") == 1
    assert [i.get("type") for i in items].count("function_call") == 1
    assert sent == ["ada@example.com"]
    assert len(server.requests) == 4  # call 1 once, the 503s, the answer
    # a second conversation turn on the same session is a new run that sees turn 1
    server.add(chat(True))
    turn_two = _attempt(
        journal, server, sent, RecordedSession(store), run_id="support:2", text="thanks"
    )
    assert asyncio.run(turn_two) == FINAL
    sent_body = json.loads(server.requests[-1].body)
    assert [m["role"] for m in sent_body["messages"]].count("user") == 2


# --- 2. LangGraph interrupts ------------------------------------------------------------------


def _graph(server: HoldingServer, charges: list[int], checkpointer: Any, closing: list[Any]) -> Any:
    need("langchain")
    from tests.integrations.lg_graphs import tool_node_graph

    def charge() -> str:
        charges.append(1)
        return "charged"

    return tool_node_graph(server.url + "/v1", charge, checkpointer, closing)


def _saver(kind: str, tmp: Path, closing: list[Any]) -> Any:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(str(tmp / "cp.db"), check_same_thread=False)
        closing.append(conn)
        return SqliteSaver(conn)
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


@pytest.mark.parametrize(
    ("saver", "face"),
    # SqliteSaver is sync only (its async twin needs aiosqlite)
    [("memory", "sync"), ("memory", "async"), ("sqlite", "sync")],
)
def test_an_interrupt_resumed_under_the_same_run_id_charges_once_and_finishes(
    server: HoldingServer, tmp_path: Path, saver: str, face: str, closing: list[Any]
) -> None:
    """One turn charges and interrupts; ``Command(resume=...)`` replays the charge, finishes."""
    need("langchain")
    from langgraph.types import Command

    from redrive.integrations.langgraph import ainvoke, invoke

    charges: list[int] = []
    graph = _graph(server, charges, _saver(saver, tmp_path, closing), closing)
    server.add(*_interrupt())
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    config = {"configurable": {"thread_id": "ticket-7"}}

    def deliver(message: Any) -> redrive.Run:
        if face == "sync":
            with redrive.run(journal, "job:7") as run:
                state = invoke(graph, message, config)
                run.finish(state["messages"][-1].content)
            return run

        async def go() -> redrive.Run:
            async with redrive.run(journal, "job:7") as run:
                state = await ainvoke(graph, message, config)
                run.finish(state["messages"][-1].content)
            return run

        return asyncio.run(go())

    first = deliver({"messages": [("user", PROMPT)]})
    assert first.status == "suspended"
    assert [i.value for i in graph.get_state(config).interrupts] == ["Also refund?"]
    second = deliver(Command(resume="yes"))
    assert (second.status, second.output) == ("succeeded", FINAL)
    assert charges == [1]
    assert len(server.requests) == 2
    # the tool message the model got after the resume carries the recorded charge
    last = json.loads(server.requests[-1].body)["messages"]
    assert [m.get("content") for m in last if m["role"] == "tool"] == ["charged", "yes"]
    assert TOOL_ARGS["to"] in json.dumps(last)


def test_an_interrupt_resumed_under_another_run_id_is_refused_before_anything_runs(
    server: HoldingServer, tmp_path: Path, closing: list[Any]
) -> None:
    """Under a new run id the charge would run again: refused, naming the run to use."""
    need("langchain")
    from langgraph.types import Command

    from redrive.integrations.langgraph import InterruptResumedElsewhereError, invoke

    charges: list[int] = []
    graph = _graph(server, charges, _saver("memory", tmp_path, closing), closing)
    server.add(*_interrupt())
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    config = {"configurable": {"thread_id": "ticket-7"}}
    with redrive.run(journal, "job:7"):
        invoke(graph, {"messages": [("user", PROMPT)]}, config)
    with pytest.raises(InterruptResumedElsewhereError) as caught, redrive.run(journal, "job:8"):
        invoke(graph, Command(resume="yes"), config)
    assert caught.value.next_steps[0].params == {"run_id": "job:7"}
    assert charges == [1]
    assert len(server.requests) == 1
