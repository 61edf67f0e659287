"""One delivery of a LangGraph ``@task`` + ``interrupt()`` job in a child that may die mid-charge.

Usage: ``python -m tests.integrations.lg_task_kill_child JOB.json`` (or
``tests.integrations.lg_task_kill_child:main`` from a warm parent,
tests/crash/warm.py). The job names the journal, the ``SqliteSaver`` file, the
side-effect log (outside the process), the shape (``entrypoint``: a functional
``@entrypoint``; ``nested``: an entrypoint invoked inside another; ``node``: a
``StateGraph`` node), the face (``sync``: ``invoke`` with ``SqliteSaver``,
``async``: ``ainvoke`` with ``AsyncSqliteSaver``) and the message: ``null``
(the first delivery) or the answer (``Command(resume=answer)``).

The body, in every shape: the ``@task`` ``pay(1)`` charges card 1, then
``interrupt("ok?")`` (in the body, or with ``inside`` in the ``@task`` itself,
after its charge); after the answer the ``@task`` ``pay(2)`` charges card 2
and the body itself charges card 3 (a tool step outside any ``@task``). A
charge is a ``restart_safe=False`` redrive tool whose body appends ``draw N
key=<idempotency key>`` to the log (fsynced), then SIGKILLs this process when
the job's ``kill`` is ``N`` (:class:`tests.integrations.lg_kill_child.Draws`):
the charge happened, its result is not journaled. With ``recover`` set, the
tool's ``recover()`` looks the key up in the log.

The child runs the delivery in ``redrive.run(journal, "job:7")`` and prints
one JSON line: the run's status and output and the interrupts pending after
it, or the error.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any, TypedDict

import redrive
from tests.integrations.lg_kill_child import CONFIG, RUN_ID, Draws, deliver


class _State(TypedDict):
    x: int
    out: str


def task_graph(
    shape: str, face: str, draws: Draws, saver: Any, inside: bool = False
) -> tuple[Any, Any]:
    """The graph of ``shape`` for ``face`` with ``saver`` compiled in, and its first input.

    ``inside``: ``pay(1)`` asks the question itself, after its charge (it has not
    returned when the graph stops: LangGraph runs it again on resume).
    """
    from langgraph.func import entrypoint, task
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    @redrive.tool(restart_safe=False, recover=draws.recover if draws.recovers else None)
    def charge(n: int) -> str:
        return draws.draw(n)

    @task
    def pay(n: int) -> str:
        return charge(n)

    @task
    async def apay(n: int) -> str:
        return charge(n)

    @task
    def ask(n: int) -> str:
        return f"{charge(n)}:{interrupt('ok?')}"

    @task
    async def aask(n: int) -> str:
        return f"{charge(n)}:{interrupt('ok?')}"

    def body(_: Any) -> str:
        first = str(ask(1).result()) if inside else f"{pay(1).result()}:{interrupt('ok?')}"
        return f"{first}:{pay(2).result()}:{charge(3)}"

    async def abody(_: Any) -> str:
        first = str(await aask(1)) if inside else f"{await apay(1)}:{interrupt('ok?')}"
        return f"{first}:{await apay(2)}:{charge(3)}"

    if shape == "node":

        def node(state: _State) -> dict[str, str]:
            return {"out": body(state)}

        async def anode(state: _State) -> dict[str, str]:
            return {"out": await abody(state)}

        builder = StateGraph(_State)
        builder.add_node("n", node if face == "sync" else anode)
        builder.add_edge(START, "n")
        builder.add_edge("n", END)
        return builder.compile(checkpointer=saver), {"x": 1, "out": ""}
    flow = entrypoint(checkpointer=None if shape == "nested" else saver)(
        body if face == "sync" else abody
    )
    if shape != "nested":
        return flow, 1

    def parent(x: int) -> str:
        return str(flow.invoke(x))

    async def aparent(x: int) -> str:
        return str(await flow.ainvoke(x))

    return entrypoint(checkpointer=saver)(parent if face == "sync" else aparent), 1


def _final(output: Any) -> str:
    return str(output["out"] if isinstance(output, dict) else output)


def _message(job: dict[str, Any], first: Any) -> Any:
    from langgraph.types import Command

    return first if job.get("resume") is None else Command(resume=job["resume"])


def _pending(snapshot: Any) -> list[dict[str, str]]:
    return [{"id": str(i.id), "value": str(i.value)} for i in snapshot.interrupts]


def _sync(job: dict[str, Any], journal: Any, draws: Draws) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from redrive.integrations.langgraph import invoke

    conn = sqlite3.connect(job["checkpoints"], check_same_thread=False)
    try:
        graph, first = task_graph(
            job["shape"], "sync", draws, SqliteSaver(conn), bool(job.get("inside"))
        )
        with redrive.run(journal, RUN_ID) as run:
            run.finish(_final(invoke(graph, _message(job, first), CONFIG)))
        pending = _pending(graph.get_state(CONFIG))
        return {"status": run.status, "output": run.output, "interrupts": pending}
    finally:
        conn.close()


async def _async(job: dict[str, Any], journal: Any, draws: Draws) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from redrive.integrations.langgraph import ainvoke

    async with AsyncSqliteSaver.from_conn_string(job["checkpoints"]) as saver:
        graph, first = task_graph(job["shape"], "async", draws, saver, bool(job.get("inside")))
        async with redrive.run(journal, RUN_ID) as run:
            run.finish(_final(await ainvoke(graph, _message(job, first), CONFIG)))
        pending = _pending(await graph.aget_state(CONFIG))
        return {"status": run.status, "output": run.output, "interrupts": pending}


def main(path: str) -> None:
    """Run the delivery JOB describes; print its JSON line (or the error's)."""
    deliver(path, _sync, _async)


if __name__ == "__main__":
    main(sys.argv[1])
