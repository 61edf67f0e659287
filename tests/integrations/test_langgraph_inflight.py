"""LangGraph interrupts at every crash boundary: a draw killed in flight is settled, never redrawn.

Each delivery of the job runs in a real child process
(tests/integrations/lg_kill_child.py, forked from a warm parent; one test
starts it cold), which SIGKILLs itself inside a draw after the side effect,
before its result is journaled, or is killed by the scripted server while a
model call is in flight. Every draw appends ``draw N key=...`` to a log
outside the process; the next delivery of the same job must replay or
settle (``recover()``) the draw left in flight, with the same idempotency
key, or refuse it (``SideEffectRetryBlockedError``), never draw again.

The duplicate (issue 27): the note an invocation wrote when it stopped at an
interrupt filed only the steps its tasks asked (and those a resume kept). A
draw an earlier attempt left in flight (or finished) that this invocation
stopped before asking again was in no note, and the next resume marked it
answered by the checkpointer: the call drew again, under a new key. It takes
an invocation that stops before asking the draw:

* parallel interrupts in one ``ToolNode``: the resume killed mid-draw, the
  redelivery's answer reaches the other call first (LangGraph matches the
  answers of one task's ``interrupt()`` calls by their order), which draws,
  and the killed call interrupts again before its draw;
* a single interrupt: the first delivery killed mid-draw, its redelivery
  stops at the interrupt while the draw's call had not begun again (async
  ``ToolNode``: ``gather`` lets the interrupt out; the late call is refused).

Orders are forced (``waits``), not waited for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.crash.warm import WarmParent
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, chat
from tests.integrations.test_conformance_matrix import KillAt, KillingServer

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
CHILD = "tests.integrations.lg_kill_child"
WARM = [
    "redrive",
    "duckdb",
    CHILD,
    "tests.integrations.lg_graphs",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.sqlite.aio",
    "langgraph.prebuilt",
    "langchain_openai",
]


@pytest.fixture(scope="module")
def warm() -> Iterator[WarmParent]:
    need("langchain")
    parent = WarmParent(WARM, env=ENV)
    try:
        yield parent
    finally:
        parent.close()


@contextmanager
def killing_server() -> Iterator[KillingServer]:
    """A scripted server in a thread whose :class:`KillAt` entries kill the child in flight."""
    running = KillingServer()
    thread = threading.Thread(
        target=running.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield running
    finally:
        running.released.set()
        running.shutdown()
        running.server_close()
        thread.join()


@pytest.fixture
def server() -> Iterator[KillingServer]:
    with killing_server() as running:
        yield running


def turn(calls: list[str]) -> Any:
    """The model's turn: ``calls`` in parallel, each with its name as the question."""
    reply = chat(False)
    reply.body["choices"][0]["message"]["tool_calls"] = [
        {
            "id": f"call_{name}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"question": name})},
        }
        for name in calls
    ]
    return reply


