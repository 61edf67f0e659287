"""The bench's report has the shape issue 26 asks for, on tiny sizes (no duration is asserted).

Every goal of issue 26 is a row with a verdict; every interleaved figure
prints its spread; the performance page is generated from the same figures.
The cycles and the step/fsync rounds run for real here, one round each.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks import floor, interleaved, page, run

ROOT = Path(__file__).resolve().parents[2]


def _secs(*values: float) -> list[float]:
    return list(values)


def _figures(tmp_path: Path) -> dict[str, Any]:
    """One run's figures: the cycles and step rounds measured (tiny), the rest made up."""
    steps = floor.step_costs(str(tmp_path), rounds=2, steps=2)
    cycles = interleaved.cycles(str(tmp_path), rounds=1)
    whole = {
        system: {10: {"wall_s": _secs(0.5, 0.6), "in_process_s": _secs(0.01, 0.02)}}
        for system in ("redrive-duckdb", "langgraph")
    }
    whole["dbos"] = {
        10: {
            "wall_s": _secs(3.0, 3.1),
            "in_process_s": _secs(1.2, 1.3),
            "startup_s": _secs(0.1, 0.2),
        }
    }
    frames = {"replay_s": 0.2, "peak_kb": 1024, "frames": 2001}
    return {
        "sizes": {"record": 10, "resume": (10, 1000), "replay": 10, "large": 20, "rounds": 1},
        "load": {"start": (1.0, 1.0, 1.0), "end": (2.0, 2.0, 2.0)},
        "date": "2026-01-01 00:00 UTC",
        "machine": "test",
        "quick": True,
        "redrive-duckdb": {
            "resume": {10: 0.01, 1000: 0.2},
            "peak-10": {"replay_s": 0.01, "peak_kb": 512, "frames": 21},
            "peak-20": frames,
        },
        "langgraph": {"resume": {10: 0.01, 1000: 0.01}},
        "floor": {
            "fsync_2k": 0.002,
            "prealloc_fsync_2k": 0.001,
            "group_fsync_per_frame": 1e-5,
            "frame_bytes": 2048.0,
            "msgpack_2k": 5e-6,
            "canonical_2k": 2e-5,
            "msgpack_pack_2k": 2e-6,
            "canonical_encode_2k": 9e-6,
            "duckdb_connect": 0.02,
            "xxh3_2k": 1e-7,
        },
        "writes": {"tool_step": 2.0, "model_step_group": 0.0, "model_step_each": 1.0},
        "growth": {"fixed": {10: 4000.0}, "conversation": {10: 4000.0}},
        "cycles": cycles,
        "whole": whole,
        "messages": {
            "steps": 20,
            "redrive": {"file_bytes": 2e6, "record_s": 0.5},
            "langgraph": {"file_bytes": 5e5, "record_s": 0.3},
        },
        "steps": steps,
        "pytest_scale": {
            "tests": 10,
            "redrive_added_ms": 3.0,
            "vcrpy_added_ms": 5.0,
            "stub_s": 1.0,
        },
        "check_jobs": {"runs": 10, "cores": 2, "one_s": 1.0, "cores_s": 0.8},
        "postgres": {
            "claim": {
                "claim_median": 0.001,
                "claim_p99": 0.002,
                "bare_median": 0.0009,
                "bare_p99": 0.002,
                "ratio": 1.11,
            },
            "concurrent": {2: {"claim": _secs(0.002, 0.003), "bare": _secs(0.002, 0.002)}},
            "workers": {2: {"claim_median": 0.002, "claim_p99": 0.004, "steps_per_s": 500.0}},
        },
    }


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _figures(tmp_path_factory.mktemp("bench"))


def test_every_goal_of_issue_26_has_a_verdict(figures: dict[str, Any]) -> None:
    table = run.goal_table(figures)
    items = {item for item, _ in table}
    assert {"26.1", "26.2/3/5", "26.4", "26.6", "26.7"} <= items
    figures_named = " ".join(row[0] for _, row in table)
    for wanted in (
        "open + resume + close",
        "open + replay + close",
        "replay per frame",
        "canonical encode",
        "resume @1,000",
        "resume @10,000",
        "whole-process resume @10",
        "accumulated-messages",
        "side-effecting tool step",
        "model step",
        "Postgres claim at the tool call, 2 worker processes",
        "replayed pytest tests",
        "redrive check",
        "assert a duration",
    ):
        assert wanted in figures_named, wanted
    text = run.goals(figures)
    verdicts = [line.rsplit("|", 2)[-2].strip() for line in text.splitlines()[2:]]
    assert len(verdicts) == len(table)
    assert set(verdicts) <= {"met", "not met", "-"}
    assert "not met" in verdicts and "met" in verdicts  # both are reachable (made-up figures)


