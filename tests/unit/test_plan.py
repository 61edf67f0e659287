"""The resume plan (``redrive.plan``, ``redrive plan``) agrees with what the resume then does.

Journal shapes are drawn by Hypothesis over the loop of :mod:`tests.plan_app`:
finished runs, runs interrupted at each step boundary (a tool in flight
included), approvals asked and decided or not, and a code change (the model
step's prompt) between the record and the resume. For each, the plan is made
first (it writes nothing), then the run is resumed as ``redrive resume`` does
it, and the two are compared: the outcome, how many steps replayed, and what
became of the step in flight (read from the side-effect log outside the run).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive.replay import set_boundary_hook
from redrive.storage import Journal, MemoryJournal
from tests import plan_app

OPS = ("ask", "safe", "unsafe", "rec", "approve")
BOUNDARIES = ("model_after", "tool_claimed", "tool_body_done", "tool_recorded")


class Kill(SystemExit):
    """Stops the loop at a boundary as a kill does: the run stays resumable (not failed)."""


@pytest.fixture(autouse=True)
def effects_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test's side-effect log, outside the runs; the app's prompt restored after."""
    log = tmp_path / "effects.log"
    monkeypatch.setenv("PLAN_APP_LOG", str(log))
    yield log
    plan_app.PROMPT = "v1"
    set_boundary_hook(None)


def _record(
    journal: Journal, ops: list[str], name: str, crash: tuple[str, int] | None, face: str
) -> None:
    """Run the loop once; with ``crash=(boundary, n)``, stop it at the n-th time it passes there."""
    seen = {"n": 0}

    def hook(point: str, info: dict[str, Any]) -> None:
        if crash is not None and point == crash[0]:
            seen["n"] += 1
            if seen["n"] == crash[1]:
                raise Kill(f"killed at {point}")

    set_boundary_hook(hook)
    try:
        _drive(journal, ops, name, face)
    except Kill:
        pass
    finally:
        set_boundary_hook(None)


def _drive(journal: Journal, ops: list[str], name: str, face: str) -> Any:
    target = plan_app.handle if face == "sync" else plan_app.ahandle
    run = target.redrive_recover(journal, f"plan:{name}", [], {"ops": ops, "name": name}, {})
    return asyncio.run(run) if asyncio.iscoroutine(run) else run


def _replays_before_decision(plan: redrive.ResumePlan) -> tuple[int, int]:
    """The fewest and most steps the resume replays: a ``recover()`` that finds its step
    done hands back that outcome as replayed; one that finds it not done re-runs it."""
    count = recovers = 0
    for step in plan.steps:
        if step.decide:
            break
        count += step.action == "replay"
        recovers += step.action == "recover"
    return count, count + recovers


def _check(journal: Journal, name: str, ops: list[str], decide: bool, change: bool) -> None:
    """Plan, resume, compare (the body of the property)."""
    rid = f"plan:{name}"
    if decide:
        for approval in redrive.replay.pending_approvals(journal, rid):
            journal.decide(rid, approval["name"], True, by="ops")
    if change:
        plan_app.PROMPT = "v2"
    frames_before = [f.seq for f in journal.frames(rid)]
    found = redrive.plan(journal, rid)
    assert [f.seq for f in journal.frames(rid)] == frames_before  # the plan wrote nothing
    before = plan_app.effects()
    record = journal.get_run(rid)
    assert record is not None
    (result,) = redrive.recover_runs(journal, runs=[record]).results
    ran = plan_app.effects()[len(before) :]
    expected = {
        "finished": {"already_done"},
        "continues": {"recovered", "suspended"},
        "suspends": {"suspended"},
        "ended": {"already_done", "failed"},
    }
    first = found.first_decision
    if found.outcome == "stops":
        assert first is not None
        want = {"block": {"blocked"}, "diverge": {"diverged"}}[first.action]
        assert result.outcome in want, (found.summary(), result)
    else:
        assert result.outcome in expected[found.outcome], (found.summary(), result)
    if found.outcome == "finished":
        assert result.live_steps == 0 and ran == []
        return
    if first is not None and first.seq is not None and first.action in ("block", "diverge"):
        assert f"seq {first.seq}" in result.message, (found.summary(), result)
    else:  # it went through its record: the same steps replayed as planned
        low, high = _replays_before_decision(found)
        assert low <= result.replayed_steps <= high, (found.summary(), result)
    for step in found.steps:
        if step.decide and step is not first:
            break  # the resume stops at the first decision: nothing after it happens
        if step.kind != "tool" or step.action not in ("rerun", "recover", "block"):
            if step is first:
                break
            continue
        i = int(ops_index(step, journal, rid))
        if step.action == "rerun":
            assert f"{ops[i]} {i}" in ran, (found.summary(), ran)
        elif step.action == "recover":
            assert ran[0] == f"recover {i}", (found.summary(), ran)
        else:
            assert not any(line.endswith(f" {i}") for line in ran), (found.summary(), ran)
        if step is first:
            break


