"""LangGraph interrupts: a resume keeps askable exactly the steps of the tasks LangGraph runs again.

Issue 27: the steps a ``Command(resume=...)`` kept were "the tool steps after
the last model step before the interrupt", right only when the model is
called in a node of its own and the interrupted node always runs again.

* A resume killed after the interrupted node finished (its writes saved, the
  next checkpoint not yet) left LangGraph nothing to run again in that node;
  the next resume still waited for its tool call: ``DivergenceError`` at seq 4
  (the conformance cell ``langgraph-interrupt@model_2``, intermittently).
* Async: ``ToolNode`` gathers its calls with ``asyncio.gather``, which lets the
  interrupt out while a sibling tool call still runs; the run was suspended
  before that call's outcome was journaled, and the resume found it in flight
  (``SideEffectRetryBlockedError`` at seq 4).
* A node that calls the model itself, then a charging tool, then
  ``interrupt()`` twice (langgraphjs#1298): each resume asked the model again
  and the second one charged again.

Each adverse ordering is forced here, not waited for.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, HoldingServer, chat, serve
from tests.integrations.lg_graphs import recorded_llm, tool_node_graph
from tests.integrations.matrix_scripts import interrupt as _interrupt
from tests.sdkserver import Reply

pytestmark = pytest.mark.usefixtures("langgraph_installed")

PROMPT = "Ada's order arrived damaged; refund her."
BUSY = Reply(status=503, body={"error": {"message": "overloaded", "type": "server_error"}})
ROOT = Path(__file__).resolve().parents[2]


#: httpx clients the graphs of a test made (closed at its end: no socket left to the collector)
_MADE: list[Any] = []


@pytest.fixture
def langgraph_installed() -> Iterator[None]:
    need("langchain")
    yield
    _close_clients()


def _close_clients() -> None:
    while _MADE:
        client = _MADE.pop()
        if hasattr(client, "aclose"):
            asyncio.run(client.aclose())
        else:
            client.close()


@pytest.fixture
def server() -> Iterator[HoldingServer]:
    with serve() as running:
        yield running


def _deliver(journal: Any, graph: Any, message: Any, face: str, run_id: str = "job:7") -> Any:
    """One delivery of the job: invoke (or ainvoke) the graph in the run; return the run."""
    from redrive.integrations.langgraph import ainvoke, invoke

    config = {"configurable": {"thread_id": "ticket-7"}}
    if face == "sync":
        with redrive.run(journal, run_id) as run:
            state = invoke(graph, message, config)
            run.finish(state["messages"][-1].content)
        return run

    async def go() -> Any:
        async with redrive.run(journal, run_id) as run:
            state = await ainvoke(graph, message, config)
            run.finish(state["messages"][-1].content)
        return run

    return asyncio.run(go())


# --- the ToolNode pattern: model node, ToolNode with a charge and an interrupt ----------------


def _losing_saver() -> Any:
    """An InMemorySaver that can lose its next checkpoint (the process died before it landed)."""
    from langgraph.checkpoint.memory import InMemorySaver

    class Losing(InMemorySaver):
        lose_after: int | None = None  # lose checkpoints of this step and later

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            step = (metadata or {}).get("step")
            if self.lose_after is not None and isinstance(step, int) and step >= self.lose_after:
                return {
                    "configurable": {
                        **config["configurable"],
                        "checkpoint_id": checkpoint["id"],
                    }
                }
            return super().put(config, checkpoint, metadata, new_versions)

        async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            return self.put(config, checkpoint, metadata, new_versions)

    return Losing()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_resume_after_a_resume_that_finished_the_interrupted_node_does_not_wait_for_it(
    server: HoldingServer, tmp_path: Path, face: str
) -> None:
    """The cell ``langgraph-interrupt@model_2``'s adverse ordering, forced.

    The first resume finishes the interrupted ToolNode (its writes are saved
    on the interrupt's checkpoint) and dies before the next checkpoint lands
    (here: the saver loses it; the model call after it gets a 503). LangGraph
    hands the node's writes back on the next resume instead of running it:
    the resume must not wait for the node's tool call, nor run it again.
    """
    from langgraph.types import Command

    charges: list[int] = []
    saver = _losing_saver()
    graph = tool_node_graph(
        server.url + "/v1", lambda: charges.append(1) or "charged", saver, _MADE
    )
    calls = _interrupt()
    server.add(calls[0], BUSY, calls[1])
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    assert _deliver(journal, graph, {"messages": [("user", PROMPT)]}, face).status == "suspended"
    saver.lose_after = 2  # the checkpoint after the ToolNode's superstep never lands
    with pytest.raises(Exception, match="overloaded"):
        _deliver(journal, graph, Command(resume="yes"), face)
    saver.lose_after = None
    done = _deliver(journal, graph, Command(resume="yes"), face)
    assert (done.status, done.output) == ("succeeded", FINAL)
    assert charges == [1]
    assert len(server.requests) == 3  # the first turn, the 503, the answer


def test_an_async_interrupt_waits_for_a_sibling_tool_call_still_running(
    server: HoldingServer, tmp_path: Path
) -> None:
    """``asyncio.gather`` lets the interrupt out first; the charge's outcome is journaled anyway.

    The interrupt waits until the charge's body started (its ``tool_start``
    durable); the body is then held until ``graph.ainvoke`` has returned at
    the interrupt, and until the run's block ended (at most a second: with the
    fix the block waits for the charge, so it never ends first). Before the
    fix the run suspended with the charge in flight, every time.
    """
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from redrive.integrations.langgraph import ainvoke

    class Returning:
        """The graph, telling when its ``ainvoke`` returned."""

        def __init__(self, graph: Any) -> None:
            self._graph = graph
            self.returned = threading.Event()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._graph, name)

        async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await self._graph.ainvoke(*args, **kwargs)
            finally:
                self.returned.set()

    charges: list[int] = []
    charging = threading.Event()

    runs: list[Any] = []

    def held_charge() -> str:
        charging.set()
        run = runs[-1]
        assert graph.returned.wait(30), "the graph never returned"
        block_ended = threading.Event()
        for _ in range(100):  # until the block ended, or a second went by
            if run.status != "running" or block_ended.wait(0.01):
                break
        charges.append(1)
        return "charged"

    def after_the_charge_started() -> None:
        assert charging.wait(30), "the charge never started"

    graph = Returning(
        tool_node_graph(
            server.url + "/v1",
            held_charge,
            InMemorySaver(),
            _MADE,
            ask_first=after_the_charge_started,
        )
    )
    server.add(*_interrupt())
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    config = {"configurable": {"thread_id": "ticket-7"}}

    async def deliver(message: Any) -> Any:
        async with redrive.run(journal, "job:7") as run:
            runs.append(run)
            state = await ainvoke(graph, message, config)
            run.finish(state["messages"][-1].content)
        return run

    assert asyncio.run(deliver({"messages": [("user", PROMPT)]})).status == "suspended"
    assert charges == [1]
    done = asyncio.run(deliver(Command(resume="yes")))
    assert (done.status, done.output) == ("succeeded", FINAL)
    assert charges == [1]


# --- a node that calls the model itself, charges, then interrupts (langgraphjs#1298) ----------


def _node_graph(base: str, layout: list[str], effects: Path, checkpointer: Any) -> Any:
    """One node doing ``layout`` in order: ``model``, ``charge``, ``ask`` (an interrupt).

    Each charge appends a line to ``effects`` (a log outside the process).
    """
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import interrupt

    from redrive.integrations.langchain import tool

    @tool(name="charge", restart_safe=False)
    def charge(amount: int) -> str:
        """Charge the card."""
        with effects.open("a") as log:
            log.write(f"charge {amount}\n")
        return f"charged {amount}"

    llm = recorded_llm(base, [], _MADE)

    def work(state: Any) -> dict[str, Any]:
        said: list[Any] = []
        for index, op in enumerate(layout):
            if op == "model":
                said.append(llm.invoke(state["messages"]))
            elif op == "charge":
                said.append(("ai", charge.invoke({"amount": index})))
            else:
                said.append(("user", str(interrupt(f"question {index}"))))
        return {"messages": said}

    builder = StateGraph(MessagesState)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=checkpointer)


def _drive_node(
    server: HoldingServer, tmp: Path, layout: list[str], saver: Any, face: str
) -> tuple[list[str], Any]:
    """Deliver the job until it finishes; return the side-effect log and the last run."""
    from langgraph.types import Command

    effects = tmp / "effects.log"
    graph = _node_graph(server.url + "/v1", layout, effects, saver)
    server.add(*(chat(True) for op in layout if op == "model"))
    journal = redrive.open_journal(str(tmp / "runs.duckdb"))
    message: Any = {"messages": [("user", PROMPT)]}
    run = _deliver(journal, graph, message, face)
    for answer in range(layout.count("ask")):
        assert run.status == "suspended"
        run = _deliver(journal, graph, Command(resume=f"answer {answer}"), face)
    journal.close()
    return (effects.read_text().splitlines() if effects.exists() else []), run


def _savers(kind: str, tmp: Path) -> Any:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        return SqliteSaver(sqlite3.connect(str(tmp / "cp.db"), check_same_thread=False))
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


NODE_LAYOUT = ["model", "charge", "ask", "ask"]


@pytest.mark.parametrize(
    ("saver", "face"), [("memory", "sync"), ("memory", "async"), ("sqlite", "sync")]
)
def test_a_node_that_calls_the_model_charges_and_interrupts_twice_pays_and_charges_once(
    server: HoldingServer, tmp_path: Path, saver: str, face: str
) -> None:
    """langgraphjs#1298: both resumes re-execute the node; its model call and charge replay."""
    effects, run = _drive_node(server, tmp_path, NODE_LAYOUT, _savers(saver, tmp_path), face)
    assert (run.status, run.output) == ("succeeded", "answer 1")
    assert effects == ["charge 1"]
    assert len(server.requests) == 1


