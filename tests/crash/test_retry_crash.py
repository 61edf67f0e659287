"""Crash tests with real processes for issue 11 item 2: one idempotency key per logical
operation across a same-run retry and a SIGKILL.

A child (tests/crash/retry_child.py) runs a payment loop that retries a provider
timeout, on a DuckDB journal; the provider charges once per idempotency key and logs
every request it gets to a file outside the process; the worker is SIGKILLed right
after a charge, and a new child resumes the run.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]
KEY = "checkout:77:1:create_payment"  # run_start, then the first claim


def child(tmp: Path, plan: str, mode: str = "live") -> tuple[int, Any]:
    """Run one child; return its exit code and its JSON result (None when killed)."""
    files = [str(tmp / "runs.duckdb"), str(tmp / "provider.log")]
    command = [sys.executable, "-m", "tests.crash.retry_child", *files, plan, mode]
    proc = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode == -signal.SIGKILL:
        return proc.returncode, None
    assert proc.returncode == 0, proc.stderr
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def lines(path: Path) -> list[str]:
    """The lines of a side-effect file (empty when never written)."""
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize(
    "plan",
    [
        "kill,timeout",  # killed after the first charge; the re-run times out; the retry
        "timeout,kill",  # a timeout; the same-run retry is killed after charging; resumed
    ],
)
def test_a_retried_payment_killed_after_its_charge_is_one_operation(
    tmp_path: Path, plan: str
) -> None:
    """Every request of the payment, across the kill, the resume and the retry, carries one
    idempotency key: the provider sees one operation and charges once; a replay agrees."""
    assert child(tmp_path, plan)[0] == -signal.SIGKILL
    assert lines(tmp_path / "provider.log") == [KEY] * (1 if plan.startswith("kill") else 2)
    code, result = child(tmp_path, plan)
    assert code == 0 and result["status"] == "succeeded"
    assert result["output"]["receipt"] == {"order": "77", "charged": 500, "key": KEY}
    assert lines(tmp_path / "provider.log") == [KEY] * 3
    assert lines(tmp_path / "provider.log.ledger") == [f"{KEY} 77 500"]
    code, replayed = child(tmp_path, plan, mode="replay")
    assert code == 0 and replayed["output"] == result["output"]
    assert len(lines(tmp_path / "provider.log")) == 3
