"""Crash matrix: SIGKILL a real worker at every boundary of the support-desk run, then resume.

Each case runs the demo worker (``redrive.demo.worker``'s ``main``) against the
scripted model server (in this test process) and a DuckDB journal, with
``REDRIVE_KILL_AT`` naming the boundary where the child SIGKILLs itself (through
``redrive.replay.set_boundary_hook``). A second child resumes the run. The
truth comes from outside both processes: the side-effect log the tools
append to, and the model server's request counter.

The children of the kill cases are real processes forked from a warm parent that
has imported the worker and the OpenAI SDK (tests/crash/warm.py): each is killed
for real and the resume is a fresh process that knows only what is on disk, without
paying a cold interpreter's start-up (about 3 s of CPU) 34 times. The cold entry
point, ``python -m redrive.demo.worker``, is what
:func:`test_finished_run_replays_without_calls` and the demo tests start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from redrive.demo import main as demo_main
from redrive.demo.server import ScriptedModelServer
from redrive.demo.tools import read_log
from tests.crash.warm import WarmParent

pytestmark = pytest.mark.crash

RUN_ID = "support:job-4417"
TOOLS = ("lookup_customer", "open_ticket", "send_email")  # the i-th tool follows model call i
SIDE_EFFECTS = ("open_ticket", "send_email")
MODEL_CALLS = 4


@attrs.frozen
class Case:
    """One crash point and what the resume must do after it."""

    point: str
    calls_before_kill: int  # model requests the server answered before the kill
    blocked: bool = False  # resume must raise SideEffectRetryBlockedError
    body_ran: bool = True  # the killed tool's body ran before the kill (tool cases)
    tool: str | None = None


def _cases() -> list[Case]:
    cases = []
    for k in range(1, MODEL_CALLS + 1):
        cases.append(Case(f"model_before#{k}", calls_before_kill=k - 1))
        cases.append(Case(f"model_after#{k}", calls_before_kill=k))
    for i, name in enumerate(TOOLS, start=1):
        unsafe = name in SIDE_EFFECTS
        cases.append(Case(f"tool_claimed:{name}", i, blocked=unsafe, body_ran=False, tool=name))
        cases.append(Case(f"tool_body_done:{name}", i, blocked=unsafe, tool=name))
        cases.append(Case(f"tool_recorded:{name}", i, tool=name))
    return cases


#: what the warm parent imports before it forks the kill cases' children
WARM = ["redrive.demo.worker", "openai", "openai.resources", "httpx", "duckdb"]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as running:
        yield running


@pytest.fixture(scope="module")
def warm() -> Iterator[WarmParent]:
    parent = WarmParent(WARM)
    try:
        yield parent
    finally:
        parent.close()


def _args(server: ScriptedModelServer, tmp: Path) -> list[str]:
    return [
        "--journal",
        str(tmp / "runs.duckdb"),
        "--log",
        str(tmp / "effects.jsonl"),
        "--base-url",
        server.base_url,
        "--run-id",
        RUN_ID,
    ]


def _env(kill_at: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "REDRIVE_KILL_AT"}
    if kill_at:
        env["REDRIVE_KILL_AT"] = kill_at
    return env


def _worker(
    server: ScriptedModelServer, tmp: Path, kill_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    """A cold ``python -m redrive.demo.worker`` process."""
    cmd = [sys.executable, "-m", "redrive.demo.worker", *_args(server, tmp)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(kill_at), timeout=120)


def _forked(
    warm: WarmParent, server: ScriptedModelServer, tmp: Path, kill_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The same worker in a process forked from the warm parent."""
    name = "killed" if kill_at else "resumed"
    return warm.run(
        "redrive.demo.worker:main",
        [_args(server, tmp)],
        env=_env(kill_at),
        cwd=tmp,
        files=tmp / name,
    )


