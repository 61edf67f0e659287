"""``redrive check --jobs N``: the same report, in the same order, from worker processes."""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

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


def _no_pool(*args: object, **kwargs: object) -> None:
    raise AssertionError("a worker pool was started")


def test_jobs_zero_checks_few_runs_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No more runs than the probe checks here: no worker is started (the pool would cost more)."""
    import redrive._check_jobs as jobs

    monkeypatch.setattr(jobs, "usable_cores", lambda: 4)
    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", _no_pool)
    report = redrive.check_runs([RUNS / "pass"], import_paths=[str(ROOT)], jobs=0)
    assert [r.outcome for r in report.results] == ["passed", "passed"]


def test_choose_workers_only_when_they_pay() -> None:
    """Workers only on idle cores, and only when their saving beats their start-up."""
    from redrive._check_jobs import Probe, choose_workers

    idle = Probe(cpu_per_run=0.005, share=1.0, others=0.0)
    assert choose_workers(1000, idle, cores=4, start_s=0.05) == 4
    assert choose_workers(1000, idle, cores=1, start_s=0.05) == 1
    # two of the four cores taken by other processes: two workers
    assert choose_workers(1000, attrs.evolve(idle, others=2.0), cores=4, start_s=0.05) == 2
    # every core taken, or this process itself starved of CPU: none
    assert choose_workers(1000, attrs.evolve(idle, others=6.0), cores=4, start_s=0.05) == 1
    assert choose_workers(1000, attrs.evolve(idle, share=0.3), cores=4, start_s=0.05) == 1
    # ten cheap runs save less than a worker's start-up; slow runs pay for a spawn
    assert choose_workers(10, idle, cores=4, start_s=0.05) == 1
    assert choose_workers(10, attrs.evolve(idle, cpu_per_run=1.0), cores=4, start_s=1.0) == 4
    assert choose_workers(1, attrs.evolve(idle, cpu_per_run=1.0), cores=4, start_s=0.0) == 1


def test_choose_workers_checks_cheap_runs_here_on_two_cores() -> None:
    """The bench's case: 196 runs left at 1.5 ms each on 2 idle cores stay in this process.

    Two forked workers would save at most half of 0.29 s, less than their
    start-up and their slower runs cost (``--jobs 0`` measured 0.96x one process).
    """
    from redrive._check_jobs import FORK_START_S, Probe, choose_workers

    probe = Probe(cpu_per_run=0.0015, share=1.0, others=0.0)
    assert choose_workers(196, probe, cores=2, start_s=FORK_START_S) == 1
    # runs ten times dearer: two workers clearly pay
    slow = attrs.evolve(probe, cpu_per_run=0.015)
    assert choose_workers(196, slow, cores=2, start_s=FORK_START_S) == 2


@given(
    remaining=st.integers(0, 100_000),
    cpu_per_run=st.floats(1e-6, 10.0),
    others=st.floats(0.0, 64.0),
    share=st.floats(0.0, 4.0),
    cores=st.integers(1, 64),
    start_s=st.sampled_from([0.0, 0.05, 1.0]),
)
def test_choose_workers_picks_workers_only_when_the_model_says_they_clearly_win(
    remaining: int, cpu_per_run: float, others: float, share: float, cores: int, start_s: float
) -> None:
    """Workers only on idle cores, and only when estimated under ``1 - MARGIN`` of one process."""
    from redrive._check_jobs import BUSY_SHARE, MARGIN, Probe, choose_workers, pool_seconds

    probe = Probe(cpu_per_run=cpu_per_run, share=share, others=others)
    workers = choose_workers(remaining, probe, cores=cores, start_s=start_s)
    here = remaining * cpu_per_run
    assert 1 <= workers <= max(1, min(cores, remaining))
    if workers > 1:
        assert share >= BUSY_SHARE and workers <= max(1, round(cores - others))
        estimate = pool_seconds(remaining, workers, cpu_per_run, start_s)
        assert estimate <= here * (1 - MARGIN)
        fewer = [pool_seconds(remaining, w, cpu_per_run, start_s) for w in range(2, workers)]
        assert all(estimate <= other for other in fewer)


def _many(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "runs"
    folder.mkdir()
    saved = sorted((RUNS / "pass").glob("*.rdj"))
    for i in range(n):
        shutil.copy(saved[i % len(saved)], folder / f"run-{i:03d}.rdj")
    return folder


def test_jobs_zero_measures_then_uses_workers_that_pay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first runs are checked here and measured; the rest go to the chosen workers."""
    import redrive._check_jobs as jobs

    folder = _many(tmp_path, jobs.PROBE_RUNS + 8)
    asked: list[tuple[int, jobs.Probe]] = []

    def choose(remaining: int, probe: jobs.Probe, *, cores: int, start_s: float) -> int:
        asked.append((remaining, probe))
        return 2

    monkeypatch.setattr(jobs, "choose_workers", choose)
    one = redrive.check_runs([folder], import_paths=[str(ROOT)])
    two = redrive.check_runs([folder], import_paths=[str(ROOT)], jobs=0)
    assert _comparable(two) == _comparable(one)
    assert all(r.passed for r in two.results)
    ((remaining, probe),) = asked
    assert remaining == 8
    assert probe.cpu_per_run > 0 and probe.share > 0 and probe.others >= 0


def test_jobs_zero_on_a_busy_machine_checks_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every core taken by other processes: no worker, the same report."""
    import redrive._check_jobs as jobs

    folder = _many(tmp_path, jobs.PROBE_RUNS + 8)
    monkeypatch.setattr(jobs, "_others_ready", lambda: 64.0)
    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", _no_pool)
    report = redrive.check_runs([folder], import_paths=[str(ROOT)], jobs=0)
    assert len(report.results) == jobs.PROBE_RUNS + 8 and report.ok


def test_jobs_report_the_processes_they_check_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``chosen`` hears what ``jobs=0`` picked (1: this process), or the count asked.

    The command line's ``--json`` report carries it as ``workers``: what the
    bench row says ``--jobs 0`` chose.
    """
    import json

    import redrive._check_jobs as jobs
    from redrive._check import iter_checks

    folder = _many(tmp_path, jobs.PROBE_RUNS + 4)
    paths = sorted(str(p) for p in folder.glob("*.rdj"))

    def picked(jobs_asked: int) -> list[int]:
        heard: list[int] = []
        list(iter_checks(paths, import_paths=[str(ROOT)], jobs=jobs_asked, chosen=heard.append))
        return heard

    monkeypatch.setattr(jobs, "choose_workers", lambda *a, **k: 1)
    assert picked(0) == [1]
    assert picked(1) == [1]
    monkeypatch.setattr(jobs, "choose_workers", lambda *a, **k: 2)
    assert picked(0) == [2]
    assert picked(2) == [2]
    code = cli_main(["--json", "check", "--jobs", "0", "-I", str(ROOT), str(folder)])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["workers"] == 2
