"""One model turn, several parallel tool calls, some charge, some interrupt (langgraph#6533).

An async ``ToolNode`` gathers its calls with ``asyncio.gather``: the first
``interrupt()`` gets out, and the graph returns while sibling calls have not
begun. Such a call is refused (nothing runs) and asked again by the resume.
With two interrupting calls, the resume that answers one runs the ToolNode
again and stops at the other; a charge that had run in the first invocation
and was refused in that one (the second interrupt got out before it began)
was not asked again there. The interrupt note filed only the steps the
invocation asked, so the charge fell out of it; the next resume took the
charge as answered by the checkpointer, and the ToolNode's third execution
charged the card again (1 in 10 unforced runs; forced here, every time).

The property drives any number of parallel charges and interrupts, any call
order, calls begun after the graph returned, resumes of all the interrupts
at once or one at a time, and a resume that fails after the ToolNode
finished (a 503): each charge is logged once in a file outside the run, and
the run finishes, also when the checkpoint after the ToolNode is lost with
the 503: a charge first run by that failed resume comes after the last
interrupt note, and its step note (the task that made it, journaled as the
step completed) tells the next resume that LangGraph hands the ToolNode's
writes back, so the charge is answered, not waited for.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from tests.conftest import examples
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, HoldingServer, chat, serve
from tests.integrations.lg_graphs import parallel_tools_graph
from tests.sdkserver import Reply

BUSY = Reply(status=503, body={"error": {"message": "overloaded", "type": "server_error"}})
CONFIG = {"configurable": {"thread_id": "ticket-7"}}
#: the most deliveries a plan can take (one per interrupt, one per failed resume, one more)
_DELIVERIES = 12


@attrs.frozen
class Plan:
    """One job: the model's parallel calls, how they are ordered, how it is resumed.

    Attributes:
        calls: the tool calls of the model's turn, in the order the model made them.
        late: ``(delivery, tool)``: in that delivery the call begins only after the
            graph returned and the run's block ended (at most ``hold`` seconds each:
            the graph cannot return while it waits for the call's result).
        delays: seconds each call waits before its step or interrupt (the order
            the parallel calls reach redrive).
        resume: ``all``: one ``Command`` answers every pending interrupt; ``one``:
            the first pending only.
        face: ``sync`` (``invoke``) or ``async`` (``ainvoke``).
        saver: ``memory`` (``InMemorySaver``) or ``sqlite`` (``SqliteSaver``, or
            ``AsyncSqliteSaver`` for ``async``).
        crash: ``none``; ``busy``: the model call after the ToolNode answers 503
            once; ``lost``: and the checkpoint after the ToolNode is lost with it.
    """

    calls: tuple[str, ...]
    late: frozenset[tuple[int, str]] = frozenset()
    delays: tuple[float, ...] = ()
    resume: str = "all"
    face: str = "async"
    saver: str = "memory"
    crash: str = "none"
    hold: float = 1.0

    def delay(self, name: str) -> float:
        return self.delays[self.calls.index(name)] if self.delays else 0.0


def _turn(calls: tuple[str, ...]) -> Reply:
    """The model's turn making ``calls`` in parallel (``charge_N`` pays N, ``ask_N`` asks)."""
    reply = chat(False)
    reply.body["choices"][0]["message"]["tool_calls"] = [
        {
            "id": f"call_{name}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": json.dumps(
                    {"amount": int(name.split("_")[1])}
                    if name.startswith("charge")
                    else {"question": name}
                ),
            },
        }
        for name in calls
    ]
    return reply