@attrs.define
class Job:
    """A job's world (journal, checkpoints, side-effect log, server) and its deliveries."""

    tmp: Path
    server: KillingServer
    calls: list[str]
    face: str
    per_call: bool = False
    recover: bool = True
    warm: WarmParent | None = None
    hold: float | None = None
    count: int = 0
    said: list[Any] = attrs.Factory(list)

    def deliver(
        self,
        resume: dict[str, str] | None,
        kill: int | None = None,
        *,
        lose: bool = False,
        waits: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """One delivery in a child; its JSON line, or ``{"killed": code}`` when it was killed.

        ``lose``: the checkpoints after the first ``ToolNode`` are lost in this delivery.
        """
        self.count += 1
        job = {
            "journal": str(self.tmp / "runs.duckdb"),
            "checkpoints": str(self.tmp / "cp.db"),
            "effects": str(self.effects),
            "base": self.server.url + "/v1",
            "calls": self.calls,
            "face": self.face,
            "per_call": self.per_call,
            "recover": self.recover,
            "resume": resume,
            "kill": kill,
            "waits": waits or {},
            "hold": self.hold,
            "lose": lose,
        }
        path = self.tmp / f"job-{self.count}.json"
        path.write_text(json.dumps(job))
        if self.warm is None:
            done = subprocess.run(
                [sys.executable, "-m", CHILD, str(path)],
                cwd=ROOT,
                env=ENV,
                capture_output=True,
                text=True,
                timeout=300,
            )
        else:
            done = self.warm.run(
                f"{CHILD}:main",
                [str(path)],
                env=ENV,
                cwd=self.tmp,
                files=self.tmp / f"child-{self.count}",
                pidfile=self.pidfile,
            )
        if done.returncode != 0:
            line: dict[str, Any] = {"killed": done.returncode, "stderr": done.stderr[-2000:]}
        else:
            line = json.loads(done.stdout.strip().splitlines()[-1])
        self.said.append(line)
        return line

    @property
    def effects(self) -> Path:
        return self.tmp / "effects.log"

    @property
    def pidfile(self) -> Path:
        return self.tmp / "pid"

    def draws(self) -> list[str]:
        """The draws made, as ``draw N key=K`` lines, in order."""
        return self.effects.read_text().splitlines() if self.effects.exists() else []

    def never_twice(self) -> None:
        """No number drawn twice (a retry of a draw would reuse its key: it is not one)."""
        drawn = [line.split(" key=")[0] for line in self.draws()]
        assert len(set(drawn)) == len(drawn), (self.draws(), self.said)

    def drawn_once(self, numbers: list[int]) -> None:
        """Each of ``numbers`` drawn exactly once, nothing else."""
        drawn = sorted(line.split(" key=")[0] for line in self.draws())
        assert drawn == sorted(f"draw {n}" for n in numbers), (self.draws(), self.said)


def answers(line: dict[str, Any]) -> dict[str, str]:
    """A ``Command(resume=...)`` map answering every interrupt ``line`` says is pending."""
    return {i["id"]: f"yes to {i['value']}" for i in line["interrupts"]}


def number(line: dict[str, Any]) -> int:
    """The number of the (first) call whose interrupt ``line`` says is pending."""
    return int(line["interrupts"][0]["value"].rsplit("_", 1)[1])


def finished(line: dict[str, Any]) -> bool:
    return line.get("status") == "succeeded" and line.get("output") == FINAL


# --- parallel interrupts in one ToolNode: the resume killed mid-draw ------------------------


@pytest.mark.parametrize("recover", [True, False])
@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_draw_killed_in_a_resume_that_the_redelivery_does_not_ask_is_not_drawn_again(
    warm: WarmParent, server: KillingServer, tmp_path: Path, face: str, recover: bool
) -> None:
    """Two calls interrupt in one ToolNode; the resume dies inside the answered call's draw.

    The redelivery (same answer) gives it to the other call first (forced):
    that one draws, the killed call interrupts again before its draw. The
    answer to that interrupt resumes the ToolNode: the killed draw is settled
    by ``recover()`` (or refused without one), never drawn again. Before, the
    redelivery's note did not name it and the last delivery drew it again
    under a new idempotency key.
    """
    server.add(turn(["ask_1", "ask_2"]), chat(True))
    job = Job(tmp_path, server, ["ask_1", "ask_2"], face, recover=recover, warm=warm)
    first = job.deliver(None)
    assert first.get("status") == "suspended", job.said
    a = number(first)
    b = 3 - a
    message = answers(first)
    # the answer reaches the call that asked it (forced): it dies in its draw
    assert job.deliver(message, kill=a, waits={f"ask_{b}": f"draw_{a}"})["killed"] == -9, job.said
    assert [line.split(" key=")[0] for line in job.draws()] == [f"draw {a}"]
    # the redelivery (same answer) gives it to the other call first (forced): the killed
    # call interrupts again before its draw (LangGraph may also hand both calls an answer)
    line = job.deliver(message, waits={f"ask_{a}": f"draw_{b}"})
    for _ in range(3):
        if line.get("status") != "suspended":
            break
        line = job.deliver(answers(line))
    if recover:
        assert finished(line), job.said
    else:
        assert "SideEffectRetryBlockedError" in line.get("error", ""), job.said
        assert "redrive resolve job:7" in line["error"]
    job.never_twice()
    if recover:
        job.drawn_once([a, b])


# --- a single interrupt ---------------------------------------------------------------------


def test_a_draw_killed_before_the_interrupt_and_not_begun_again_is_settled_on_the_resume(
    warm: WarmParent, server: KillingServer, tmp_path: Path
) -> None:
    """A charge and an interrupt in one async ToolNode; the first delivery dies mid-charge.

    Its redelivery stops at the interrupt while the charge's call has not
    begun again (``gather`` lets the interrupt out; the call begins late and
    is refused). The resume runs the ToolNode again: the charge left in
    flight is settled by ``recover()``, not drawn again.
    """
    server.add(turn(["charge_1", "ask_2"]), chat(True))
    job = Job(tmp_path, server, ["charge_1", "ask_2"], "async", warm=warm)
    assert job.deliver(None, kill=1, waits={"ask_2": "draw_1"})["killed"] == -9, job.said
    stopped = job.deliver(None, waits={"draw_1": "returned"})
    assert stopped.get("status") == "suspended", job.said
    assert len(job.draws()) == 1, job.said  # the late call was refused: nothing ran
    assert finished(job.deliver(answers(stopped))), job.said
    job.drawn_once([1, 2])


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_single_interrupt_whose_resume_died_mid_draw_settles_the_draw(
    warm: WarmParent, server: KillingServer, tmp_path: Path, face: str
) -> None:
    """One interrupt, answered; the resume dies inside the draw; the redelivery settles it."""
    server.add(turn(["ask_1"]), chat(True))
    job = Job(tmp_path, server, ["ask_1"], face, warm=warm)
    first = job.deliver(None)
    assert job.deliver(answers(first), kill=1)["killed"] == -9, job.said
    assert finished(job.deliver(answers(first))), job.said
    job.drawn_once([1])


# --- parallel interrupts pending together (a task per call), answered together ---------------


@pytest.mark.parametrize("face", ["sync", "async"])
def test_parallel_interrupts_answered_together_whose_resume_died_mid_draw_draw_once(
    warm: WarmParent, server: KillingServer, tmp_path: Path, face: str
) -> None:
    """Two ``interrupt()`` calls pending together, one ``Command`` answers both; killed mid-draw."""
    server.add(turn(["ask_1", "ask_2"]), chat(True))
    job = Job(tmp_path, server, ["ask_1", "ask_2"], face, per_call=True, warm=warm)
    first = job.deliver(None)
    assert len(first["interrupts"]) == 2, job.said
    assert job.deliver(answers(first), kill=2)["killed"] == -9, job.said
    assert finished(job.deliver(answers(first))), job.said
    job.drawn_once([1, 2])


def test_the_cold_child_dies_mid_draw_and_the_next_cold_one_settles_it(
    server: KillingServer, tmp_path: Path
) -> None:
    """The same entry point started cold (``python -m``) for each delivery."""
    need("langchain")
    server.add(turn(["ask_1"]), chat(True))
    job = Job(tmp_path, server, ["ask_1"], "sync")
    first = job.deliver(None)
    assert job.deliver(answers(first), kill=1)["killed"] == -9, job.said
    assert finished(job.deliver(answers(first))), job.said
    job.drawn_once([1])


# --- the kind, generated ----------------------------------------------------------------------


@attrs.frozen
class Plan:
    """One job: the model's parallel calls, the layout, the kill point, the answers, the orders.

    Attributes:
        calls: the model's parallel calls (``ask_N`` asks then draws, ``charge_N`` draws).
        per_call: a task per call (interrupts pending together) or one ToolNode task.
        face: ``sync`` or ``async``.
        resume: ``all``: one ``Command`` answers every pending interrupt; ``one``: the first.
        kill: ``(delivery, N)``: that delivery dies inside draw ``N`` (if it draws it).
        waits: ``(delivery, point, other)``: in that delivery the call at ``point`` waits
            for ``other`` (see tests/integrations/lg_kill_child.py).
        recover: the draw has a ``recover()`` (else a draw left in flight blocks).
    """

    calls: tuple[str, ...]
    per_call: bool
    face: str
    resume: str
    kill: tuple[int, int]
    waits: tuple[tuple[int, str, str], ...]
    recover: bool

    def numbers(self) -> list[int]:
        return [int(name.rsplit("_", 1)[1]) for name in self.calls]


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    asks = draw(st.integers(1, 2))
    charges = draw(st.integers(0, 1))
    names = [f"ask_{n}" for n in range(1, asks + 1)]
    names += [f"charge_{n}" for n in range(asks + 1, asks + charges + 1)]
    calls = tuple(draw(st.permutations(names)))
    face = draw(st.sampled_from(["sync", "async"]))
    numbers = [int(name.rsplit("_", 1)[1]) for name in calls]
    points = [(name, f"draw_{n}") for name in calls for n in numbers if not name.endswith(f"_{n}")]
    if face == "async":  # a late call: only the async ToolNode returns without it
        points += [(f"draw_{n}", "returned") for n in numbers]
    waits = (
        draw(
            st.lists(
                st.tuples(st.integers(1, 4), st.sampled_from(points)).map(lambda w: (w[0], *w[1])),
                max_size=2,
                unique_by=lambda w: (w[0], w[1]),
            )
        )
        if points
        else []
    )
    return Plan(
        calls,
        per_call=draw(st.booleans()),
        face=face,
        resume=draw(st.sampled_from(["all", "one"])),
        kill=(draw(st.integers(1, 3)), draw(st.sampled_from(numbers))),
        waits=tuple(waits),
        recover=draw(st.booleans()),
    )


def drive(plan: Plan, job: Job) -> dict[str, Any]:
    """Deliver the job until it ends (a killed delivery is delivered again, same message)."""
    message: dict[str, str] | None = None
    line: dict[str, Any] = {}
    for delivery in range(1, 9):
        kill = plan.kill[1] if plan.kill[0] == delivery else None
        waits = {point: other for at, point, other in plan.waits if at == delivery}
        line = job.deliver(message, kill, waits=waits)
        if "killed" in line:
            assert line["killed"] == -9, job.said
            continue
        if line.get("status") != "suspended":
            return line
        pending = answers(line)
        message = pending if plan.resume == "all" else dict(list(pending.items())[:1])
    return line


@settings(
    max_examples=examples(default=3, ci=12, thorough=100),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans())
def test_any_kill_point_interrupts_and_answer_order_draw_each_call_once(
    warm: WarmParent, tmp_path_factory: pytest.TempPathFactory, plan: Plan
) -> None:
    """Kill point x number of interrupts x layout x answer order x call order: never drawn twice.

    With ``recover()`` the run finishes and each call drew once; without, it
    finishes or a delivery refuses the draw left in flight
    (``SideEffectRetryBlockedError``), and no call drew twice.
    """
    with killing_server() as server:
        server.add(turn(list(plan.calls)), chat(True))
        tmp = tmp_path_factory.mktemp("inflight")
        job = Job(
            tmp, server, list(plan.calls), plan.face, plan.per_call, plan.recover, warm, hold=2.0
        )
        last = drive(plan, job)
    job.never_twice()
    if plan.recover:
        assert finished(last), (plan, job.said)
        job.drawn_once(plan.numbers())
    else:
        assert finished(last) or "SideEffectRetryBlockedError" in last.get("error", ""), (
            plan,
            job.said,
        )


# --- killed while the model call after the tools is in flight ------------------------------


@pytest.mark.parametrize("per_call", [True, False], ids=["together", "one_toolnode"])
@pytest.mark.parametrize("face", ["sync", "async"])
def test_parallel_interrupts_killed_in_the_model_call_after_the_tools_resume_and_finish(
    warm: WarmParent, server: KillingServer, tmp_path: Path, face: str, per_call: bool
) -> None:
    """Two interrupts answered (together, or one at a time in one ToolNode); the delivery that
    finishes the tools dies while the model call after them is in flight; the next finishes.
    """
    job = Job(tmp_path, server, ["ask_1", "ask_2"], face, per_call=per_call, warm=warm)
    server.add(turn(["ask_1", "ask_2"]), KillAt(pidfile=str(job.pidfile)), chat(True))
    line = job.deliver(None)
    message: dict[str, str] = {}
    for _ in range(4):
        if "killed" not in line:
            assert line.get("status") == "suspended", job.said
            message = answers(line)
        line = job.deliver(message)
        if finished(line):
            break
    assert finished(line), job.said
    assert any(said.get("killed") == -9 for said in job.said), job.said
    job.drawn_once([1, 2])
    assert len(server.requests) == 3  # the turn, the killed call, the call that finished


@pytest.mark.parametrize("per_call", [True, False], ids=["task_per_call", "one_toolnode"])
@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_draw_whose_task_writes_were_saved_before_the_kill_is_answered_not_waited_for(
    warm: WarmParent, server: KillingServer, tmp_path: Path, face: str, per_call: bool
) -> None:
    """The resume draws, the ``ToolNode`` finishes and its writes are saved, the checkpoint
    after it is lost and the process is killed in the model call after it.

    LangGraph hands the ``ToolNode``'s writes back on the next resume and does
    not ask the draw again: the step note naming the draw's task must have
    been durable before those writes were. Before, it was queued after the
    draw's result and died with the process: the next resume could not tell
    the draw's task, left it unasked and stopped with ``DivergenceError`` at
    the model call (the intermittent failure of the test above, forced).
    """
    job = Job(tmp_path, server, ["ask_1"], face, per_call=per_call, warm=warm)
    server.add(turn(["ask_1"]), KillAt(pidfile=str(job.pidfile)), chat(True))
    first = job.deliver(None)
    assert job.deliver(answers(first), lose=True)["killed"] == -9, job.said
    assert finished(job.deliver(answers(first))), job.said
    job.drawn_once([1])


def test_an_unasked_step_is_kept_under_no_task_until_a_task_asks_it() -> None:
    """``keep`` files steps left unasked under ``""``; ``saw`` moves one to its task."""
    need("langchain")
    from langchain_core.runnables.config import var_child_runnable_config

    from redrive.integrations._langgraph_tasks import TaskSteps, kept_tasks

    steps = TaskSteps({"tools": [4]})
    steps.keep([4, 7, 9])  # 4 is filed already; 7 and 9 were left unasked
    assert steps.by_task() == {"": [7, 9], "tools": [4]}
    assert kept_tasks(steps.by_task(), set()) == {"": [7, 9]}  # kept whatever runs again
    token = var_child_runnable_config.set({"metadata": {"langgraph_checkpoint_ns": "tools:abc"}})
    try:
        assert steps.saw(7) == "abc"  # a task asked it: filed under that task from now on
    finally:
        var_child_runnable_config.reset(token)
    assert steps.by_task() == {"": [9], "abc": [7], "tools": [4]}
