"""LangGraph ``@task``s that call ``interrupt()`` themselves, as public reports shaped them.

* langchain-ai/langgraph#6577 ("Unexpected behavior of functional API under
  interrupt"), its own example: an ``@entrypoint`` calls four ``@task``s one
  after the other, each does its work and then calls ``interrupt()``. Each
  resume runs the entrypoint again from its start: the finished tasks are
  handed back, the interrupted one runs again from its start.
* langchain-ai/langgraph#3148 ("add test for interrupting multiple times from
  a task"): one ``@task`` calls ``interrupt()`` twice; it runs again from its
  start on each resume.
* langchain-ai/langgraph#4389 ("Fix double interrupt return caused by dynamic
  tasks"): ``@task``s started together, each interrupting; the interrupts are
  pending together and one ``Command(resume={id: answer, ...})`` answers them.

Here each task charges a card (a ``restart_safe=False`` redrive tool, counted in
a log outside the run) before it interrupts. A task that has not returned is
run again by LangGraph on resume, so its charge must replay from the journal
(it is not the checkpointer's: no ``__return__`` write); a task that returned is
handed back by the checkpointer and its charge is not asked. Under one run
id every resume must finish (suspended until the last answer), each card is
charged once, and the finished run replays offline to the same output.
Without redrive each card is charged several times in these shapes (the
interrupted task re-executes: LangGraph's documented rule, checked below), so
the log is the proof.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest

import redrive
from tests.integrations.conftest import need


class _State(TypedDict):
    x: int
    out: str


def _graph(
    shape: str, face: str, tasks: int, asks: int, together: bool, charge: Callable[[int], str]
) -> tuple[Any, Any]:
    """``tasks`` ``@task``s, each charging ``n`` then asking ``asks`` questions; and the input.

    ``together``: the tasks are started together, then awaited (their interrupts
    are pending together); else one after the other.
    """
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint, task
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def ask(n: int) -> str:
        return ",".join(str(interrupt(f"{n}.{i}")) for i in range(asks))

    @task
    def step(n: int) -> str:
        return f"{charge(n)}[{ask(n)}]"

    @task
    async def astep(n: int) -> str:
        return f"{charge(n)}[{ask(n)}]"

    numbers = range(1, tasks + 1)

    def body(_: Any) -> str:
        if together:
            futures = [step(n) for n in numbers]
            return " ".join(str(f.result()) for f in futures)
        return " ".join(str(step(n).result()) for n in numbers)

    async def abody(_: Any) -> str:
        if together:
            return " ".join(str(r) for r in await asyncio.gather(*(astep(n) for n in numbers)))
        return " ".join([str(await astep(n)) for n in numbers])

    if shape == "node":

        def node(state: _State) -> dict[str, str]:
            return {"out": body(state)}

        async def anode(state: _State) -> dict[str, str]:
            return {"out": await abody(state)}

        builder = StateGraph(_State)
        builder.add_node("n", node if face == "sync" else anode)
        builder.add_edge(START, "n")
        builder.add_edge("n", END)
        return builder.compile(checkpointer=InMemorySaver()), {"x": 1, "out": ""}
    flow = entrypoint(checkpointer=None if shape == "nested" else InMemorySaver())(
        body if face == "sync" else abody
    )
    if shape != "nested":
        return flow, 1

    def parent(x: int) -> str:
        return str(flow.invoke(x))

    async def aparent(x: int) -> str:
        return str(await flow.ainvoke(x))

    return entrypoint(checkpointer=InMemorySaver())(parent if face == "sync" else aparent), 1


def _final(output: Any) -> str:
    return str(output["out"] if isinstance(output, dict) else output)


def _expected(tasks: int, asks: int) -> str:
    return " ".join(
        f"c{n}[{','.join(f'yes {n}.{i}' for i in range(asks))}]" for n in range(1, tasks + 1)
    )


def _answers(graph: Any, config: Any, face: str) -> dict[str, str]:
    """Every pending interrupt answered: ``{interrupt id: "yes <question>"}``."""
    sync = face == "sync"
    snapshot = graph.get_state(config) if sync else asyncio.run(graph.aget_state(config))
    return {i.id: f"yes {i.value}" for i in snapshot.interrupts}


#: (tasks, questions per task, started together): #6577's four tasks one by one,
#: #3148's task asking twice, #4389's tasks interrupting together (once, then twice each)
SHAPES = [(4, 1, False), (1, 2, False), (2, 1, True), (2, 2, True)]
IDS = ["6577_four_tasks", "3148_asks_twice", "4389_together", "4389_together_twice"]


@pytest.mark.parametrize(("tasks", "asks", "together"), SHAPES, ids=IDS)
@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("shape", ["entrypoint", "nested", "node"])
def test_without_redrive_an_interrupted_task_charges_again_on_each_resume(
    shape: str, face: str, tasks: int, asks: int, together: bool
) -> None:
    """LangGraph's own rule: a ``@task`` that interrupted runs again from its start on resume."""
    need("langchain")
    from langgraph.types import Command

    charged: list[int] = []

    def charge(n: int) -> str:
        charged.append(n)
        return f"c{n}"

    graph, message = _graph(shape, face, tasks, asks, together, charge)
    config = {"configurable": {"thread_id": "t"}}
    for _ in range(tasks * asks + 1):
        if face == "sync":
            out = graph.invoke(message, config)
        else:
            out = asyncio.run(graph.ainvoke(message, config))
        if "__interrupt__" not in out:
            break
        message = Command(resume=_answers(graph, config, face))
    assert _final(out) == _expected(tasks, asks)
    assert sorted(set(charged)) == list(range(1, tasks + 1))
    assert len(charged) > tasks  # some card charged twice: the framework gives no once


