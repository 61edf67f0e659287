"""``redrive check --jobs N``: the same report, in the same order, from worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest

import redrive
from redrive.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "fixtures" / "runs"


def _comparable(report: redrive.CheckReport) -> list[tuple[object, ...]]:
    """Each result's fields, its message without the "called from:" line."""
    return [
        (
            r.source,
            r.run_id,
            r.outcome,
            r.seq,
            r.replayed_steps,
            r.reasked,
            "\n".join(x for x in r.message.splitlines() if "called from:" not in x),
        )
        for r in report.results
    ]


def test_jobs_give_the_report_of_one_process() -> None:
    """Outcomes, seqs, messages and order match a check in this process; errors travel back."""
    one = redrive.check_runs([RUNS], import_paths=[str(ROOT)])
    two = redrive.check_runs([RUNS], import_paths=[str(ROOT)], jobs=2)
    # equal but for the "called from:" line, which names the checking process's own stack
    # (a worker's differs from this one's, and earlier tests' imports change what is shown)
    assert _comparable(two) == _comparable(one)
    assert [r.outcome for r in two.results] == ["went_live", "diverged", "passed", "passed"]
    diverged = two.results[1]
    assert isinstance(diverged.error, redrive.DivergenceError)
    fast = redrive.check_runs([RUNS], fail_fast=True, import_paths=[str(ROOT)], jobs=2)
    assert [r.outcome for r in fast.results] == ["went_live"]


def test_cli_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    """The command line takes --jobs and reports as without it."""
    code = cli_main(["check", "--jobs", "2", "-I", str(ROOT), str(RUNS / "pass")])
    assert code == 0
    assert "2 run(s) checked: 2 passed" in capsys.readouterr().out


def test_jobs_zero_checks_few_runs_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer runs than two workers' share: no worker is started (the pool would cost more)."""
    import redrive._check as check

    monkeypatch.setattr(check.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)

    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker pool was started for a few runs")

    monkeypatch.setattr(check.concurrent.futures, "ProcessPoolExecutor", no_pool)
    report = redrive.check_runs([RUNS / "pass"], import_paths=[str(ROOT)], jobs=0)
    assert [r.outcome for r in report.results] == ["passed", "passed"]
    assert check.auto_workers(check.MIN_RUNS_PER_WORKER * 2 - 1) == 1
    assert check.auto_workers(check.MIN_RUNS_PER_WORKER * 2) == 2
    assert check.auto_workers(100_000) == 4  # one per core this process may use