def test_the_node_under_an_async_sqlite_saver(server: HoldingServer, tmp_path: Path) -> None:
    """The same node with ``AsyncSqliteSaver`` (aiosqlite), one event loop per delivery."""
    pytest.importorskip("aiosqlite")
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    from redrive.integrations.langgraph import ainvoke

    effects = tmp_path / "effects.log"
    server.add(chat(True))
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    config = {"configurable": {"thread_id": "ticket-7"}}

    async def deliver(message: Any) -> Any:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
            graph = _node_graph(server.url + "/v1", NODE_LAYOUT, effects, saver)
            async with redrive.run(journal, "job:7") as run:
                state = await ainvoke(graph, message, config)
                run.finish(state["messages"][-1].content)
        return run

    run = asyncio.run(deliver({"messages": [("user", PROMPT)]}))
    for answer in ("yes", "ok"):
        assert run.status == "suspended"
        run = asyncio.run(deliver(Command(resume=answer)))
    assert (run.status, run.output) == ("succeeded", "ok")
    assert effects.read_text().splitlines() == ["charge 1"]
    assert len(server.requests) == 1


def _parallel_graph(effects: Path, checkpointer: Any) -> Any:
    """Two nodes in one superstep: ``pay`` charges, ``ask`` interrupts; then ``done``."""
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import interrupt

    from redrive.integrations.langchain import tool

    @tool(name="charge", restart_safe=False)
    def charge(amount: int) -> str:
        """Charge the card."""
        with effects.open("a") as log:
            log.write(f"charge {amount}\n")
        return f"charged {amount}"

    def pay(state: Any) -> dict[str, Any]:
        return {"messages": [("ai", charge.invoke({"amount": 5}))]}

    def ask(state: Any) -> dict[str, Any]:
        return {"messages": [("user", str(interrupt("refund too?")))]}

    def done(state: Any) -> dict[str, Any]:
        return {"messages": [("ai", "done")]}

    builder = StateGraph(MessagesState)
    for name, node in (("pay", pay), ("ask", ask), ("done", done)):
        builder.add_node(name, node)
    builder.add_edge(START, "pay")
    builder.add_edge(START, "ask")
    builder.add_edge(["pay", "ask"], "done")
    builder.add_edge("done", END)
    return builder.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_sibling_node_that_finished_in_the_interrupted_superstep_is_not_waited_for(
    tmp_path: Path, face: str
) -> None:
    """``pay`` finishes (its writes saved) while ``ask`` interrupts: the resume runs ``ask`` only.

    The charge is answered by the checkpointer's state: neither run again
    nor waited for (before, the rule kept every tool step after the last
    model step, so the resume ended with the charge unasked: DivergenceError).
    """
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    effects = tmp_path / "effects.log"
    graph = _parallel_graph(effects, InMemorySaver())
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    assert _deliver(journal, graph, {"messages": [("user", PROMPT)]}, face).status == "suspended"
    done = _deliver(journal, graph, Command(resume="yes"), face)
    assert (done.status, done.output) == ("succeeded", "done")
    assert effects.read_text().splitlines() == ["charge 5"]