class _Losing:
    """The ``InMemorySaver`` factory whose checkpoints after the ToolNode can be lost."""

    @staticmethod
    def make() -> Any:
        from langgraph.checkpoint.memory import InMemorySaver

        class Losing(InMemorySaver):
            lose: bool = False

            def put(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
                step = (metadata or {}).get("step")
                if self.lose and isinstance(step, int) and step >= 2:
                    return {
                        "configurable": {
                            **config["configurable"],
                            "checkpoint_id": checkpoint["id"],
                        }
                    }
                return super().put(config, checkpoint, metadata, versions)

            async def aput(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
                return self.put(config, checkpoint, metadata, versions)

        return Losing()


@attrs.define
class _Job:
    """Delivers the job of a :class:`Plan` until it finishes (the queue's side)."""

    plan: Plan
    server: HoldingServer
    tmp: Path
    clients: list[Any] = attrs.Factory(list)
    delivery: int = 0
    returned: threading.Event = attrs.Factory(threading.Event)
    run: Any = None
    saver: Any = None

    @property
    def effects(self) -> Path:
        return self.tmp / "effects.log"

    def charge(self, number: int) -> str:
        with self.effects.open("a") as log:
            log.write(f"charge {number}\n")
        return f"charged {number}"

    def before(self, name: str) -> None:
        time.sleep(self.plan.delay(name))
        if (self.delivery, name) in self.plan.late:
            self.returned.wait(self.plan.hold)
            until = time.monotonic() + self.plan.hold
            while time.monotonic() < until:  # until the run's block ended
                if self.run is not None and self.run.status != "running":
                    break
                time.sleep(0.01)

    def graph(self, saver: Any) -> Any:
        return parallel_tools_graph(
            self.server.url + "/v1",
            list(self.plan.calls),
            self.charge,
            saver,
            self.clients,
            self.before,
        )

    def deliver(self, journal: Any, message: Any) -> Any:
        """One delivery; returns the run (or raises what the job raised)."""
        self.delivery += 1
        self.returned.clear()
        if self.plan.face == "sync":
            return self._sync(journal, message)
        return asyncio.run(self._async(journal, message))

    def _sync(self, journal: Any, message: Any) -> Any:
        from redrive.integrations.langgraph import invoke

        graph = _Returning(self.graph(self.saver), self.returned)
        with redrive.run(journal, "job:7") as run:
            self.run = run
            state = invoke(graph, message, CONFIG)
            run.finish(state["messages"][-1].content)
        return run

    async def _async(self, journal: Any, message: Any) -> Any:
        from redrive.integrations.langgraph import ainvoke

        if self.plan.saver == "sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with AsyncSqliteSaver.from_conn_string(str(self.tmp / "cp.db")) as saver:
                return await self._in_run(journal, message, saver, ainvoke)
        return await self._in_run(journal, message, self.saver, ainvoke)

    async def _in_run(self, journal: Any, message: Any, saver: Any, ainvoke: Any) -> Any:
        graph = _Returning(self.graph(saver), self.returned)
        async with redrive.run(journal, "job:7") as run:
            self.run = run
            state = await ainvoke(graph, message, CONFIG)
            run.finish(state["messages"][-1].content)
        return run

    def pending(self) -> list[Any]:
        if self.plan.face == "async" and self.plan.saver == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(str(self.tmp / "cp.db"), check_same_thread=False)
            try:
                return list(self.graph(SqliteSaver(conn)).get_state(CONFIG).interrupts)
            finally:
                conn.close()
        return list(self.graph(self.saver).get_state(CONFIG).interrupts)

    def drive(self) -> Any:
        """Deliver until the run finishes (or the deliveries run out); return the last run."""
        from langgraph.types import Command

        if self.plan.saver == "sqlite" and self.plan.face == "sync":
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(str(self.tmp / "cp.db"), check_same_thread=False)
            self.clients.append(conn)
            self.saver = SqliteSaver(conn)
        elif self.plan.crash == "lost":
            self.saver = _Losing.make()
        else:
            from langgraph.checkpoint.memory import InMemorySaver

            self.saver = InMemorySaver()
        if self.plan.crash == "lost":
            self.saver.lose = True
        journal = redrive.open_journal(str(self.tmp / "runs.duckdb"))
        message: Any = {"messages": [("user", "refund Ada")]}
        run: Any = None
        try:
            for _ in range(_DELIVERIES):
                try:
                    run = self.deliver(journal, message)
                except Exception as exc:  # the 503 after the ToolNode: the job fails, redelivered
                    assert "overloaded" in str(exc), exc
                    if self.saver is not None and hasattr(self.saver, "lose"):
                        self.saver.lose = False
                    continue
                if run.status != "suspended":
                    break
                asked = self.pending()
                assert asked, "a suspended run with no interrupt pending"
                answered = asked if self.plan.resume == "all" else asked[:1]
                message = Command(resume={i.id: f"answer to {i.value}" for i in answered})
        finally:
            journal.close()
        return run


class _Returning:
    """A graph that sets ``returned`` when its ``invoke`` / ``ainvoke`` returned."""

    def __init__(self, graph: Any, returned: threading.Event) -> None:
        self._graph = graph
        self._returned = returned

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._graph.invoke(*args, **kwargs)
        finally:
            self._returned.set()

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._graph.ainvoke(*args, **kwargs)
        finally:
            self._returned.set()


def _check(plan: Plan, server: HoldingServer, tmp: Path) -> None:
    """Drive ``plan``'s job to its end; each charge once, every question answered, finished."""
    script = [_turn(plan.calls)]
    if plan.crash != "none":
        script.append(BUSY)
    server.add(*script, chat(True))
    job = _Job(plan, server, tmp)
    try:
        run = job.drive()
    finally:
        for client in job.clients:
            if hasattr(client, "aclose"):
                asyncio.run(client.aclose())
            else:
                client.close()
    logged = job.effects.read_text().splitlines() if job.effects.exists() else []
    charges = sorted(f"charge {n.split('_')[1]}" for n in plan.calls if n.startswith("charge"))
    assert sorted(logged) == charges, plan
    assert (run.status, run.output) == ("succeeded", FINAL), plan
    assert len(server.requests) == len(script) + 1, plan
    sent = json.loads(server.requests[-1].body)["messages"]
    answers = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    asks = sorted(name for name in plan.calls if name.startswith("ask"))
    # the recorded charge reaches the model; LangGraph matches the answers to the interrupt()
    # calls of one task by their order, so an answer may reach another parallel call
    assert answers == {
        f"call_{name}": f"charged {name.split('_')[1]}"
        if name.startswith("charge")
        else answers.get(f"call_{name}")
        for name in plan.calls
    }, plan
    assert {answers[f"call_{name}"] for name in asks} <= {f"answer to {n}" for n in asks}, plan


@pytest.fixture
def server() -> Iterator[HoldingServer]:
    need("langchain")
    with serve() as running:
        yield running


#: the shape of the report: one charge, two interrupts; the first delivery stops at one
#: interrupt (the other call begins late), the second delivery's charge begins late
_REPORTED = Plan(
    ("charge_1", "ask_2", "ask_3"), late=frozenset({(1, "ask_3"), (2, "charge_1")}), hold=30.0
)


@pytest.mark.parametrize("resume", ["all", "one"])
@pytest.mark.parametrize("saver", ["memory", "sqlite"])
def test_a_charge_refused_in_a_resume_that_stopped_again_is_replayed_not_run_again(
    server: HoldingServer, tmp_path: Path, saver: str, resume: str
) -> None:
    """langgraph#6533's shape, the adverse order forced: charged once, every question answered.

    The first delivery charges and stops at one interrupt (``gather`` lets the
    first out; the other call begins after the graph returned, forced). The
    second answers it; the ToolNode runs again, the other interrupt gets out
    before the charge began (forced), the charge is refused. The third
    answers the other one: the charge replays. Before, the second delivery's
    note did not name the charge and the third charged again.
    """
    _check(attrs.evolve(_REPORTED, saver=saver, resume=resume), server, tmp_path)


_NAMES = st.tuples(st.integers(1, 2), st.integers(1, 3)).flatmap(
    lambda counts: st.permutations(
        [f"charge_{n}" for n in range(1, counts[0] + 1)]
        + [f"ask_{n}" for n in range(1, counts[1] + 1)]
    )
)


@st.composite
def _plans(draw: st.DrawFn) -> Plan:
    calls = tuple(draw(_NAMES))
    face = draw(st.sampled_from(["sync", "async"]))
    late = (
        draw(st.frozensets(st.tuples(st.integers(1, 4), st.sampled_from(calls)), max_size=3))
        if face == "async"
        else frozenset()
    )
    saver = draw(st.sampled_from(["memory", "sqlite"]))
    return Plan(
        calls,
        late=late,
        delays=tuple(draw(st.sampled_from([0.0, 0.0, 0.01, 0.05])) for _ in calls),
        resume=draw(st.sampled_from(["all", "one"])),
        face=face,
        saver=saver,
        # "lost" needs the losing InMemorySaver
        crash=draw(
            st.sampled_from(["none", "busy", "lost"] if saver == "memory" else ["none", "busy"])
        ),
    )


@settings(
    max_examples=examples(default=10, ci=20, thorough=200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=_plans())
def test_any_parallel_charges_and_interrupts_charge_once_and_finish(
    plan: Plan, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any parallel calls, orders, late calls, resumes and failed resumes: each charge once."""
    need("langchain")
    with serve() as server:
        _check(plan, server, tmp_path_factory.mktemp("parallel"))


def test_a_charge_first_run_by_a_resume_that_died_before_the_next_checkpoint_finishes(
    server: HoldingServer, tmp_path: Path
) -> None:
    """The charge is refused in the first delivery, run by the resume, whose next checkpoint is
    lost with a 503; the third delivery gets the ToolNode's writes back and must not wait for it.
    """
    plan = Plan(("charge_1", "ask_2"), late=frozenset({(1, "charge_1")}), crash="lost", hold=30.0)
    _check(plan, server, tmp_path)


def test_a_kept_step_stays_filed_under_its_task_when_the_invocation_does_not_ask_it() -> None:
    """The note of a resume that stopped again names the kept steps, asked again or not."""
    need("langchain")
    from redrive.integrations._langgraph_tasks import TaskSteps, kept_tasks

    note = {"model": [2], "tools": [4, 5], "": [7]}
    carried = kept_tasks(note, {"tools"})
    assert carried == {"tools": [4, 5], "": [7]}  # the unnamed step is always kept
    steps = TaskSteps(carried)
    steps.saw(9)  # outside any task's context
    assert steps.by_task() == {"": [7, 9], "tools": [4, 5]}


def test_a_step_after_the_note_is_handed_back_only_under_a_task_with_saved_writes() -> None:
    """Saved tasks (and what runs under them) hand back; rerun or unnamed ones do not."""
    need("langchain")
    from redrive.integrations._langgraph_tasks import handed_back, saved_tasks

    @attrs.frozen
    class Task:
        id: str
        result: Any = None
        state: Any = None

    @attrs.frozen
    class Snapshot:
        tasks: tuple[Task, ...]

    sub = Snapshot((Task("s1", result={"x": 1}), Task("s2")))
    start = Snapshot((Task("tools", result={"messages": []}), Task("node", state=sub)))
    saved = saved_tasks(start, superseded=False)
    assert saved == {"tools", "node|s1"}
    assert handed_back("tools", saved) and handed_back("tools|inner", saved)
    assert handed_back("node|s1", saved)
    assert not handed_back("node", saved) and not handed_back("node|s2", saved)
    assert not handed_back("", saved)  # an unnamed step is always asked
    # pinned past: every top-level task reruns ("tools" too), but a subgraph resumes from its
    # own latest checkpoint (LangGraph passes a replay bound to subgraphs on time travel only,
    # not on a Command(resume=...)), so its saved tasks are still handed back
    assert saved_tasks(start, superseded=True) == {"node|s1"}
