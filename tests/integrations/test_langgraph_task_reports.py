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

The mechanism (it used to end in ``DivergenceError``): redrive files each step
under the LangGraph task path that asked it (``"node_task|push_task"``: a
``@task`` runs as a PUSH task under the node or entrypoint that called it). On
resume the interrupted node runs again and, as it is no subgraph, every step
under it was kept askable, the ``@task``'s charge included. But LangGraph does
not run that ``@task`` again: its result is a saved ``__return__`` write of the
checkpoint of its graph level (``checkpointer.get_tuple(config).pending_writes``;
``get_state().tasks`` lists no PUSH task). So the charge was never asked and the
resume ended with ``DivergenceError: the loop finished but the journal has more
steps, from seq 2 (tool charge)``. The checkpointer owns that result: redrive
now answers the steps of a ``@task`` whose ``__return__`` write it hands back
(``_langgraph_tasks.task_levels`` / ``returned_tasks``), at each subgraph level;
a resume pinned to a checkpoint the thread has moved past reruns the top
level's ``@task``s (they replay from the journal), while a subgraph resumes from
its own latest checkpoint (the nested shape's offline replay).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from tests.conftest import examples
from tests.integrations.conftest import need


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


def _tasks_graph(
    shape: str,
    face: str,
    segments: tuple[int, ...],
    parallel: bool,
    charge: Callable[[int], str],
    saver: Any = None,
) -> tuple[Any, Any]:
    """A graph of ``shape`` whose body runs ``segments[i]`` charging ``@task``s before interrupt i.

    The last segment runs after the last interrupt; the task charges ``n``
    for its place in the body (1, 2, ...), so each charge is told apart.
    ``parallel``: a segment's tasks are started together, then awaited.
    ``saver``: the checkpointer (None: an ``InMemorySaver``).
    """
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint, task
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    numbers = [
        list(range(sum(segments[:i]) + 1, sum(segments[: i + 1]) + 1)) for i in range(len(segments))
    ]

    @task
    def pay(n: int) -> str:
        return charge(n)

    @task
    async def apay(n: int) -> str:
        return charge(n)

    def body(_: Any) -> str:
        said: list[str] = []
        for at, seg in enumerate(numbers):
            if parallel:
                futures = [pay(n) for n in seg]
                said += [str(f.result()) for f in futures]
            else:
                said += [str(pay(n).result()) for n in seg]
            if at < len(numbers) - 1:
                said.append(str(interrupt(f"ok {at}?")))
        return ",".join(said)

    async def abody(_: Any) -> str:
        said: list[str] = []
        for at, seg in enumerate(numbers):
            if parallel:
                said += [str(r) for r in await asyncio.gather(*(apay(n) for n in seg))]
            else:
                said += [str(await apay(n)) for n in seg]
            if at < len(numbers) - 1:
                said.append(str(interrupt(f"ok {at}?")))
        return ",".join(said)

    run = body if face == "sync" else abody
    if shape == "node":

        def node(state: _State) -> dict[str, str]:
            return {"out": body(state)}

        async def anode(state: _State) -> dict[str, str]:
            return {"out": await abody(state)}

        builder = StateGraph(_State)
        builder.add_node("n", node if face == "sync" else anode)
        builder.add_edge(START, "n")
        builder.add_edge("n", END)
        return builder.compile(checkpointer=saver or InMemorySaver()), {"x": 1, "out": ""}
    flow = entrypoint(checkpointer=None if shape == "nested" else saver or InMemorySaver())(run)
    if shape != "nested":
        return flow, 1

    def parent(x: int) -> str:
        return str(flow.invoke(x))

    async def aparent(x: int) -> str:
        return str(await flow.ainvoke(x))

    return entrypoint(checkpointer=saver or InMemorySaver())(
        parent if face == "sync" else aparent
    ), 1


@settings(
    max_examples=examples(default=6, ci=20, thorough=200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shape=st.sampled_from(["entrypoint", "nested", "node"]),
    face=st.sampled_from(["sync", "async"]),
    segments=st.lists(st.integers(0, 2), min_size=2, max_size=3).map(tuple),
    parallel=st.booleans(),
)
def test_any_tasks_around_any_interrupts_charge_once_and_replay(
    shape: str,
    face: str,
    segments: tuple[int, ...],
    parallel: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Shape x face x @tasks before, between and after one or two interrupts x in parallel or not.

    Each resume finishes (suspended until the last interrupt is answered,
    then succeeded), every card is charged once, and the finished run
    replays offline to the same output.
    """
    need("langchain")
    from langgraph.types import Command

    from redrive.integrations.langgraph import ainvoke, invoke

    tmp = tmp_path_factory.mktemp("tasks")
    effects = tmp / "effects.log"
    effects.touch()

    @redrive.tool(restart_safe=False)
    def charge(n: int) -> str:
        with effects.open("a") as log:
            log.write(f"charge {n}\n")
        return f"c{n}"

    graph, first = _tasks_graph(shape, face, segments, parallel, charge)
    journal = redrive.open_journal(str(tmp / "runs.duckdb"))
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

    total = sum(segments)
    said: list[str] = []
    for at, seg in enumerate(segments):
        said += [f"c{n}" for n in range(sum(segments[:at]) + 1, sum(segments[:at]) + seg + 1)]
        if at < len(segments) - 1:
            said.append(f"a{at}")
    want = ",".join(said)
    status = deliver(first)[0]
    for at in range(len(segments) - 1):
        assert status == "suspended", (at, status)
        status, output = deliver(Command(resume=f"a{at}"))
    assert (status, output) == ("succeeded", want)
    last = Command(resume=f"a{len(segments) - 2}")
    assert deliver(last, live=False) == ("succeeded", want)
    charged = sorted(effects.read_text().splitlines(), key=lambda line: int(line.split()[1]))
    assert charged == [f"charge {n}" for n in range(1, total + 1)]
    journal.close()


def test_a_returned_task_answers_the_steps_under_it_at_its_level_only() -> None:
    """``returned_by``: under a handed-back ``@task`` at its level; never ``""``, never its node."""
    need("langchain")
    from redrive.integrations._langgraph_tasks import (
        kept_tasks,
        returned_by,
        returned_tasks,
        saved_tasks,
        task_levels,
    )

    class Tuple:
        def __init__(self, *writes: tuple[str, str]) -> None:
            self.pending_writes = [(task, channel, None) for task, channel in writes]

    returned = returned_tasks(
        [
            ("", Tuple(("node", "__interrupt__"), ("pay", "__return__"))),
            ("parent|", Tuple(("sub_pay", "__return__"))),
            ("other|", None),
        ]
    )
    assert returned == {"": {"pay"}, "parent|": {"sub_pay"}}
    assert returned_by("node|pay", returned) and returned_by("node|pay|inner", returned)
    assert returned_by("parent|flow|sub_pay", returned)
    assert not returned_by("node", returned) and not returned_by("node|other", returned)
    assert not returned_by("pay", returned)  # a pull task of that id is no @task's step
    assert not returned_by("", returned)  # an unnamed (in-flight) step is always kept
    note = {"node": [1], "node|pay": [2], "node|late": [3], "": [4]}
    assert kept_tasks(note, {"node", "node|*"}, returned) == {
        "": [4],
        "node": [1],
        "node|late": [3],
    }

    class Snap:
        def __init__(self, tasks: tuple[Any, ...], checkpoint: str | None = "c") -> None:
            self.tasks = tasks
            self.config = {"configurable": {"checkpoint_id": checkpoint}}

    class Task:
        def __init__(self, id: str, state: Any = None, result: Any = None) -> None:
            self.id, self.state, self.result = id, state, result

    finished = Snap(())
    start = Snap((Task("parent", state=finished), Task("flat")))
    assert [at for at, _ in task_levels(start, superseded=False)] == ["", "parent|"]
    # pinned past: the top level's @tasks rerun, a subgraph's own checkpoint still answers
    assert [at for at, _ in task_levels(start, superseded=True)] == ["parent|"]
    # a finished subgraph hands its output back whole under a pinned parent
    assert saved_tasks(start, superseded=True) == {"parent|*"}


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("shape", ["entrypoint", "nested", "node"])
def test_a_sqlite_saver_hands_the_task_back_too(face: str, shape: str, tmp_path: Path) -> None:
    """``SqliteSaver`` with ``invoke``, ``AsyncSqliteSaver`` with ``ainvoke``: its pending writes.

    @tasks before, between and after two interrupts; each charge once, the
    offline replay gives the same output.
    """
    need("langchain")
    pytest.importorskip("langgraph.checkpoint.sqlite")
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    from redrive.integrations.langgraph import ainvoke, invoke

    effects = tmp_path / "effects.log"
    effects.touch()

    @redrive.tool(restart_safe=False)
    def charge(n: int) -> str:
        with effects.open("a") as log:
            log.write(f"charge {n}\n")
        return f"c{n}"

    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    config = {"configurable": {"thread_id": "t"}}
    answers = [Command(resume="a0"), Command(resume="a1")]
    seen: list[tuple[str, Any]] = []
    if face == "sync":
        saver = SqliteSaver(sqlite3.connect(str(tmp_path / "cp.db"), check_same_thread=False))
        graph, first = _tasks_graph(shape, face, (1, 1, 1), False, charge, saver)
        for message, options in [
            (first, {}),
            *[(a, {}) for a in answers],
            (answers[1], {"live": False}),
        ]:
            with redrive.run(journal, "sq:1", **options) as run:
                run.finish(_final(invoke(graph, message, config)))
            seen.append((run.status, run.output))
    else:

        async def go() -> None:
            async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as asaver:
                graph, first = _tasks_graph(shape, face, (1, 1, 1), False, charge, asaver)
                steps = [(first, {}), *[(a, {}) for a in answers], (answers[1], {"live": False})]
                for message, options in steps:
                    async with redrive.run(journal, "sq:1", **options) as run:
                        run.finish(_final(await ainvoke(graph, message, config)))
                    seen.append((run.status, run.output))

        asyncio.run(go())
    want = "c1,a0,c2,a1,c3"
    assert seen == [
        ("suspended", None),
        ("suspended", None),
        ("succeeded", want),
        ("succeeded", want),
    ]
    assert effects.read_text().splitlines() == ["charge 1", "charge 2", "charge 3"]
    journal.close()
