"""After `import`, `runs` and `prune --older-than` see the run's own time, not the import's;
`prune --dry-run` says what its rows are before printing them (issue 25, item 8)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import redrive
from redrive import cli

DAY = 86_400.0


def test_an_imported_run_keeps_its_age(
    journal_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run recorded ten days ago, exported and imported now: ten days old for `runs` and for
    `prune --older-than 9` (listed under a header by --dry-run), and kept by --older-than 11."""
    source = str(tmp_path / "old.duckdb")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 10 * DAY)
    journal = redrive.open_journal(source)
    with redrive.run(journal, "old") as run:
        run.finish("done")
    journal.close()
    monkeypatch.setattr(time, "time", real)
    rdj = str(tmp_path / "old.rdj")
    assert cli.main(["--journal", source, "export", "old", "-o", rdj]) == cli.EXIT_OK
    assert cli.main(["--journal", journal_url, "import", rdj]) == cli.EXIT_OK
    capsys.readouterr()
    assert cli.main(["--json", "--journal", journal_url, "runs"]) == cli.EXIT_OK
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert 9.9 * DAY < row["age_s"] < 10.1 * DAY
    argv = ["--journal", journal_url, "prune", "--dry-run", "--older-than"]
    assert cli.main([*argv, "9"]) == cli.EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"would delete from {journal_url}:"
    assert lines[1].split("\t")[:2] == ["run_id", "status"] and lines[2].startswith("old\t")
    assert cli.main([*argv, "11"]) == cli.EXIT_OK
    assert "would delete 0 run(s)" in capsys.readouterr().out