def ops_index(step: redrive.PlanStep, journal: Journal, rid: str) -> int:
    """The op index a recorded tool step was called with (its ``i`` argument)."""
    for s in redrive.replay.iter_steps(journal.frames(rid)):
        if s.seq == step.seq:
            return int(s.args["i"])
    raise AssertionError(f"no step at seq {step.seq}")


@settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None
)
@given(
    ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=5),
    crash=st.one_of(
        st.none(), st.tuples(st.sampled_from(BOUNDARIES), st.integers(min_value=1, max_value=3))
    ),
    decide=st.booleans(),
    change=st.booleans(),
    face=st.sampled_from(["sync", "async"]),
)
def test_the_plan_agrees_with_what_the_resume_then_does(
    ops: list[str], crash: tuple[str, int] | None, decide: bool, change: bool, face: str
) -> None:
    """For every journal shape (finished, interrupted at each boundary, a step in flight,
    approvals decided or not, a prompt changed), the resume does what its plan said: the
    same outcome, the same number of replayed steps, and the step in flight re-run,
    recovered or blocked as planned."""
    journal = MemoryJournal()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PLAN_APP_LOG"] = str(Path(tmp) / "effects.log")  # one log per example
        try:
            _record(journal, ops, "p", crash, face)
            _check(journal, "p", ops, decide, change)
        finally:
            plan_app.PROMPT = "v1"


@pytest.mark.parametrize("face", ["sync", "async"])
def test_plan_names_the_first_decision_and_the_step_in_flight(face: str, backend: Journal) -> None:
    """A run killed with a side effect in flight: the plan replays what finished, blocks the
    unsafe step as the first decision a person makes (naming redrive resolve), and the
    resume stops there without running it; on DuckDB and Postgres."""
    journal = backend
    _record(journal, ["ask", "safe", "unsafe", "ask"], "b", ("tool_claimed", 2), face)
    found = (
        redrive.plan(journal, "plan:b")
        if face == "sync"
        else asyncio.run(redrive.aplan(journal, "plan:b"))
    )
    assert [s.action for s in found.steps] == ["replay", "replay", "block"]
    assert found.outcome == "stops" and found.first_decision is found.steps[2]
    assert f"redrive resolve plan:b {found.steps[2].seq} --done" in found.first_decision.why
    assert "first decision at seq" in found.summary()
    _check(journal, "b", ["ask", "safe", "unsafe", "ask"], False, False)


@pytest.fixture(params=["duckdb", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """A fresh DuckDB or Postgres journal."""
    if request.param == "duckdb":
        journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    else:
        from redrive.storage.postgres import PostgresJournal

        url = request.getfixturevalue("pg_url")
        journal = PostgresJournal(url, schema=request.getfixturevalue("pg_schema"), max_size=4)
    yield journal
    journal.close()


def test_cli_plan_and_recover_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`redrive plan` prints the plan (text and --json, exit 1 when a person must decide);
    `recover --dry-run` shows the plan of each run it would drive and why it leaves others."""
    path = str(tmp_path / "runs.duckdb")
    journal = redrive.open_journal(path)
    _record(journal, ["ask", "rec", "ask"], "r", ("tool_claimed", 1), "sync")
    _record(journal, ["approve"], "a", None, "sync")
    journal.close()
    assert cli.main(["--journal", path, "plan", "plan:r"]) == 0
    text = capsys.readouterr().out
    assert "recover" in text and "continues live" in text
    assert cli.main(["--journal", path, "--json", "plan", "plan:a"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["outcome"] == "suspends" and data["first_decision"]["action"] == "wait"
    assert cli.main(["--journal", path, "recover", "--stale", "0", "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "would recover plan:r (interrupted)" in text and "seq" in text
    assert "would leave plan:a (suspended): waits for a decision on approval 'ok0'" in text


def test_an_ended_run_plans_no_resume() -> None:
    """A failed run's plan says it cannot resume, and why."""
    journal = MemoryJournal()
    with pytest.raises(KeyError), redrive.run(journal, "f"):
        raise KeyError("a bug")
    found = redrive.plan(journal, "f")
    assert found.outcome == "ended" and "TerminalRunError" in found.note
    with pytest.raises(redrive.UnknownRunError):
        redrive.plan(journal, "nope")
