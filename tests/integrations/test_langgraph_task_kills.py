"""LangGraph ``@task`` + ``interrupt()`` under real SIGKILLs: each card charged once, the run ends.

Each delivery of the job runs in a real child process
(tests/integrations/lg_task_kill_child.py, forked from a warm parent), which
SIGKILLs itself inside a charge after the side effect, before its result is
journaled. The body: the ``@task`` ``pay(1)`` charges card 1, ``interrupt()``,
then the ``@task`` ``pay(2)`` charges card 2 and the body charges card 3 (a
tool step outside any ``@task``). Every charge appends ``draw N key=...`` to a
log outside the process. The same run id is delivered again, with the same
message, until the run ends: each card must be charged exactly once and the
run must finish; without a ``recover()`` the redelivery refuses the charge
left in flight (``SideEffectRetryBlockedError``) and never charges it twice.

The mechanisms under test: a killed charge is in flight in the journal and is
settled by ``recover()`` with its own idempotency key (never run anew); a
``@task`` whose ``__return__`` write the checkpointer saved is handed back on
resume and its charge is answered by the checkpointer (not kept askable: the
resume would end in ``DivergenceError``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.crash.warm import WarmParent
from tests.integrations.conftest import need

ROOT = Path(__file__).resolve().parents[2]
CHILD = "tests.integrations.lg_task_kill_child"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WARM = [
    "redrive",
    "duckdb",
    CHILD,
    "langgraph.func",
    "langgraph.graph",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.sqlite.aio",
]
DONE = "drew 1:yes:drew 2:drew 3"


@pytest.fixture(scope="module")
def warm() -> Iterator[WarmParent]:
    need("langchain")
    parent = WarmParent(WARM, env=ENV)
    try:
        yield parent
    finally:
        parent.close()


@attrs.define
class Job:
    """A job's world (journal, checkpoints, side-effect log) and its deliveries."""

    tmp: Path
    warm: WarmParent
    shape: str
    face: str
    recover: bool = True
    inside: bool = False
    count: int = 0
    said: list[Any] = attrs.Factory(list)

    def deliver(self, resume: str | None, kill: int | None = None) -> dict[str, Any]:
        """One delivery in a child; its JSON line, or ``{"killed": code}`` when it was killed."""
        self.count += 1
        job = {
            "journal": str(self.tmp / "runs.duckdb"),
            "checkpoints": str(self.tmp / "cp.db"),
            "effects": str(self.effects),
            "shape": self.shape,
            "face": self.face,
            "recover": self.recover,
            "inside": self.inside,
            "resume": resume,
            "kill": kill,
        }
        path = self.tmp / f"job-{self.count}.json"
        path.write_text(json.dumps(job))
        done = self.warm.run(
            f"{CHILD}:main",
            [str(path)],
            env=ENV,
            cwd=self.tmp,
            files=self.tmp / f"child-{self.count}",
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

    def charged(self) -> list[str]:
        """The charges made, ``draw N``, in order (keys dropped)."""
        lines = self.effects.read_text().splitlines() if self.effects.exists() else []
        return [line.split(" key=")[0] for line in lines]

    def until_done(self, resume: str | None, kill: int | None) -> dict[str, Any]:
        """Deliver ``resume`` (killing at charge ``kill`` the first time) until not killed."""
        line = self.deliver(resume, kill)
        assert line.get("killed") == -9, self.said
        for _ in range(3):
            line = self.deliver(resume)
            if "killed" not in line:
                return line
        raise AssertionError(self.said)


SHAPES = pytest.mark.parametrize("shape", ["entrypoint", "nested", "node"])
FACES = pytest.mark.parametrize("face", ["sync", "async"])
#: the question asked by the body after ``pay(1)`` returned, or by ``pay(1)`` itself after its
#: charge (langgraph#6577's own shape: the task has not returned, LangGraph runs it again)
WHERE = pytest.mark.parametrize("inside", [False, True], ids=["asks_after", "asks_inside"])


@WHERE
@FACES
@SHAPES
def test_killed_inside_the_tasks_charge_in_the_first_delivery(
    warm: WarmParent, tmp_path: Path, shape: str, face: str, inside: bool
) -> None:
    """(i) The first delivery dies inside ``pay(1)``'s charge, after the side effect.

    Its redelivery settles the charge by ``recover()`` and stops at the
    interrupt; the resume hands ``pay(1)`` back (or, when it asked the question
    itself, runs it again and its settled charge replays) and charges 2 and 3:
    the run finishes, each card charged once.
    """
    job = Job(tmp_path, warm, shape, face, inside=inside)
    stopped = job.until_done(None, kill=1)
    assert stopped.get("status") == "suspended", job.said
    # one question (a nested entrypoint whose @task asks surfaces it twice, same id:
    # LangGraph's own, langgraph#6792 / #6793, without redrive too)
    assert {(i["id"], i["value"]) for i in stopped["interrupts"]} == {
        (stopped["interrupts"][0]["id"], "ok?")
    }, job.said
    assert job.charged() == ["draw 1"], job.said
    line = job.deliver("yes")
    assert (line.get("status"), line.get("output")) == ("succeeded", DONE), job.said
    assert job.charged() == ["draw 1", "draw 2", "draw 3"], job.said


@pytest.mark.parametrize("at", [2, 3], ids=["task_charge", "body_charge"])
@WHERE
@FACES
@SHAPES
def test_killed_inside_a_charge_of_the_resume(
    warm: WarmParent, tmp_path: Path, shape: str, face: str, inside: bool, at: int
) -> None:
    """(ii) The resume (``Command(resume=...)``) dies inside ``pay(2)``'s charge or the body's.

    Its redelivery, same answer, hands ``pay(1)`` back (the checkpointer's; or
    runs it again, when it asked the question itself, and its charge replays),
    settles the charge left in flight by ``recover()`` and finishes: each card
    charged once.
    """
    job = Job(tmp_path, warm, shape, face, inside=inside)
    assert job.deliver(None).get("status") == "suspended", job.said
    line = job.until_done("yes", kill=at)
    assert (line.get("status"), line.get("output")) == ("succeeded", DONE), job.said
    assert job.charged() == ["draw 1", "draw 2", "draw 3"], job.said


@pytest.mark.parametrize("delivery", ["first", "resume"])
@FACES
@pytest.mark.parametrize("shape", ["entrypoint", "node"])
def test_without_recover_a_charge_left_in_flight_is_refused_never_charged_twice(
    warm: WarmParent, tmp_path: Path, shape: str, face: str, delivery: str
) -> None:
    """No ``recover()``: the redelivery refuses the killed charge (``SideEffectRetryBlockedError``).

    Killed inside ``pay(1)`` in the first delivery, or inside ``pay(2)`` in the
    resume: every redelivery refuses, naming ``redrive resolve``; no card is
    charged twice.
    """
    job = Job(tmp_path, warm, shape, face, recover=False)
    if delivery == "first":
        line, want = job.until_done(None, kill=1), ["draw 1"]
    else:
        assert job.deliver(None).get("status") == "suspended", job.said
        line, want = job.until_done("yes", kill=2), ["draw 1", "draw 2"]
    assert "SideEffectRetryBlockedError" in line.get("error", ""), job.said
    assert "redrive resolve job:7" in line["error"], job.said
    again = job.deliver(None if delivery == "first" else "yes")
    assert "SideEffectRetryBlockedError" in again.get("error", ""), job.said
    assert job.charged() == want, job.said


# --- the kind, generated ----------------------------------------------------------------------


@attrs.frozen
class Plan:
    """One job: shape, face, where the question is asked, kills, ``recover()`` or not.

    ``kills``: ``(delivery, N)``: that delivery dies inside charge ``N`` (if it charges it);
    deliveries are numbered from 1, a killed one delivered again with the same message.
    """

    shape: str
    face: str
    inside: bool
    kills: tuple[tuple[int, int], ...]
    recover: bool


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    kills = draw(
        st.lists(
            st.tuples(st.integers(1, 4), st.integers(1, 3)), max_size=2, unique_by=lambda k: k[0]
        )
    )
    return Plan(
        shape=draw(st.sampled_from(["entrypoint", "nested", "node"])),
        face=draw(st.sampled_from(["sync", "async"])),
        inside=draw(st.booleans()),
        kills=tuple(kills),
        recover=draw(st.booleans()),
    )


@settings(
    max_examples=examples(default=3, ci=12, thorough=100),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans())
def test_any_kill_points_charge_each_card_at_most_once_and_the_run_ends(
    warm: WarmParent, tmp_path_factory: pytest.TempPathFactory, plan: Plan
) -> None:
    """Shape x face x question place x kill points x ``recover()``: no card charged twice.

    With ``recover()`` the run finishes, each card charged once; without, it
    finishes (no kill landed in a charge) or a delivery refuses the charge left
    in flight (``SideEffectRetryBlockedError``).
    """
    job = Job(tmp_path_factory.mktemp("taskkill"), warm, plan.shape, plan.face)
    job.recover, job.inside = plan.recover, plan.inside
    kills = dict(plan.kills)
    message: str | None = None
    line: dict[str, Any] = {}
    for delivery in range(1, 9):
        line = job.deliver(message, kills.get(delivery))
        if "killed" in line:
            assert line["killed"] == -9, job.said
            continue
        if line.get("status") != "suspended":
            break
        message = "yes"
    charged = job.charged()
    assert len(set(charged)) == len(charged), (plan, job.said)
    if plan.recover or not any("killed" in said for said in job.said):
        assert (line.get("status"), line.get("output")) == ("succeeded", DONE), (plan, job.said)
        assert charged == ["draw 1", "draw 2", "draw 3"], (plan, job.said)
    else:
        assert "SideEffectRetryBlockedError" in line.get("error", ""), (plan, job.said)
