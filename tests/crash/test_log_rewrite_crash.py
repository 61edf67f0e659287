"""SIGKILL a process while a DuckDB checkpoint rewrites the log: nothing acknowledged is lost.

A checkpoint writes the ended runs into the tables, then rewrites the log with
only the unfinished runs' records (new file beside, fsync, rename, fsync the
folder). The child kills itself at each point of that sequence (see
tests/crash/rewrite_child.py); the reopened journal must hold every frame the
child acknowledged, with the run rows agreeing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from redrive.storage.duckdb import DuckDBJournal

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "stage",
    ["checkpoint-ingested", "rewrite-opened", "rewrite-written", "rewrite-renamed", "close"],
)
def test_kill_during_log_rewrite_loses_no_acknowledged_frame(tmp_path: Path, stage: str) -> None:
    path = str(tmp_path / "runs.duckdb")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "tests.crash.rewrite_child", path, stage],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    said = [json.loads(line) for line in done.stdout.splitlines()]
    assert said and "closed" not in said[-1]
    acked: dict[str, dict[str, object]] = {}
    for line in said:
        acked[line["run"]] = line
    assert any(a["status"] == "succeeded" for a in acked.values())
    journal = DuckDBJournal(path, checkpoint_frames=8)
    try:
        rows = {r.run_id: r for r in journal.runs()}
        for run_id, ack in acked.items():
            chains = [f.chain for f in journal.frames(run_id)]
            want = ack["chains"]
            assert isinstance(want, list)
            # the write in flight when the process died may be there too (it was durable)
            assert chains[: len(want)] == want, run_id
            assert rows[run_id].next_seq == len(chains)
            if ack["status"] == "succeeded":
                assert rows[run_id].status == "succeeded"
    finally:
        journal.close()
