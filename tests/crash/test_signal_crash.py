"""Real signals at step boundaries leave a run resumable (DESIGN invariant 12).

A child (tests/crash/signal_child.py) runs a job (charge_card, a model call,
send_receipt) on a DuckDB journal and sends itself SIGINT, or SIGTERM with a
deploy's ``sys.exit`` handler, when a step reaches a chosen boundary. The run
must stay ``running``; a second child (the queue's redelivery) resumes it to
the end. What ran, and how often, is read from the side-effect files the
children append to and fsync.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]

BOUNDARIES = [
    ("tool_claimed", "charge_card"),
    ("tool_body_done", "charge_card"),
    ("tool_recorded", "charge_card"),
    ("model_before", "summarize"),
    ("model_after", "summarize"),
    ("model_recorded", "summarize"),
    ("tool_body_done", "send_receipt"),
]


def _child(tmp: Path, face: str, sig: str, point: str, name: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.crash.signal_child",
            str(tmp / "runs.duckdb"),
            str(tmp / "effects.log"),
            face,
            sig,
            point,
            name,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode in (0, 130), proc.stderr
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("sig", ["int", "term"])
@pytest.mark.parametrize(("point", "name"), BOUNDARIES, ids=[f"{p}-{n}" for p, n in BOUNDARIES])
def test_a_signal_at_a_boundary_leaves_the_job_resumable(
    tmp_path: Path, face: str, sig: str, point: str, name: str
) -> None:
    """SIGINT or SIGTERM at a step boundary: the run stays running; the redelivery finishes
    it with one charge and one receipt, and a model answer recorded before is not paid again."""
    code, first = _child(tmp_path, face, sig, point, name)
    assert code == 130 and first["status"] == "running", first
    code, again = _child(tmp_path, face, "none", point, name)
    assert code == 0 and again["status"] == "succeeded", again
    assert again["output"]["note"] == "summary of charged 250"
    provider = (tmp_path / "effects.log.provider").read_text().splitlines()
    assert Counter(line.split()[0] for line in provider) == {"charge_card": 1, "send_receipt": 1}
    log = (tmp_path / "effects.log").read_text().splitlines()
    # a model answer in hand but not yet recorded is paid again only when the signal stops
    # the recording itself (sync face); the async face's journal section finishes first
    paid_twice = point == "model_after" and face == "sync"
    assert log.count("model summarize") == (2 if paid_twice else 1)
