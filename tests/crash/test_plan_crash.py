"""A real kill, then the plan and the resume each in a cold process (``redrive plan``/``resume``).

A child runs the loop of :mod:`tests.plan_app` (sync or async face) on a
DuckDB or Postgres journal and SIGKILLs itself at a step boundary
(``REDRIVE_CRASH_AT``); a new process prints the plan (``redrive plan
--json``), another resumes the run (``redrive resume``). What ran is read from
the side-effect log the children append to, outside every process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import asyncio, sys
import redrive, redrive.testing
from tests import plan_app
redrive.testing.install_from_env()
journal = redrive.open_journal(sys.argv[1])
target = plan_app.handle if sys.argv[2] == "sync" else plan_app.ahandle
ops = sys.argv[3].split(",")
out = target.redrive_recover(journal, "plan:k", [], {"ops": ops, "name": "k"}, {"lease": 2.0})
if asyncio.iscoroutine(out):
    asyncio.run(out)
"""


def _env(log: Path, crash: str = "") -> dict[str, str]:
    return {**os.environ, "PLAN_APP_LOG": str(log), "REDRIVE_CRASH_AT": crash}


def _cli(url: str, log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redrive.cli", "--journal", url, *args],
        cwd=ROOT,
        env=_env(log),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _lease_lapsed(url: str) -> None:
    """Wait until the killed worker's run lease (2 s) has lapsed (a live one refuses a resume)."""
    import redrive

    journal = redrive.open_journal(url)
    try:
        for _ in range(200):
            record = journal.get_run("plan:k")
            assert record is not None
            if record.lease_expires is None or record.lease_expires < time.time():
                return
            time.sleep(0.05)
        raise AssertionError(f"the lease of run plan:k did not lapse: {record}")
    finally:
        journal.close()


#: (store, face, crash, planned action, resume's exit code, the side-effect log after it)
SCENARIOS = [
    # the body ran, its result was never recorded: recover() finds it done
    ("postgres", "async", "tool_body_done:rec", "recover", 0, ["safe 1", "rec 2", "recover 2"]),
    # killed once the claim was durable, before the body: a person decides
    ("duckdb", "sync", "tool_claimed:unsafe", "block", 1, ["safe 1"]),
]
if os.environ.get("REDRIVE_PLAN_CRASH") == "full":  # every store and face for both kills
    SCENARIOS = [
        (store, face, *rest)
        for store in ("duckdb", "postgres")
        for face in ("sync", "async")
        for rest in [s[2:] for s in SCENARIOS]
    ]


@pytest.mark.parametrize(("store", "face", "crash", "action", "resumed", "effects"), SCENARIOS)
def test_a_killed_run_is_planned_then_resumed_as_planned(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    store: str,
    face: str,
    crash: str,
    action: str,
    resumed: int,
    effects: list[str],
) -> None:
    """After a SIGKILL the cold plan names what the resume will do with the step in flight,
    and the cold resume does exactly that (recover() asked, or blocked without a body).
    REDRIVE_PLAN_CRASH=full runs every store and face for both kills."""
    if store == "duckdb":
        url = str(tmp_path / "runs.duckdb")
    else:
        base = request.getfixturevalue("pg_url")
        url = f"{base}{'&' if '?' in base else '?'}schema={request.getfixturevalue('pg_schema')}"
    log = tmp_path / "effects.log"
    ops = "ask,safe," + crash.rsplit(":", 1)[1] + ",ask"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, url, face, ops],
        cwd=ROOT,
        env=_env(log, crash),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    _lease_lapsed(url)
    planned = _cli(url, log, "--json", "plan", "plan:k")
    assert planned.returncode == (1 if action == "block" else 0), planned.stderr
    plan: dict[str, Any] = json.loads(planned.stdout)
    assert [s["action"] for s in plan["steps"] if s["kind"] != "live"] == [
        "replay",
        "replay",
        action,
    ]
    assert plan["outcome"] == ("stops" if action == "block" else "continues")
    done = _cli(url, log, "resume", "plan:k")
    assert done.returncode == resumed, done.stdout + done.stderr
    assert log.read_text().splitlines() == effects
