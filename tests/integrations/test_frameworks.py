"""Agent frameworks on a wrapped client and redrive tools, killed mid-run in a real process.

For each framework and model API (tests/integrations/agent_child.py): a child
process runs the agent against a scripted OpenAI- or Anthropic-compatible
server; the model asks for the tool ``send_email`` (its side effect: a line
fsynced to a file outside the process), then the child is SIGKILLed while its
next model call is in flight (mid-stream for a streamed turn). A second child
resumes the run: the tool is not run again, only the unfinished model call
goes out. Then, once the parent has checked the server and the side-effect log,
the same fresh child replays the run offline (``live=False``, the journal
opened afresh): no model call, the same answer. (One child for the two phases
spares a cold start of the framework per scenario; the resume is still the
first thing a fresh process does.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.integrations.agent_child import RUN_ID
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, REPLIES, HoldingServer, held, script, serve

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _command(scenario: str, tmp: Path, server: HoldingServer, mode: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.integrations.agent_child",
        scenario,
        str(tmp / "runs.duckdb"),
        str(tmp / "effects.log"),
        server.url + "/v1",
        mode,
    ]


def _output(child: subprocess.Popen[str], stderr: Path) -> Any:
    """The next ``{"output": ...}`` line ``child`` prints (the end of one of its phases)."""
    assert child.stdout is not None
    for line in iter(child.stdout.readline, ""):
        if line.startswith('{"output"'):
            return json.loads(line)["output"]
    child.wait(timeout=300)
    raise AssertionError(f"exit {child.returncode} first: {stderr.read_text()[-4000:]}")


def _effects(tmp: Path) -> list[str]:
    path = tmp / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("scenario", sorted(REPLIES))
def test_killed_mid_run_resumes_without_a_second_side_effect_then_replays_offline(
    scenario: str, tmp_path: Path
) -> None:
    """SIGKILL during the second model call; the resume sends no email again; replay is offline.

    A streamed turn is killed mid-stream (its first chunks read), a JSON one
    before its response arrives: either way the cut call is asked again.
    """
    need(scenario.split("-")[0])
    tool_call, final = script(scenario)
    with serve() as server:
        server.add(tool_call, held(final))  # a stream hangs after its first chunks
        child = subprocess.Popen(
            _command(scenario, tmp_path, server, "live"),
            cwd=tmp_path,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            while not server.holding.is_set() and child.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=0.05)
            assert child.poll() is None, child.communicate()[1][-4000:]
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate()
        assert child.returncode == -signal.SIGKILL
        assert _effects(tmp_path) == ["email to ada@example.com"]

        server.add(final)
        err = tmp_path / "resume.err"  # a file, so a chatty child never blocks on a full pipe
        with (
            err.open("w") as err_file,
            subprocess.Popen(
                _command(scenario, tmp_path, server, "live,offline"),
                cwd=tmp_path,
                env=ENV,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err_file,
                text=True,
            ) as resumer,
        ):
            watchdog = threading.Timer(300, resumer.kill)  # a hung child fails, not hangs, CI
            watchdog.start()
            try:
                assert _output(resumer, err) == FINAL
                assert server.count() == 3  # only the model call cut off by the kill went again
                assert _effects(tmp_path) == ["email to ada@example.com"]

                assert resumer.stdin is not None
                resumer.stdin.write("go\n")  # now the offline replay, in the same fresh child
                resumer.stdin.close()
                assert _output(resumer, err) == FINAL
                assert resumer.wait() == 0, err.read_text()[-4000:]
                assert server.count() == 3  # the offline replay made no model call
                assert _effects(tmp_path) == ["email to ada@example.com"]
            finally:
                watchdog.cancel()
                if resumer.poll() is None:
                    resumer.kill()

    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    try:
        steps = [(f.kind, f.name) for f in journal.frames(RUN_ID) if f.kind.startswith("tool")]
        record = journal.get_run(RUN_ID)
    finally:
        journal.close()
    assert steps == [("tool_start", "send_email"), ("tool_done", "send_email")]
    assert record is not None and record.status == "succeeded"


@pytest.mark.parametrize(
    "scenario", ["agents-chat", "pydantic-openai-stream", "langchain-openai", "litellm-stream"]
)
def test_killed_inside_a_tool_body_the_resume_is_blocked_not_sent_twice(
    scenario: str, tmp_path: Path
) -> None:
    """Killed after the email went out but before its result was journaled: never sent again.

    A peer's report (PraisonAI #4217): plain framework tools re-run their side
    effect on resume. Here the adapted tool's claim was journaled before its
    body ran, so the resume refuses to run it again (SideEffectRetryBlockedError)
    instead of telling the framework's error handler, and the run stays resumable.
    """
    need(scenario.split("-")[0])
    tool_call, _final = script(scenario)
    with serve() as server:
        server.add(tool_call)
        killed = subprocess.run(
            _command(scenario, tmp_path, server, "live"),
            cwd=tmp_path,
            env={**ENV, "KILL_IN_TOOL": "1"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-4000:]
        assert _effects(tmp_path) == ["email to ada@example.com"]
        server.add(tool_call)  # in case the resume asks again (it must not)
        resumed = subprocess.run(
            _command(scenario, tmp_path, server, "live"),
            cwd=tmp_path,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert resumed.returncode != 0
        assert "SideEffectRetryBlockedError" in resumed.stderr, resumed.stderr[-4000:]
        assert _effects(tmp_path) == ["email to ada@example.com"]
        assert server.count() == 1  # the first model call replayed; nothing after the block
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    try:
        record = journal.get_run(RUN_ID)
    finally:
        journal.close()
    assert record is not None and record.status == "running"
