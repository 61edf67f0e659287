"""LangGraph interrupts in shapes users build: subgraphs, ``Send`` fan-out, left-behind tool calls.

A subgraph keeps checkpoints of its own. When a resume runs the parent
task again, the subgraph resumes from its checkpoint and runs again only
its tasks without saved writes; a subgraph node that finished before the
interrupt is not asked again (langgraph#4796, #2870, #4028). Before, the
resume kept every step of the parent task askable and ended with the
finished node's model call and charge unasked: ``DivergenceError``, the job
never finished.

``ToolNode`` gathers its calls with ``asyncio.gather``: an ``interrupt()`` in
one call gets out while a sibling call has not begun yet (a sync tool's
thread not started; langgraph#6533's shape: several calls, some interrupt).
Waiting for the tool steps already open did not cover it: the sibling began
its charge after that wait, the run suspended, the charge's outcome was never
journaled, and the resume either found it in flight or charged again (seen
2 of 6 times unforced). The run now refuses tool steps not yet begun once the
graph stopped at an interrupt; the resume asks the call again, once.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

import redrive
from tests.integrations.fakeapi import FINAL, HoldingServer, chat
from tests.integrations.lg_graphs import recorded_llm, tool_node_graph
from tests.integrations.matrix_scripts import interrupt as _interrupt
from tests.integrations.test_langgraph_resume import (
    _MADE,
    PROMPT,
    _deliver,
    langgraph_installed,
    server,
)

__all__ = ["langgraph_installed", "server"]

pytestmark = pytest.mark.usefixtures("langgraph_installed")


def _charge_tool(effects: Path) -> Any:
    from redrive.integrations.langchain import tool

    @tool(name="charge", restart_safe=False)
    def charge(amount: int) -> str:
        """Charge the card (a line in ``effects``, a log outside the process)."""
        with effects.open("a") as log:
            log.write(f"charge {amount}\n")
        return f"charged {amount}"

    return charge


def _chain(state: Any, nodes: dict[str, Any]) -> Any:
    """A ``StateGraph`` over ``state`` running ``nodes`` in order, uncompiled."""
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(state)
    names = [START, *nodes, END]
    for name, node in nodes.items():
        builder.add_node(name, node)
    for here, there in itertools.pairwise(names):
        builder.add_edge(here, there)
    return builder


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _graph(base: str, effects: Path, shape: str) -> Any:
    """A subgraph ``work`` (model, charge) -> ``ask`` (interrupt), under a parent graph.

    ``shape``: ``node`` (the compiled subgraph is the parent's node) or
    ``function`` (a parent node invokes it).
    """
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import MessagesState
    from langgraph.types import interrupt

    charge = _charge_tool(effects)
    llm = recorded_llm(base, [], _MADE)

    def work(state: Any) -> dict[str, Any]:
        said = llm.invoke(state["messages"])
        return {"messages": [said, ("ai", charge.invoke({"amount": 1}))]}

    def ask(state: Any) -> dict[str, Any]:
        return {"messages": [("user", str(interrupt("ok?")))]}

    subgraph = _chain(MessagesState, {"work": work, "ask": ask}).compile()

    def call_sub(state: Any) -> dict[str, Any]:
        out = subgraph.invoke(state)
        return {"messages": out["messages"][len(state["messages"]) :]}

    parent = _chain(MessagesState, {"sub": subgraph if shape == "node" else call_sub})
    return parent.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("shape", ["node", "function"])
@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_subgraph_node_that_finished_before_the_interrupt_is_not_waited_for(
    server: HoldingServer, tmp_path: Path, face: str, shape: str
) -> None:
    """langgraph#4796's shape: the resume asks ``ask`` only; ``work`` paid and charged once."""
    from langgraph.types import Command

    effects = tmp_path / "effects.log"
    graph = _graph(server.url + "/v1", effects, shape)
    server.add(chat(True))
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    run = _deliver(journal, graph, {"messages": [("user", PROMPT)]}, face)
    assert run.status == "suspended"
    run = _deliver(journal, graph, Command(resume="yes"), face)
    assert (run.status, run.output) == ("succeeded", "yes")
    assert _lines(effects) == ["charge 1"]
    assert len(server.requests) == 1


class _Fan(TypedDict):
    items: list[str]
    out: Annotated[list[str], operator.add]
    messages: list[Any]


class _Child(TypedDict):
    item: str
    out: Annotated[list[str], operator.add]


def _fanout(effects: Path) -> Any:
    """``Send`` one child subgraph per item; each child charges, then interrupts."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send, interrupt

    charge = _charge_tool(effects)

    def pay(state: _Child) -> dict[str, Any]:
        return {"out": [charge.invoke({"amount": len(state["item"])})]}

    def ask(state: _Child) -> dict[str, Any]:
        return {"out": [f"{state['item']}:{interrupt(state['item'])}"]}

    child = _chain(_Child, {"pay": pay, "ask": ask})

    def fan(state: _Fan) -> list[Any]:
        return [Send("child", {"item": item, "out": []}) for item in state["items"]]

    def done(state: _Fan) -> dict[str, Any]:
        return {"messages": [AIMessage(" ".join(sorted(state["out"])))]}

    parent = StateGraph(_Fan)
    parent.add_node("child", child.compile())
    parent.add_node("done", done)
    parent.add_conditional_edges(START, fan, ["child"])
    parent.add_edge("child", "done")
    parent.add_edge("done", END)
    return parent.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_send_fanout_children_that_charged_then_interrupted_resume_once(
    tmp_path: Path, face: str
) -> None:
    """langgraph#4028's shape: two ``Send`` branches, one resume map answering both."""
    from langgraph.types import Command

    effects = tmp_path / "effects.log"
    graph = _fanout(effects)
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    run = _deliver(journal, graph, {"items": ["a", "bb"], "out": [], "messages": []}, face)
    assert run.status == "suspended"
    pending = graph.get_state({"configurable": {"thread_id": "ticket-7"}}).interrupts
    assert len(pending) == 2
    run = _deliver(journal, graph, Command(resume={i.id: "ok" for i in pending}), face)
    assert (run.status, run.output) == ("succeeded", "a:ok bb:ok charged 1 charged 2")
    assert sorted(_lines(effects)) == ["charge 1", "charge 2"]


# --- a tool call begun after the graph stopped at an interrupt (langgraph#6533's shape)


class _Held:
    """The graph, telling when ``ainvoke`` returned; the state read after it waits for the charge.

    ``aget_state`` after the graph returned waits (at most a second) until
    the left-behind charge's body began: before the fix it always began, so
    the run's block ended with the charge in flight.
    """

    def __init__(self) -> None:
        self._graph: Any = None
        self.returned = threading.Event()
        self.began = threading.Event()
        self.invocations = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
        self.returned.clear()
        self.invocations += 1
        try:
            return await self._graph.ainvoke(*args, **kwargs)
        finally:
            self.returned.set()

    async def aget_state(self, *args: Any, **kwargs: Any) -> Any:
        if self.returned.is_set():
            await asyncio.to_thread(self.began.wait, 1.0)
        return await self._graph.aget_state(*args, **kwargs)


def test_a_tool_call_begun_after_the_graph_stopped_at_an_interrupt_runs_once(
    server: HoldingServer, tmp_path: Path
) -> None:
    """Refused in the stopped delivery (nothing ran), asked again and run once by the resume."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from redrive.replay import current_run

    charges: list[int] = []
    graph = _Held()

    def begin_after_the_graph_returned() -> None:
        if graph.invocations == 1:
            assert graph.returned.wait(30), "the graph never returned"

    def held_charge() -> str:
        """Held until the run's block ended (at most a second), then charges."""
        graph.began.set()
        run = current_run()
        for _ in range(100):
            if run is None or run.status != "running" or threading.Event().wait(0.01):
                break
        charges.append(1)
        return "charged"

    graph._graph = tool_node_graph(
        server.url + "/v1",
        held_charge,
        InMemorySaver(),
        _MADE,
        charge_first=begin_after_the_graph_returned,
    )
    server.add(*_interrupt())
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    assert _deliver(journal, graph, {"messages": [("user", PROMPT)]}, "async").status == "suspended"
    done = _deliver(journal, graph, Command(resume="yes"), "async")
    assert (done.status, done.output) == ("succeeded", FINAL)
    assert charges == [1]
    assert len(server.requests) == 2
