"""``redrive cancel``: ends a run cancelled with who and why; ``runs``/``show`` name them."""

from __future__ import annotations

from pathlib import Path

import pytest

import redrive
from redrive import cli
from redrive.storage.rdj import export_run
from tests.unit.test_cli import _json, _run


@pytest.fixture
def journal_url(tmp_path: Path) -> str:
    """A DuckDB journal with one running run (``job:42``) and one finished run (``done``)."""
    url = str(tmp_path / "runs.duckdb")
    journal = redrive.open_journal(url)

    @redrive.tool(read_only=True)
    def lookup(order: str) -> str:
        return f"order {order}"

    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "job:42"):
        lookup("42")
        raise KeyboardInterrupt  # interrupted: stays running
    with redrive.run(journal, "done") as run:
        run.finish(lookup("7"))
    journal.close()
    return url


def test_cancel_names_who_and_why(journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """cancel ends a running run cancelled; runs and show then say who cancelled it and why."""
    code, data = _json(
        capsys, "--journal", journal_url, "cancel", "job:42", "--reason", "refunded", "--by", "bo"
    )
    assert code == cli.EXIT_OK
    assert data["run"]["status"] == "cancelled"
    assert data["run"]["error"] == "cancelled by bo: refunded"
    code, out, _ = _run(capsys, "--journal", journal_url, "runs", "--status", "cancelled")
    assert code == 0 and "cancelled (cancelled by bo: refunded)" in out
    code, out, _ = _run(capsys, "--journal", journal_url, "show", "job:42")
    assert code == 0 and "cancelled by bo: refunded" in out
    code, data = _json(capsys, "--journal", journal_url, "show", "job:42")
    assert data["info"]["end"]["status"] == "cancelled"
    assert data["run"]["error"] == "cancelled by bo: refunded"
    journal = redrive.open_journal(journal_url)
    try:
        with (
            pytest.raises(redrive.TerminalRunError, match="cancelled by bo: refunded"),
            redrive.run(journal, "job:42"),
        ):
            pass  # a redelivery of a cancelled run is refused
    finally:
        journal.close()


def test_cancel_without_by_names_the_login(
    journal_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --by the cancel is recorded as the caller's login name (or "cli")."""
    code, out, _ = _run(capsys, "--journal", journal_url, "cancel", "job:42", "--reason", "x")
    assert code == 0 and "cancelled by " in out and ": x" in out


def test_cancel_errors_and_exit_codes(
    journal_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finished run exits 1 unchanged; an unknown run 3; no --reason 2; an .rdj file 1."""
    code, data = _json(capsys, "--journal", journal_url, "cancel", "done", "--reason", "r")
    assert code == cli.EXIT_FAILED and data["error"] == "TerminalRunError"
    assert data["status"] == "succeeded" and "nothing to cancel" in data["message"]
    code, data = _json(capsys, "--journal", journal_url, "runs", "--status", "succeeded")
    assert [r["run_id"] for r in data["runs"]] == ["done"]
    code, _, err = _run(capsys, "--journal", journal_url, "cancel", "nope", "--reason", "r")
    assert code == cli.EXIT_NOT_FOUND and "no run 'nope'" in err
    assert cli.main(["--journal", journal_url, "cancel", "job:42"]) == cli.EXIT_USAGE
    capsys.readouterr()
    journal = redrive.open_journal(journal_url)
    exported = tmp_path / "job.rdj"
    try:
        export_run(journal, "job:42", exported)
    finally:
        journal.close()
    code, _, err = _run(capsys, "--journal", str(exported), "cancel", "job:42", "--reason", "r")
    assert code == cli.EXIT_FAILED and "read-only" in err
    code, _, err = _run(capsys, "cancel", str(exported), "--reason", "r")
    assert code == cli.EXIT_FAILED and "read-only" in err
