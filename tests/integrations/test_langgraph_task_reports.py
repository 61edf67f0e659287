"""LangGraph ``@task`` results cached across an interrupt, as public reports shaped them.

langchain-ai/langgraph#6792 ("Resuming after interrupt doesn't reuse prior task
outputs when interrupt is in subgraph") and #6577 (the functional API under
interrupt): a ``@task`` runs (here it charges a card through a
``restart_safe=False`` redrive tool), then ``interrupt()`` pauses the graph;
``Command(resume=...)`` re-executes the entrypoint or node from its start, and
LangGraph hands the task's saved result back instead of running it again
(LangGraph 1.2 does so in every shape here: run without redrive, each charges
once). Under one redrive run id the resume must finish, charging once, and
the finished run replay offline.

It does not: see :data:`TASK_CACHED`. These tests are strict xfails until the
LangGraph integration learns which ``@task`` results the checkpointer hands back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest

import redrive
from tests.integrations.conftest import need

#: The mechanism, for the xfail reason and the report. redrive files each step
#: under the LangGraph task path that asked it (``"node_task|push_task"``: a
#: ``@task`` runs as a PUSH task under the node or entrypoint that called it). On
#: resume, ``rerun_tasks`` marks the interrupted node (or entrypoint) task as run
#: again and, as it is no subgraph, keeps *every* step under it askable
#: (``path + "|*"``), the ``@task``'s charge included. But LangGraph does not
#: run that ``@task`` again: its result is a saved ``__return__`` write of the
#: checkpoint the resume starts from (``checkpointer.get_tuple(config).pending_writes``;
#: ``get_state().tasks`` lists no PUSH task). So the charge is never asked, and
#: the resume ends with ``DivergenceError: the loop finished but the journal has
#: more steps, from seq 2 (tool charge)``; the card is not charged twice, but the
#: run cannot finish.
TASK_CACHED = (
    "redrive keeps a @task's steps askable on resume (path|* under the rerun node), but "
    "LangGraph hands the task's saved __return__ write back and never asks them: "
    "DivergenceError at the resume's end"
)


class _State(TypedDict):
    x: int
    out: str


def _graph(shape: str, face: str, charge: Callable[[int], str]) -> tuple[Any, Any]:
    """The graph of ``shape`` and its first input; a ``@task`` charges before ``interrupt()``."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint, task
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    if face == "sync":

        @task
        def pay(n: int) -> str:
            return charge(n)

        def paid(n: int) -> str:
            return str(pay(n).result())

    else:

        @task
        async def apay(n: int) -> str:
            return charge(n)

        paid = apay  # type: ignore[assignment]

    if shape == "node":

        def node(state: _State) -> dict[str, str]:
            return {"out": f"{paid(state['x'])}:{interrupt('ok?')}"}

        async def anode(state: _State) -> dict[str, str]:
            return {"out": f"{await paid(state['x'])}:{interrupt('ok?')}"}  # type: ignore[misc]

        builder = StateGraph(_State)
        builder.add_node("n", node if face == "sync" else anode)
        builder.add_edge(START, "n")
        builder.add_edge("n", END)
        return builder.compile(checkpointer=InMemorySaver()), {"x": 1, "out": ""}

    if face == "sync":

        @entrypoint(checkpointer=None if shape == "nested" else InMemorySaver())
        def flow(x: int) -> str:
            return f"{paid(x)}:{interrupt('ok?')}"

        if shape == "nested":

            @entrypoint(checkpointer=InMemorySaver())
            def parent(x: int) -> str:
                return str(flow.invoke(x))

            return parent, 1
        return flow, 1

    @entrypoint(checkpointer=None if shape == "nested" else InMemorySaver())
    async def aflow(x: int) -> str:
        return f"{await paid(x)}:{interrupt('ok?')}"  # type: ignore[misc]

    if shape == "nested":

        @entrypoint(checkpointer=InMemorySaver())
        async def aparent(x: int) -> str:
            return str(await aflow.ainvoke(x))

        return aparent, 1
    return aflow, 1


def _final(output: Any) -> str:
    return str(output["out"] if isinstance(output, dict) else output)


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("shape", ["entrypoint", "nested", "node"])
def test_without_redrive_the_task_is_handed_back_and_charges_once(face: str, shape: str) -> None:
    """The framework's own behaviour in these shapes (langgraph#6792 does not reproduce here)."""
    need("langchain")
    from langgraph.types import Command

    charged: list[int] = []

    def charge(n: int) -> str:
        charged.append(n)
        return f"charged {n}"

    graph, first = _graph(shape, face, charge)
    config = {"configurable": {"thread_id": "t"}}
    if face == "sync":
        assert "__interrupt__" in graph.invoke(first, config)
        assert _final(graph.invoke(Command(resume="yes"), config)) == "charged 1:yes"
    else:
        assert "__interrupt__" in asyncio.run(graph.ainvoke(first, config))
        done = asyncio.run(graph.ainvoke(Command(resume="yes"), config))
        assert _final(done) == "charged 1:yes"
    assert charged == [1]


@pytest.mark.xfail(strict=True, raises=redrive.DivergenceError, reason=TASK_CACHED)
@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("shape", ["entrypoint", "nested", "node"])
def test_a_task_that_charged_before_the_interrupt_is_handed_back_on_resume(
    face: str, shape: str, tmp_path: Path
) -> None:
    """langchain-ai/langgraph#6792, #6577: the resume finishes; the card is charged once."""
    need("langchain")
    from langgraph.types import Command

    from redrive.integrations.langgraph import ainvoke, invoke

    effects = tmp_path / "effects.log"

    @redrive.tool(restart_safe=False)
    def charge(n: int) -> str:
        with effects.open("a") as log:
            log.write(f"charge {n}\n")
        return f"charged {n}"

    graph, first = _graph(shape, face, charge)
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    config = {"configurable": {"thread_id": "t"}}

    def deliver(message: Any, **options: Any) -> tuple[str, Any]:
        if face == "sync":
            with redrive.run(journal, "task:1", **options) as run:
                run.finish(_final(invoke(graph, message, config)))
            return run.status, run.output

        async def go() -> tuple[str, Any]:
            async with redrive.run(journal, "task:1", **options) as run:
                run.finish(_final(await ainvoke(graph, message, config)))
            return run.status, run.output

        return asyncio.run(go())

    assert deliver(first)[0] == "suspended"
    assert deliver(Command(resume="yes")) == ("succeeded", "charged 1:yes")
    assert deliver(Command(resume="yes"), live=False) == ("succeeded", "charged 1:yes")
    assert effects.read_text().splitlines() == ["charge 1"]
    journal.close()
