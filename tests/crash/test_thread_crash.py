"""SIGKILL a worker whose loop runs tools in a plain thread pool (no context copied), then resume.

The tools join the run from the pool's threads, so their claims and outcomes
are journaled: a redelivery after the kill never runs a finished side effect
again, and an in-flight one is blocked rather than repeated. The truth is the
side-effect log the child's tool bodies append to, outside both processes.
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

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]


def _child(tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("REDRIVE_CRASH_AT", "KILL_AFTER_TOOLS")
    }
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), clean.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "tests.crash.thread_child", str(tmp / "runs.duckdb")]
    cmd.append(str(tmp / "effects.log"))
    return subprocess.run(
        cmd, env={**clean, **env}, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def _effects(tmp: Path) -> list[str]:
    log = tmp / "effects.log"
    return log.read_text().splitlines() if log.exists() else []


def _result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode in (0, 3), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_killed_after_the_pool_tools_the_redelivery_charges_once(tmp_path: Path) -> None:
    """Killed after both pooled tools returned: the resume replays them, one charge in all."""
    killed = _child(tmp_path, KILL_AFTER_TOOLS="1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(_effects(tmp_path)) == ["charge o7 500", "invoice o7"]
    resumed = _result(_child(tmp_path))
    assert resumed == {"status": "done", "output": ["charged o7", "invoiced o7"]}
    assert sorted(_effects(tmp_path)) == ["charge o7 500", "invoice o7"]
    assert _result(_child(tmp_path))["status"] == "done"  # a replay of the finished run
    assert len(_effects(tmp_path)) == 2


@pytest.mark.parametrize("point", ["tool_claimed", "tool_body_done", "tool_recorded"])
def test_killed_inside_a_pooled_tool_the_redelivery_never_charges_twice(
    tmp_path: Path, point: str
) -> None:
    """Killed at a boundary of the pooled charge: resuming finishes or blocks, never re-charges."""
    killed = _child(tmp_path, REDRIVE_CRASH_AT=f"{point}:charge_card")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    charged = _effects(tmp_path).count("charge o7 500")
    assert charged == (0 if point == "tool_claimed" else 1)
    resumed = _result(_child(tmp_path))
    # charge_card in flight blocks the resume; recorded, only an in-flight send_invoice can
    expected = ("done", "blocked") if point == "tool_recorded" else ("blocked",)
    assert resumed["status"] in expected
    for _ in range(2):  # redelivered again: still at most one charge and one invoice
        _child(tmp_path)
    assert _effects(tmp_path).count("charge o7 500") == charged
    assert _effects(tmp_path).count("invoice o7") <= 1