_CHILD = """
import json, sqlite3, sys
from pathlib import Path
import redrive
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from tests.integrations.test_langgraph_resume import NODE_LAYOUT, _deliver, _node_graph
base, work, answer = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
saver = SqliteSaver(sqlite3.connect(str(work / "cp.db"), check_same_thread=False))
graph = _node_graph(base, NODE_LAYOUT, work / "effects.log", saver)
message = {"messages": [("user", "refund")]} if answer == "-" else Command(resume=answer)
run = _deliver(redrive.open_journal(str(work / "runs.duckdb")), graph, message, "sync")
print(json.dumps({"status": run.status}))
"""


def test_the_second_resume_of_the_node_in_a_cold_process(
    server: HoldingServer, tmp_path: Path
) -> None:
    """The start and the first resume here, the second resume in a fresh process (SqliteSaver).

    The second resume is where the charge ran again; a cold process has
    nothing of the first two deliveries but the journal and the checkpoints.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    server.add(chat(True))
    conn = sqlite3.connect(str(tmp_path / "cp.db"), check_same_thread=False)
    graph = _node_graph(
        server.url + "/v1", NODE_LAYOUT, tmp_path / "effects.log", SqliteSaver(conn)
    )
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    for message in ({"messages": [("user", "refund")]}, Command(resume="yes")):
        assert _deliver(journal, graph, message, "sync").status == "suspended"
    journal.close()
    conn.close()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, server.url + "/v1", str(tmp_path), "ok"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": "succeeded"}
    assert (tmp_path / "effects.log").read_text().splitlines() == ["charge 1"]
    assert len(server.requests) == 1


@settings(
    max_examples=int(os.environ.get("REDRIVE_LG_LAYOUTS", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    layout=st.lists(st.sampled_from(["model", "charge", "ask"]), min_size=1, max_size=6).map(
        lambda ops: [*ops, "ask"] if "ask" not in ops else ops
    )
)
def test_any_node_layout_resumes_with_each_charge_and_model_call_once(
    layout: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any order of model calls, charges and interrupts in one node: each effect once, finished."""
    need("langchain")
    from langgraph.checkpoint.memory import InMemorySaver

    tmp = tmp_path_factory.mktemp("layout")
    with serve() as server:
        try:
            effects, run = _drive_node(server, tmp, layout, InMemorySaver(), "sync")
        finally:
            _close_clients()
        assert run.status == "succeeded", layout
        charged = [f"charge {i}" for i, op in enumerate(layout) if op == "charge"]
        assert effects == charged, layout
        assert len(server.requests) == layout.count("model"), layout