def test_interleaved_rows_print_their_spread(figures: dict[str, Any]) -> None:
    for _, row in run.goal_table(figures):
        if row[0].startswith(("open +", "side-effecting", "model step", "whole-process")):
            assert re.search(r"p10-p90 .+, n=\d+", row[1]), row
            assert re.search(r"\d\.\d\dx", row[1] + row[2]), row  # the ratio is printed
        if "DBOS" in row[2]:
            assert "start-up (DBOS() + launch)" in row[2]  # apart from the recovery


def test_the_page_is_the_printed_report(figures: dict[str, Any]) -> None:
    import json

    saved = json.loads(json.dumps(figures, default=str))  # as --json writes it: string keys
    text = page.render(saved)
    assert run.full_report(figures) in text
    assert "load average" in text and "```" not in text  # no code block to execute


def test_the_preallocated_write_floor_is_printed_next_to_the_append(
    figures: dict[str, Any],
) -> None:
    """Issue 26 item 6: readers see why the journal's tool step can beat two appends + fsync."""
    from benchmarks.report import report

    text = report(figures)
    assert "append 2 KB + fsync" in text
    assert "preallocated, zero-filled region + fdatasync" in text and "0.50x the append" in text
    tool = next(row for _, row in run.goal_table(figures) if row[0].startswith("side-effecting"))
    assert "preallocated tail + fdatasync" in tool[2]
    older = {**figures, "floor": {k: v for k, v in figures["floor"].items() if "prealloc" not in k}}
    older["steps"] = {k: v for k, v in figures["steps"].items() if k != "prealloc_tool"}
    assert "preallocated" not in report(older)  # a run saved before it still renders


def test_the_published_page_is_generated_from_its_saved_run() -> None:
    """docs/performance.md is page.render of docs/performance.json (that run's --json)."""
    import json

    text = (ROOT / "docs" / "performance.md").read_text()
    saved = json.loads((ROOT / "docs" / "performance.json").read_text())
    assert text == page.render(saved)
    assert "| item | figure | redrive |" in text and "load average" in text


def test_resume_sizes_add_the_long_row_to_a_quick_run() -> None:
    """``scripts/bench --quick --resume 1000,10000`` measures the 10,000-step resume too."""
    assert run.resume_sizes("") is None
    assert run.resume_sizes("1000, 10000") == (1000, 10000)
    for bad in ("10k", "1000,-5", "0", "1000;10000"):
        with pytest.raises(ValueError, match="--resume takes step counts"):
            run.resume_sizes(bad)
    with pytest.raises(SystemExit) as exited:
        run.main(["--quick", "--resume", "ten"])
    assert exited.value.code == 2


def test_check_jobs_row_judges_what_jobs_zero_chose() -> None:
    """Workers chosen: they must beat one process. One process chosen: workers must not win.

    A pure function of the figures (seconds as measured, no timing here).
    """
    from benchmarks.report import check_jobs_row

    base = {"runs": 200, "cores": 2, "one_s": 0.85, "all_s": 0.84}
    one = check_jobs_row({**base, "cores_s": 0.86, "chosen": [1, 1, 1]})
    assert "chose one process" in one[1] and "--jobs 2: 0.84 s" in one[2]
    assert one[4] is True  # as fast as one process, and workers would not have been faster
    missed = check_jobs_row({**base, "all_s": 0.5, "cores_s": 0.86, "chosen": [1, 1, 1]})
    assert missed[4] is False  # workers would have been clearly faster
    slower = check_jobs_row({**base, "cores_s": 0.9, "chosen": [2, 2, 2]})
    assert "chose 2 workers" in slower[1] and slower[4] is False
    faster = check_jobs_row({**base, "cores_s": 0.6, "chosen": [2, 1, 2]})
    assert "chose 1/2 workers" in faster[1] and faster[4] is True
    old = check_jobs_row({"runs": 10, "cores": 2, "one_s": 1.0, "cores_s": 0.8})
    assert old[4] is True  # a run saved before the choice was reported: the time alone
