"""Crash tests with real processes for issue 4 items 2, 3 and 4.

A child (tests/crash/resume_child.py) runs a small payment loop on a DuckDB
journal and SIGKILLs itself at a step boundary; a new child resumes the run.
What ran, and how often, is read from side-effect files the children append
to and fsync (the log of body executions and the payment provider's ledger).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import redrive

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]


class Payment:
    """Drives the child processes for one run and reads their side effects."""

    def __init__(self, tmp: Path, scenario: str) -> None:
        self.journal = str(tmp / "runs.duckdb")
        self.log = tmp / "effects.log"
        self.provider = tmp / "effects.log.provider"
        self.scenario = scenario

    def child(self, kill_at: str = "none", on_in_flight: str = "raise") -> tuple[int, Any]:
        """Run one child; return its exit code and its JSON result (None when killed)."""
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.crash.resume_child",
                self.journal,
                str(self.log),
                self.scenario,
                kill_at,
                on_in_flight,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode == -signal.SIGKILL:
            return proc.returncode, None
        assert proc.returncode in (0, 3), proc.stderr
        return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])

    def lines(self, path: Path) -> list[str]:
        """Return the lines of a side-effect file (empty when never written)."""
        return path.read_text().splitlines() if path.exists() else []

    def kinds(self) -> list[str]:
        """Return the run's frame kinds from the journal."""
        journal = redrive.open_journal(self.journal)
        try:
            return [f.kind for f in journal.frames("pay:1")]
        finally:
            journal.close()


KEY = "pay:1:3:charge_card"  # run_start, get_balance start+done, then the charge claim


def test_idempotency_key_dedupes_a_rerun_after_sigkill(tmp_path: Path) -> None:
    """Item 2: a restart-safe tool killed after its body re-runs with the same key, charged once."""
    pay = Payment(tmp_path, "dedupe")
    assert pay.child(kill_at="tool_body_done")[0] == -signal.SIGKILL
    assert pay.lines(pay.log) == ["body get_balance", f"body {KEY}"]
    code, result = pay.child()
    assert code == 0 and result["status"] == "succeeded"
    assert result["output"] == {"receipt": {"charged": 25, "key": KEY}}
    assert pay.lines(pay.log) == ["body get_balance", f"body {KEY}", f"body {KEY}"]
    assert pay.lines(pay.provider) == [f"charge {KEY} 25"]
    # the resume is marked (its ``resumed`` note), and the second attempt is journaled
    assert pay.kinds().count("note") == 2


def test_recover_done_after_sigkill_does_not_rerun(tmp_path: Path) -> None:
    """Item 3: recover() finds the charge made before the kill; the body does not run again."""
    pay = Payment(tmp_path, "recover")
    assert pay.child(kill_at="tool_body_done")[0] == -signal.SIGKILL
    code, result = pay.child()
    assert code == 0 and result["output"] == {"receipt": {"charged": 25, "key": KEY}}
    assert pay.lines(pay.log) == ["body get_balance", f"body {KEY}", f"recover {KEY}"]
    assert pay.lines(pay.provider) == [f"charge {KEY} 25"]
    code, replayed = pay.child(on_in_flight="replay")
    assert code == 0 and replayed["output"] == result["output"]
    assert len(pay.lines(pay.log)) == 3


def test_recover_not_done_after_sigkill_runs_once(tmp_path: Path) -> None:
    """Item 3: killed after the claim, before the body: recover() says not done, body runs once."""
    pay = Payment(tmp_path, "recover")
    assert pay.child(kill_at="tool_claimed")[0] == -signal.SIGKILL
    assert pay.lines(pay.provider) == []
    code, result = pay.child()
    assert code == 0 and result["status"] == "succeeded"
    assert pay.lines(pay.log) == ["body get_balance", f"recover {KEY}", f"body {KEY}"]
    assert pay.lines(pay.provider) == [f"charge {KEY} 25"]


def test_unsafe_in_flight_after_sigkill_is_blocked_then_told(tmp_path: Path) -> None:
    """Item 4: an undeclared charge_card killed mid-step is blocked, then told to the model."""
    pay = Payment(tmp_path, "unsafe")
    assert pay.child(kill_at="tool_body_done")[0] == -signal.SIGKILL
    code, blocked = pay.child()
    assert code == 3 and blocked["error"] == "SideEffectRetryBlockedError"
    assert blocked["fields"]["idempotency_key"] == KEY and blocked["fields"]["seq"] == 3
    code, told = pay.child(on_in_flight="tell_model")
    assert code == 0 and told["status"] == "succeeded"
    outcome = told["output"]["receipt"]
    assert outcome["status"] == "not_safely_resumable" and outcome["rerun"] is False
    assert outcome["tool"] == "charge_card" and outcome["arguments"] == {"amount": 25}
    code, replayed = pay.child(on_in_flight="replay")
    assert code == 0 and replayed["output"] == told["output"]
    assert pay.lines(pay.log) == ["body get_balance", f"body {KEY}"]
    assert pay.lines(pay.provider) == [f"charge {KEY} 25"]
