"""redrive diff: the command gives redrive.diff_runs's answer, as text, JSON and exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive import cli
from redrive.cli._diff import diff_text
from redrive.replay import RunDiff

#: What the recorded tool and model hand back; each test run sets it before recording.
_NOW: dict[str, Any] = {}


@redrive.tool(read_only=True)
def lookup_order(order: str) -> dict[str, Any]:
    """Return the order's total (whatever the run being recorded says it is)."""
    return {"order": order, "total": _NOW["total"]}


@redrive.model
def ask(prompt: str) -> str:
    """Return the model's reply (whatever the run being recorded says it is)."""
    return str(_NOW["reply"])


def _record(
    journal: redrive.Journal, run_id: str, *, total: int, reply: str, done: bool = True
) -> None:
    """Record one run: a tool step, then a model step, then the output ``{"done": done}``."""
    _NOW.update(total=total, reply=reply)
    with redrive.run(journal, run_id) as run:
        lookup_order("A-100")
        ask("Summarise order A-100")
        run.finish({"done": done})


@pytest.fixture
def runs(tmp_path: Path) -> tuple[str, dict[str, RunDiff | None]]:
    """A DuckDB journal with runs ``base``, ``same``, ``tool``, ``model`` and ``output``.

    Returns the journal's URL and, by run, what redrive.diff_runs says of ``base``
    against it: ``tool`` has another tool result, ``model`` another model response,
    ``output`` the same steps and another output.
    """
    url = str(tmp_path / "diff.duckdb")
    journal = redrive.open_journal(url)
    _record(journal, "base", total=42, reply="The total is 42.")
    _record(journal, "same", total=42, reply="The total is 42.")
    _record(journal, "tool", total=43, reply="The total is 42.")
    _record(journal, "model", total=42, reply="The total is 43.")
    _record(journal, "output", total=42, reply="The total is 42.", done=False)
    found = {
        other: redrive.diff_runs("base", other, journal=journal)
        for other in ("same", "tool", "model", "output")
    }
    journal.close()
    return url, found


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = cli.main(["--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def _assert_same_answer(data: dict[str, Any], expected: RunDiff | None) -> None:
    """The CLI's JSON names the step, the kind of difference and the leaves diff_runs found."""
    assert expected is not None
    assert data["identical"] is False
    assert (data["what"], data["index"]) == (expected.what, expected.index)
    first = data["first_divergent_step"]
    assert (first["what"], first["index"]) == (expected.what, expected.index)
    assert expected.step_a is not None and expected.step_b is not None
    assert (first["a"]["seq"], first["a"]["name"]) == (expected.step_a.seq, expected.step_a.name)
    assert first["a"]["outcome"] == expected.step_a.outcome
    assert first["b"]["outcome"] == expected.step_b.outcome
    assert first["diff"] == [list(leaf) for leaf in expected.diff]


@pytest.mark.parametrize(
    ("other", "index", "kind", "leaf"),
    [
        ("tool", 0, "tool", ["$.outcome.result.total", 42, 43]),
        ("model", 1, "model", ["$.outcome.response", "The total is 42.", "The total is 43."]),
    ],
    ids=["tool-result", "model-response"],
)
def test_outcomes_that_differ_are_a_difference(
    runs: tuple[str, dict[str, RunDiff | None]],
    capsys: pytest.CaptureFixture[str],
    other: str,
    index: int,
    kind: str,
    leaf: list[Any],
) -> None:
    """Runs whose tool result or model response differs exit 1, showing what diff_runs finds."""
    url, found = runs
    expected = found[other]
    assert expected is not None and (expected.what, expected.index) == ("outcome", index)
    code, data = _json(capsys, "--journal", url, "diff", "base", other)
    assert code == cli.EXIT_FAILED
    _assert_same_answer(data, expected)
    assert data["first_divergent_step"]["a"]["kind"] == kind
    assert data["first_divergent_step"]["diff"] == [leaf]
    code = cli.main(["--journal", url, "diff", "base", other])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAILED
    assert out.strip().splitlines() == diff_text("base", other, expected)
    seq = expected.step_a.seq if expected.step_a else None
    assert f"first differ at seq {seq} (step {index + 1}; outcome)" in out
    assert "(outcome)" not in out and f"{leaf[0]}: {leaf[1]!r} -> {leaf[2]!r}" in out


def test_identical_runs_exit_0(
    runs: tuple[str, dict[str, RunDiff | None]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two runs with the same steps, outcomes and output exit 0, in JSON and in text."""
    url, found = runs
    assert found["same"] is None
    code, data = _json(capsys, "--journal", url, "diff", "base", "same")
    assert code == cli.EXIT_OK
    assert data["identical"] is True and data["first_divergent_step"] is None
    assert data["what"] is None and data["output_diff"] == []
    code = cli.main(["--journal", url, "diff", "base", "same"])
    assert code == cli.EXIT_OK
    assert "base and same: the same 2 steps and the same output" in capsys.readouterr().out


def test_runs_whose_outputs_differ_exit_1(
    runs: tuple[str, dict[str, RunDiff | None]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Runs with the same steps and another output exit 1 with the output's difference."""
    url, found = runs
    expected = found["output"]
    assert expected is not None and expected.what == "output"
    code, data = _json(capsys, "--journal", url, "diff", "base", "output")
    assert code == cli.EXIT_FAILED
    assert (data["identical"], data["what"], data["first_divergent_step"]) == (
        False,
        "output",
        None,
    )
    assert data["output_diff"] == [list(leaf) for leaf in expected.diff]
    assert data["output_diff"] == [["$.run_end.output.done", True, False]]
    assert cli.main(["--journal", url, "diff", "base", "output"]) == cli.EXIT_FAILED
    out = capsys.readouterr().out
    assert out.strip().splitlines() == diff_text("base", "output", expected)
    assert "their ends differ" in out and "$.run_end.output.done: True -> False" in out
    assert "no step" not in out


def test_a_run_and_its_export_are_identical(
    runs: tuple[str, dict[str, RunDiff | None]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """diff compares a run in the journal with an .rdj file, and a missing run exits 3."""
    url, found = runs
    exported = str(tmp_path / "tool.rdj")
    assert cli.main(["--journal", url, "export", "tool", "-o", exported]) == cli.EXIT_OK
    capsys.readouterr()
    code, data = _json(capsys, "--journal", url, "diff", "tool", exported)
    assert code == cli.EXIT_OK and data["identical"] is True
    code, data = _json(capsys, "--journal", url, "diff", "base", exported)
    assert code == cli.EXIT_FAILED
    _assert_same_answer(data, found["tool"])
    code, data = _json(capsys, "--journal", url, "diff", "base", "nope")
    assert code == cli.EXIT_NOT_FOUND and data["error"] == "UnknownRunError"