def _summary(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no summary (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def _ran(tmp: Path) -> Counter[str]:
    return Counter(entry["tool"] for entry in read_log(tmp / "effects.jsonl"))


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case.point)
def test_kill_and_resume(
    case: Case, server: ScriptedModelServer, warm: WarmParent, tmp_path: Path
) -> None:
    """A run SIGKILLed at this boundary resumes with every side effect exactly once, or blocks."""
    start = server.calls
    first = _forked(warm, server, tmp_path, kill_at=case.point)
    assert first.returncode == -signal.SIGKILL, (first.returncode, first.stdout, first.stderr)
    assert server.calls - start == case.calls_before_kill
    before = _ran(tmp_path)

    resumed_at = server.calls
    second = _forked(warm, server, tmp_path)
    summary = _summary(second)
    after = _ran(tmp_path)
    resume_calls = server.calls - resumed_at

    if case.blocked:
        assert second.returncode == 3, second.stderr
        assert summary["error"]["type"] == "SideEffectRetryBlockedError"
        assert case.tool is not None and case.tool in summary["error"]["message"]
        assert after == before, "resume ran a tool after a blocked step"
        assert after[case.tool] == (1 if case.body_ran else 0)
        assert resume_calls == 0
        assert [s["how"] for s in summary["steps"] if s["name"] == case.tool] == ["blocked"]
        return

    assert second.returncode == 0, (summary, second.stderr)
    assert summary["status"] == "succeeded"
    for name in SIDE_EFFECTS:
        assert after[name] == 1, f"{name} ran {after[name]} times"
    # the read-only lookup is re-run only when it was in flight after its body ran
    reran_lookup = case.point == "tool_body_done:lookup_customer"
    assert after["lookup_customer"] == (2 if reran_lookup else 1)
    # a resume pays only for model calls whose response was not yet durable
    durable = case.calls_before_kill - (1 if case.point.startswith("model_after") else 0)
    assert resume_calls == MODEL_CALLS - durable
    ticket = next(e for e in read_log(tmp_path / "effects.jsonl") if e["tool"] == "open_ticket")
    email = next(e for e in read_log(tmp_path / "effects.jsonl") if e["tool"] == "send_email")
    assert ticket["result"]["ticket_id"] in email["args"]["body"]
    assert ticket["result"]["ticket_id"] in summary["final"]
    hows = Counter(step["how"] for step in summary["steps"])
    assert hows["replayed"] + hows["live"] + hows["rerun"] == len(summary["steps"])


def test_finished_run_replays_without_calls(server: ScriptedModelServer, tmp_path: Path) -> None:
    """Re-entering a finished run in a new process makes no model call and runs no tool."""
    done = _worker(server, tmp_path)
    assert done.returncode == 0, done.stderr
    calls, ran = server.calls, _ran(tmp_path)
    again = _summary(_worker(server, tmp_path))
    assert (server.calls, _ran(tmp_path)) == (calls, ran)
    assert again["final"] == _summary(done)["final"]
    assert again["live"] == 0
    assert {step["how"] for step in again["steps"]} == {"replayed"}


def test_demo_tells_the_story(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`redrive demo` kills, resumes, replays and diverges, and its account says so."""
    code = demo_main(["--dir", str(tmp_path), "--run-id", "support:job-demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    for line in (
        "killed with SIGKILL",
        "replayed from the journal",
        "ran live",
        "ok   the ticket was opened exactly once",
        "ok   the email was sent exactly once",
        "ok   zero model calls and zero tool executions",
        "DivergenceError",
        "$.subject: 'Order #4417 arrived damaged'",
    ):
        assert line in out, f"missing {line!r} in:\n{out}"
    assert "FAIL" not in out
    ran = Counter(entry["tool"] for entry in read_log(tmp_path / "side_effects.jsonl"))
    assert ran == Counter({"lookup_customer": 1, "open_ticket": 1, "send_email": 1})


def test_demo_json_account(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`redrive demo --json` reports the model calls per act and the side effects it counted."""
    code = demo_main(["--dir", str(tmp_path), "--run-id", "support:job-json", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 == report["exit_code"]
    assert report["model_calls"] == {"first_worker": 2, "resume": 2, "replay": 0, "divergence": 0}
    assert report["side_effects"] == {"lookup_customer": 1, "open_ticket": 1, "send_email": 1}
    assert report["acts"]["killed"]["exit_code"] == -signal.SIGKILL
    assert report["acts"]["divergence"]["error"]["type"] == "DivergenceError"
    assert all(check["ok"] for check in report["checks"])