@pytest.mark.parametrize(("tasks", "asks", "together"), SHAPES, ids=IDS)
@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("shape", ["entrypoint", "nested", "node"])
def test_a_task_that_charged_then_interrupted_charges_once_and_the_run_finishes(
    shape: str, face: str, tasks: int, asks: int, together: bool, tmp_path: Path
) -> None:
    """#6577 / #3148 / #4389 under one run id: each resume finishes, each card charged once."""
    need("langchain")
    from langgraph.types import Command

    from redrive.integrations.langgraph import ainvoke, invoke

    effects = tmp_path / "effects.log"
    effects.touch()

    @redrive.tool(restart_safe=False)
    def charge(n: int) -> str:
        with effects.open("a") as log:
            log.write(f"charge {n}\n")
        return f"c{n}"

    graph, first = _graph(shape, face, tasks, asks, together, charge)
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    config = {"configurable": {"thread_id": "t"}}

    def deliver(message: Any, **options: Any) -> tuple[str, Any]:
        if face == "sync":
            with redrive.run(journal, "tasks:1", **options) as run:
                run.finish(_final(invoke(graph, message, config)))
            return run.status, run.output

        async def go() -> tuple[str, Any]:
            async with redrive.run(journal, "tasks:1", **options) as run:
                run.finish(_final(await ainvoke(graph, message, config)))
            return run.status, run.output

        return asyncio.run(go())

    status, output = deliver(first)
    resumes: list[Any] = []
    for _ in range(tasks * asks):
        if status != "suspended":
            break
        resumes.append(Command(resume=_answers(graph, config, face)))
        status, output = deliver(resumes[-1])
    assert (status, output) == ("succeeded", _expected(tasks, asks))
    assert sorted(effects.read_text().splitlines()) == [f"charge {n}" for n in range(1, tasks + 1)]
    assert deliver(resumes[-1], live=False) == ("succeeded", _expected(tasks, asks))
    assert len(effects.read_text().splitlines()) == tasks
    journal.close()
