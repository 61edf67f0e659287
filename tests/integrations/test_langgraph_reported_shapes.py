"""LangGraph human-in-the-loop tools as public reports wrote them, run under redrive.

langgraph#6626 and #6624: one model turn makes three parallel calls of tools
that each call ``interrupt()``; the resume answers all of them with one
``Command(resume={interrupt_id: value})``. langgraph#6577 (docs PR #6603): a
node re-executes from its start on resume, so a side effect before the
``interrupt()`` runs again. Here each tool charges (a ``restart_safe=False``
redrive tool, logged in a file outside the run) before or after its
``interrupt()``; under one redrive run id each charge is logged once and the
run finishes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.integrations.fakeapi import FINAL, HoldingServer, chat
from tests.integrations.lg_graphs import recorded_llm
from tests.integrations.test_langgraph_resume import (
    _MADE,
    PROMPT,
    _deliver,
    langgraph_installed,
    server,
)

__all__ = ["langgraph_installed", "server"]

pytestmark = pytest.mark.usefixtures("langgraph_installed")

SHAPES = ("c1", "s1", "t1")


def _turn() -> Any:
    """The model's turn: ``create_shape`` three times in parallel (langgraph#6626's calls)."""
    reply = chat(False)
    reply.body["choices"][0]["message"]["tool_calls"] = [
        {
            "id": f"call_{shape}",
            "type": "function",
            "function": {"name": "create_shape", "arguments": json.dumps({"shape_id": shape})},
        }
        for shape in SHAPES
    ]
    return reply


def _graph(
    base: str, effects: Path, order: str, before_draw: Callable[[str], None] = lambda _: None
) -> Any:
    """model -> ToolNode([create_shape]) -> model; ``create_shape`` charges and interrupts.

    ``order``: ``charge_first`` (the side effect before ``interrupt()``, #6577's
    shape) or ``ask_first`` (approve, then act: #6626's shape). ``before_draw`` is
    called with the shape before its ``draw`` step (to force an order of the calls).
    """
    from langchain_core.tools import tool as plain_tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import interrupt

    from redrive.integrations.langchain import tool

    @tool(name="draw", restart_safe=False)
    def draw(shape_id: str) -> str:
        """Draw the shape (a line in ``effects``, outside the process)."""
        with effects.open("a") as log:
            log.write(f"draw {shape_id}\n")
        return f"drew {shape_id}"

    @plain_tool
    def create_shape(shape_id: str) -> str:
        """Create a shape on the canvas, once a person approves it."""
        if order == "charge_first":
            before_draw(shape_id)
            drawn = draw.invoke({"shape_id": shape_id})
            answer = interrupt({"tool": "create_shape", "shapeId": shape_id})
        else:
            answer = interrupt({"tool": "create_shape", "shapeId": shape_id})
            before_draw(shape_id)
            drawn = draw.invoke({"shape_id": shape_id})
        return f"{drawn}: {answer}"

    llm = recorded_llm(base, [create_shape], _MADE)

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode([create_shape]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=InMemorySaver())


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("slow", [None, "c1", "s1"])
@pytest.mark.parametrize("order", ["charge_first", "ask_first"])
def test_parallel_tools_interrupting_resumed_by_one_map_draw_each_shape_once(
    server: HoldingServer, tmp_path: Path, order: str, slow: str | None
) -> None:
    """langgraph#6626: interrupts with distinct ids, answered by resume maps; each draw once.

    ``slow``: that shape's draw waits in the resumes, so the calls of ``draw`` come
    in another order than the one they were recorded in. The async face only: the
    sync face's ordering is an open finding (a ``DivergenceError``), not tested here.
    """
    from langgraph.types import Command

    deliveries = 0

    def before_draw(shape: str) -> None:
        if shape == slow and deliveries > 1:
            time.sleep(0.3)

    effects = tmp_path / "effects.log"
    graph = _graph(server.url + "/v1", effects, order, before_draw)
    server.add(_turn())
    server.add(chat(True))
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    config = {"configurable": {"thread_id": "ticket-7"}}
    deliveries = 1
    run = _deliver(journal, graph, {"messages": [("user", PROMPT)]}, "async")
    assert run.status == "suspended"
    pending = graph.get_state(config).interrupts
    while pending and deliveries <= len(SHAPES):
        assert len({i.id for i in pending}) == len(pending)
        deliveries += 1
        answers = {i.id: "approved" for i in pending}
        run = _deliver(journal, graph, Command(resume=answers), "async")
        pending = graph.get_state(config).interrupts
    assert (run.status, run.output) == ("succeeded", FINAL)
    assert sorted(_lines(effects)) == [f"draw {shape}" for shape in SHAPES]
    assert len(server.requests) == 2
