"""Crash tests with real processes: resuming a run after a deploy changed the code.

A child (tests/crash/deploy_child.py) runs a refund desk on a DuckDB journal and
is SIGKILLed once its refund is journaled; a child of the next version resumes
the run. What ran is read from a side-effect log the children append to and
fsync, outside them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from redrive import cli

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]


class Desk:
    """Drives the children of one run and reads their side-effect log."""

    def __init__(self, tmp: Path) -> None:
        self.journal = str(tmp / "runs.duckdb")
        self.log = tmp / "effects.log"

    def child(
        self, version: str, kill_at: str = "none", on_drift: str = "raise"
    ) -> tuple[int, Any]:
        """Run one child; return its exit code and JSON result (None when killed)."""
        env = {**os.environ, "REDRIVE_ON_DRIFT": on_drift}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.crash.deploy_child",
                self.journal,
                str(self.log),
                version,
                kill_at,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode == -signal.SIGKILL:
            return proc.returncode, None
        assert proc.returncode in (0, 4), proc.stderr
        return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])

    def lines(self, prefix: str) -> list[str]:
        """The side-effect lines starting with ``prefix``."""
        return [line for line in self.log.read_text().splitlines() if line.startswith(prefix)]


def test_killed_then_resumed_after_a_prompt_and_tool_argument_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kill after the refund; deploy v2 (new prompt, new email subject); resume: strict
    replay stops at seq 1 with nothing re-run; under on_drift=continue_live the model step
    is re-asked with the new prompt, the refund is replayed (once in all), the email goes
    out once with the new subject, and the transcript shows the re-asked step."""
    desk = Desk(tmp_path)
    code, _ = desk.child("v1", kill_at="refund")
    assert code == -signal.SIGKILL and desk.lines("refund") == ["refund A 10"]
    code, strict = desk.child("v2")
    assert code == 4 and strict == {"error": "DivergenceError", "seq": 1, "name": "model:ask"}
    assert desk.lines("refund") == ["refund A 10"] and desk.lines("email") == []
    code, done = desk.child("v2", on_drift="continue_live")
    assert code == 0 and done["status"] == "succeeded"
    assert [note["step"] for note in done["reasked"]] == [1]
    assert desk.lines("refund") == ["refund A 10"]
    assert desk.lines("email") == ["email ada@example.com [v2] Refund"]
    assert desk.lines("model") == [
        "model You are a refund desk.",
        "model You are a kind refund desk.",
    ]
    assert cli.main(["--journal", desk.journal, "show", "desk:1"]) == 0
    shown = capsys.readouterr().out
    assert "re-asked live at seq 1" in shown
    code, again = desk.child("v2")  # finished: replayed whole, nothing runs
    assert code == 0 and again["status"] == "succeeded"
    assert len(desk.lines("")) == 4


def test_a_changed_argument_of_a_finished_side_effect_is_never_re_run(tmp_path: Path) -> None:
    """Kill after the refund; deploy v3 (new prompt and a new refund amount); resume under
    continue_live: the re-asked model step goes live, the refund asked with another amount
    diverges, and the refund ran once."""
    desk = Desk(tmp_path)
    desk.child("v1", kill_at="refund")
    code, result = desk.child("v3", on_drift="continue_live")
    assert code == 4 and result["name"] == "refund" and result["seq"] == 3
    assert desk.lines("refund") == ["refund A 10"] and desk.lines("email") == []
