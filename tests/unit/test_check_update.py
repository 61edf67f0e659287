"""``redrive check`` hints that work, and ``redrive check --update``: from an intended change to
an updated fixture."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

import redrive
from redrive import cli
from redrive._update import MODELS_KEPT, update_run

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "fixtures" / "runs"
COMMAND = re.compile(r"`(redrive [^`]+)`")


@pytest.fixture
def at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository root, where ``redrive check`` imports the fixtures' entrypoints."""
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name", ["prompt.rdj", "audit.rdj"])
def test_every_command_a_failing_check_suggests_works(
    at_root: None, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 17 #6: each backticked command in a failing check's report runs on the same input
    (on main ``redrive show ci/runs/pass/x.rdj#run`` failed with exit 3)."""
    fixture = tmp_path / name
    shutil.copy(RUNS / "fail" / name, fixture)
    assert cli.main(["check", str(fixture)]) == cli.EXIT_FAILED
    commands = COMMAND.findall(capsys.readouterr().out)
    assert any(c.startswith("redrive show") for c in commands) or name != "prompt.rdj"
    assert any(c.startswith("redrive check --update") for c in commands)
    for command in commands:
        argv = shlex.split(command)[1:]
        assert cli.main(argv) in (cli.EXIT_OK, cli.EXIT_FAILED), command
        assert "Error" not in capsys.readouterr().err, command


def test_update_shows_the_difference_and_writes_only_when_asked(
    at_root: None, tmp_path: Path
) -> None:
    """Issue 17 #4: for a prompt change the update keeps the recorded model responses, shows each
    changed request's path diff, says how models were answered, and writes only with write=True;
    the written fixture passes ``redrive check`` and ``verify``."""
    fixture = tmp_path / "prompt.rdj"
    shutil.copy(RUNS / "fail" / "prompt.rdj", fixture)
    before = fixture.read_bytes()
    shown = update_run(fixture)
    assert shown.outcome == "changed" and fixture.read_bytes() == before
    assert [seq for seq, _, _ in shown.changes] == [1, 5, 9]
    assert all(diff[0][0] == "$.messages[0].content" for _, _, diff in shown.changes)
    assert MODELS_KEPT in shown.message
    assert not redrive.check_run(fixture).passed
    written = update_run(fixture, write=True)
    assert written.outcome == "written"
    assert redrive.check_run(fixture).passed
    assert cli.main(["verify", str(fixture)]) == cli.EXIT_OK
    assert update_run(fixture).outcome == "unchanged"


def test_update_refuses_a_changed_tool_call(at_root: None, tmp_path: Path) -> None:
    """A run whose tool calls changed cannot be updated from its record: the update fails,
    names the step and writes nothing."""
    fixture = tmp_path / "audit.rdj"
    shutil.copy(RUNS / "fail" / "audit.rdj", fixture)
    before = fixture.read_bytes()
    result = update_run(fixture, write=True)
    assert result.outcome == "failed" and "Re-record the run live" in result.message
    assert fixture.read_bytes() == before


def test_check_update_on_the_command_line(
    at_root: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``redrive check --update`` prints the diff; ``--write`` rewrites; ``--write`` alone is a
    usage error."""
    fixture = tmp_path / "prompt.rdj"
    shutil.copy(RUNS / "fail" / "prompt.rdj", fixture)
    assert cli.main(["check", "--write", str(fixture)]) == cli.EXIT_USAGE
    assert cli.main(["check", "--update", str(fixture)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "CHANGED" in out and "$.messages[0].content" in out and "replayed by position" in out
    assert cli.main(["check", "--update", "--write", str(fixture)]) == cli.EXIT_OK
    assert cli.main(["check", str(fixture)]) == cli.EXIT_OK


def test_update_stores_requests_as_deltas_and_changes_only_what_changed(
    at_root: None, tmp_path: Path
) -> None:
    """Issue 25 #7: ``check --update --write`` stores each request as the prefix delta of the
    previous one, as a live recording does (the fixture does not grow by a third), and in the
    JSON Lines form a prompt edit changes the lines of the edited requests only (beside each
    line's ``volatile`` chain and wall times)."""
    import json

    from redrive._check import open_run_file
    from redrive.storage.rdj import export_run

    fixture = tmp_path / "prompt.rdj"
    shutil.copy(RUNS / "fail" / "prompt.rdj", fixture)
    before = fixture.stat().st_size
    assert update_run(fixture, write=True).outcome == "written"
    assert fixture.stat().st_size <= before * 1.05
    text = tmp_path / "prompt.rdj.jsonl"
    journal, run_id = open_run_file(str(RUNS / "fail" / "prompt.rdj"))
    export_run(journal, run_id, str(text))
    old = text.read_text().splitlines()
    assert update_run(text, write=True).outcome == "written"
    new = text.read_text().splitlines()

    def stable(line: str) -> dict[str, object]:
        return {k: v for k, v in json.loads(line).items() if k != "volatile"}

    changed = [
        json.loads(b).get("seq") for a, b in zip(old, new, strict=True) if stable(a) != stable(b)
    ]
    assert changed == [1, 5, 9]  # the three requests whose system prompt was edited
    assert '"$prefix"' in new[6]  # seq 5 extends seq 1's request: stored as its delta
