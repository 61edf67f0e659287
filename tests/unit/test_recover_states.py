"""``redrive recover`` looks at every resumable state, and says per run what it did and why.

Outside case (issue 25, failure 1): a run suspended on an approval, approved
after an upgrade, stayed suspended: ``redrive recover`` said "nothing to
recover" and exited 0. Now recover drives every run that can continue
(interrupted, approved, paused on what waiting clears, resolved) and lists
each run it leaves alone with why (an approval undecided, a side effect in
flight nobody resolved, a worker holding it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive import cli
from redrive.replay import set_boundary_hook
from redrive.storage import MemoryJournal
from tests import plan_app


class Kill(SystemExit):
    """Stops the loop at a boundary as a kill does: the run stays resumable."""


@pytest.fixture(autouse=True)
def effects_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The side-effect log of :mod:`tests.plan_app`, outside the runs."""
    log = tmp_path / "effects.log"
    monkeypatch.setenv("PLAN_APP_LOG", str(log))
    return log


def _start(journal: Any, name: str, ops: list[str], kill_at: str | None = None) -> None:
    def hook(point: str, info: dict[str, Any]) -> None:
        if point == kill_at:
            raise Kill(point)

    set_boundary_hook(hook)
    try:
        plan_app.handle.redrive_recover(journal, f"plan:{name}", [], {"ops": ops, "name": name}, {})
    except Kill:
        pass
    finally:
        set_boundary_hook(None)


@pytest.mark.parametrize("store", ["duckdb", "postgres"])
def test_recover_continues_an_approved_run_and_says_what_it_left(
    store: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An approved suspended run is recovered by a plain `redrive recover` (no --status);
    an undecided one and a blocked one are listed as left alone with why; exit 1 only
    for the blocked one (a person must resolve it)."""
    if store == "duckdb":
        url = str(tmp_path / "runs.duckdb")
    else:
        base = request.getfixturevalue("pg_url")
        url = f"{base}{'&' if '?' in base else '?'}schema={request.getfixturevalue('pg_schema')}"
    journal = redrive.open_journal(url)
    _start(journal, "approved", ["safe", "approve", "unsafe"])
    _start(journal, "undecided", ["approve", "unsafe"])
    assert {r.run_id for r in journal.runs(status="suspended")} == {
        "plan:approved",
        "plan:undecided",
    }
    journal.decide("plan:approved", "ok1", True, by="ann")  # decided after an upgrade
    journal.close()
    assert cli.main(["--journal", url, "--json", "recover", "--stale", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    outcomes = {r["run_id"]: (r["state"], r["outcome"]) for r in report["results"]}
    assert outcomes == {
        "plan:approved": ("approved", "recovered"),
        "plan:undecided": ("suspended", "left"),
    }
    undecided = next(r for r in report["results"] if r["run_id"] == "plan:undecided")
    assert "waits for a decision on approval 'ok0'" in undecided["message"]
    assert "redrive decide plan:undecided" in undecided["message"]
    assert plan_app.effects() == ["safe 0", "unsafe 2"]
    journal = redrive.open_journal(url)
    _start(journal, "blocked", ["unsafe"], kill_at="tool_claimed")
    journal.close()
    assert cli.main(["--journal", url, "recover", "--stale", "0"]) == 1
    text = capsys.readouterr().out
    assert "blocked" in text and "redrive resolve plan:blocked" in text
    assert "left run 'plan:undecided' alone" in text
    assert plan_app.effects() == ["safe 0", "unsafe 2"]  # the blocked body never ran


def test_a_resolved_run_is_recovered_and_an_explicit_status_drives_all(tmp_path: Path) -> None:
    """A blocked run a person resolved (not done) is driven by a plain recover and its step
    re-run once; --status suspended still drives every suspended run, undecided included
    (it suspends again)."""
    journal = MemoryJournal()
    _start(journal, "r", ["unsafe"], kill_at="tool_claimed")
    (left,) = redrive.recover_runs(journal, stale=0).results
    assert (left.outcome, left.state) == ("blocked", "blocked")
    seq = next(s.seq for s in redrive.replay.iter_steps(journal.frames("plan:r")))
    redrive.replay.resolve_step(
        journal, "plan:r", seq, state="not_done", by="ann", reason="checked"
    )
    (done,) = redrive.recover_runs(journal, stale=0).results
    assert (done.state, done.outcome) == ("resolved", "recovered")
    assert plan_app.effects() == ["unsafe 0"]
    _start(journal, "s", ["approve"])
    (again,) = redrive.recover_runs(journal, stale=0, status="suspended").results
    assert again.outcome == "suspended"
