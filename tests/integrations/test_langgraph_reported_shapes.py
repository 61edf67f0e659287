"""LangGraph human-in-the-loop tools as public reports wrote them, run under redrive.

langgraph#6626 and #6624: one model turn makes three parallel calls of tools
that each call ``interrupt()``; the resume answers all of them with one
``Command(resume={interrupt_id: value})``. langgraph#6577 (docs PR #6603): a
node re-executes from its start on resume, so a side effect before the
``interrupt()`` runs again. Here each tool charges (a ``restart_safe=False``
redrive tool, logged in a file outside the run) before or after its
``interrupt()``; under one redrive run id each charge is logged once and the
run finishes, on both faces. On the sync face (``graph.invoke``) the calls run
in LangChain's thread pool, each in a silent copy of the node's context (one
redrive flow, shared); on the async face each is a task of its own. A resume
meets the calls in any order: a call that never ran may reach its draw before
a recorded sibling asks for its own again.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import redrive
from tests.conftest import examples
from tests.integrations.fakeapi import FINAL, HoldingServer, chat, serve
from tests.integrations.lg_graphs import recorded_llm
from tests.integrations.test_langgraph_resume import (
    _MADE,
    PROMPT,
    _close_clients,
    _deliver,
    langgraph_installed,
    server,
)
from tests.unit.test_shared_flows import approval_batches

__all__ = ["langgraph_installed", "server"]

pytestmark = pytest.mark.usefixtures("langgraph_installed")

SHAPES = ("c1", "s1", "t1")


def _turn(shapes: tuple[str, ...] = SHAPES) -> Any:
    """The model's turn: ``create_shape`` once per shape in parallel (langgraph#6626's calls)."""
    reply = chat(False)
    reply.body["choices"][0]["message"]["tool_calls"] = [
        {
            "id": f"call_{shape}",
            "type": "function",
            "function": {"name": "create_shape", "arguments": json.dumps({"shape_id": shape})},
        }
        for shape in shapes
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
@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("order", ["charge_first", "ask_first"])
def test_parallel_tools_interrupting_resumed_by_one_map_draw_each_shape_once(
    server: HoldingServer, tmp_path: Path, order: str, slow: str | None, face: str
) -> None:
    """langgraph#6626: interrupts with distinct ids, answered by resume maps; each draw once.

    ``slow``: that shape's draw waits in the resumes, so the calls of ``draw`` come
    in another order than the one they were recorded in. On the sync face, ``c1``
    slow (ask first) raised ``DivergenceError`` before shared flows: ``s1``'s draw,
    new, reached the position ``c1``'s was recorded at first.
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
    run = _deliver(journal, graph, {"messages": [("user", PROMPT)]}, face)
    assert run.status == "suspended"
    pending = graph.get_state(config).interrupts
    while pending and deliveries <= len(SHAPES):
        assert len({i.id for i in pending}) == len(pending)
        deliveries += 1
        answers = {i.id: "approved" for i in pending}
        run = _deliver(journal, graph, Command(resume=answers), face)
        pending = graph.get_state(config).interrupts
    assert (run.status, run.output) == ("succeeded", FINAL)
    assert sorted(_lines(effects)) == [f"draw {shape}" for shape in SHAPES]
    assert len(server.requests) == 2


#: A script: the shapes, the order of each call's ``draw`` and ``interrupt()``, the
#: batches of shapes each resume approves (in order), and each delivery's delay (ms)
#: before each shape's draw.
Script = tuple[tuple[str, ...], str, list[list[str]], list[dict[str, int]]]


@st.composite
def scripts(draw: Callable[..., Any]) -> Script:
    """2-4 parallel ``create_shape`` calls, approved in random batches, random delays."""
    k = draw(st.integers(2, 4))
    shapes = tuple(f"sh{i}" for i in range(k))
    order = draw(st.sampled_from(["ask_first", "charge_first"]))
    batches = approval_batches(draw, shapes)
    delay = st.sampled_from([0, 5, 60])
    delays = draw(
        st.lists(
            st.fixed_dictionaries({shape: delay for shape in shapes}),
            min_size=len(batches) + 1,
            max_size=len(batches) + 1,
        )
    )
    return shapes, order, batches, delays


def _approve_in_batches(tmp: Path, script: Script, face: str) -> None:
    """Deliver the job until its interrupts are all answered, one batch more each time.

    Each resume answers the pending interrupts of the shapes approved so far (the
    next batch added; more while none of them is pending). Nothing is drawn twice,
    the last delivery finishes, and the model is asked twice (its turn, its answer).
    """
    from langgraph.types import Command

    shapes, order, batches, delays = script
    delivery = 0
    effects = tmp / f"effects-{uuid.uuid4().hex}.log"
    journal = redrive.open_journal(str(tmp / f"runs-{uuid.uuid4().hex}.duckdb"))
    config = {"configurable": {"thread_id": "ticket-7"}}

    def pause(shape: str) -> None:
        time.sleep(delays[min(delivery, len(delays) - 1)].get(shape, 0) / 1000)

    with serve() as server:
        try:
            graph = _graph(server.url + "/v1", effects, order, pause)
            server.add(_turn(shapes))
            server.add(chat(True))
            run = _deliver(journal, graph, {"messages": [("user", PROMPT)]}, face)
            approved: set[str] = set()
            left = list(batches)
            pending = graph.get_state(config).interrupts
            while pending:
                assert run.status == "suspended"
                delivery += 1
                assert delivery <= 2 * len(shapes), "the interrupts never got all answered"
                answers: dict[str, str] = {}
                while not answers:
                    approved |= set(left.pop(0)) if left else set(shapes)
                    answers = {i.id: "ok" for i in pending if i.value["shapeId"] in approved}
                run = _deliver(journal, graph, Command(resume=answers), face)
                drawn = _lines(effects)
                assert len(drawn) == len(set(drawn)), f"a shape drawn twice: {drawn}"
                pending = graph.get_state(config).interrupts
            assert (run.status, run.output) == ("succeeded", FINAL)
            assert sorted(_lines(effects)) == [f"draw {shape}" for shape in shapes]
            assert len(server.requests) == 2
        finally:
            journal.close()
            _close_clients()


@pytest.mark.parametrize("face", ["sync", "async"])
@settings(
    max_examples=examples(default=6, ci=6, thorough=100),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=scripts())
@example(script=(SHAPES, "ask_first", [list(SHAPES)], [{}, {"c1": 300, "s1": 0, "t1": 0}]))
@example(
    script=(
        ("sh0", "sh1", "sh2"),
        "ask_first",
        [["sh0"], ["sh1", "sh2"]],
        [{}, {"sh0": 0, "sh1": 0, "sh2": 0}, {"sh0": 120, "sh1": 0, "sh2": 0}],
    )
)
def test_parallel_same_tool_calls_resumed_in_any_order_draw_each_once(
    tmp_path: Path, face: str, script: Script
) -> None:
    """k parallel ``create_shape`` calls, any approval order and delays: each draw once."""
    _approve_in_batches(tmp_path, script, face)
