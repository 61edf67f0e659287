"""CI replay checks over the committed fixture runs: passing ones pass, the others fail."""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive import _check
from redrive.storage import MemoryJournal
from redrive.storage.rdj import import_run

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "fixtures" / "runs"


def test_passing_fixtures_pass() -> None:
    """Every saved run in fixtures/runs/pass replays strictly against the current code."""
    report = redrive.check_runs([RUNS / "pass"], import_paths=[str(ROOT)])
    assert len(report.results) == 2
    assert report.ok, [r.message for r in report.failed]
    assert all(r.replayed_steps >= 4 for r in report.results)


def test_prompt_drift_fixture_diverges_at_the_first_model_step() -> None:
    """The run recorded with an older prompt fails with a path-level divergence at seq 1."""
    result = redrive.check_run(RUNS / "fail" / "prompt.rdj", import_paths=[str(ROOT)])
    assert result.outcome == "diverged" and result.seq == 1
    assert isinstance(result.error, redrive.DivergenceError)
    assert result.error.diff[0][0] == "$.messages[0].content"
    assert "Look the order up" in result.message


def test_new_step_fixture_fails_by_going_live() -> None:
    """The run recorded before the audit step fails because the code asks for a live tool call."""
    result = redrive.check_run(RUNS / "fail" / "audit.rdj", import_paths=[str(ROOT)])
    assert result.outcome == "went_live" and result.seq == 8
    assert isinstance(result.error, redrive.ReplayMissError)
    assert "write_audit" in result.message


def test_collect_all_and_fail_fast() -> None:
    """check_runs collects every failure, or stops at the first with fail_fast."""
    every = redrive.check_runs([RUNS], import_paths=[str(ROOT)])
    assert [r.outcome for r in every.results] == ["went_live", "diverged", "passed", "passed"]
    assert every.summary() == "4 run(s) checked: 2 passed, 2 failed"
    fast = redrive.check_runs([RUNS], fail_fast=True, import_paths=[str(ROOT)])
    assert [r.outcome for r in fast.results] == ["went_live"]
    with pytest.raises(_check.CheckFailedError, match="2 failed") as info:
        redrive.check_runs([RUNS], raise_on_failure=True, import_paths=[str(ROOT)])
    assert isinstance(info.value, AssertionError) and info.value.report == every


def test_junit_xml(tmp_path: Path) -> None:
    """The JUnit report has one testcase per run and a failure element for each failing one."""
    report = redrive.check_runs([RUNS], import_paths=[str(ROOT)])
    out = tmp_path / "report.xml"
    _check.write_junit(report, out)
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "2"
    failures = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failures == ["refund:B-200:audit", "refund:A-100:prompt"]


@given(key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=24, max_size=40))
@settings(max_examples=20, deadline=None)
def test_junit_xml_holds_no_secret(key: str) -> None:
    """Issue 16: a failure text that quotes a live call's arguments (a divergence diff with an
    API key or a URL's secret query parameter) is masked in the JUnit XML CI keeps."""
    secret = f"sk-proj-{key}"
    message = (
        f"run 'r' seq 3: tool fetch diverged\n  $.url: 'https://x.example/?key={key}' -> "
        f"'https://x.example/?api_key={key}'\n  $.headers.authorization: 'Bearer {secret}'"
    )
    result = _check.CheckResult(source="r.rdj", run_id="r", outcome="diverged", message=message)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.xml"
        _check.write_junit(_check.CheckReport((result,)), out)
        data = out.read_bytes()
    assert key.encode() not in data and b"REDACTED" in data
    assert ET.fromstring(data).find("testsuite") is not None


def test_journal_source_and_changed_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run checked from a journal fails with output_changed when only the output differs."""
    journal = MemoryJournal()
    import_run(RUNS / "pass" / "refunded.rdj", journal)
    run_id = "refund:A-100:refunded"
    assert redrive.check_run((journal, run_id), import_paths=[str(ROOT)]).passed
    from fixtures.examples import refund_agent

    real = refund_agent.handle_ticket.__wrapped_durable__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        refund_agent.handle_ticket,
        "__wrapped_durable__",
        lambda order_id, message: {**real(order_id, message), "refunded": "maybe"},
    )
    result = redrive.check_run((journal, run_id))
    assert result.outcome == "output_changed" and "$.output.refunded" in result.message


def test_runs_that_cannot_be_checked(tmp_path: Path) -> None:
    """No entrypoint, an unimportable one, an unfinished run or a damaged file give 'error'."""
    journal = MemoryJournal()
    with redrive.run(journal, "plain") as run:
        run.finish(1)
    result = redrive.check_run((journal, "plain"))
    assert result.outcome == "error" and "no recorded entrypoint" in result.message
    with redrive.run(journal, "ghost", entrypoint="no_such_module_xyz:main") as run:
        run.finish(1)
    result = redrive.check_run((journal, "ghost"))
    assert result.outcome == "error" and "no_such_module_xyz" in result.message
    with pytest.raises(ConnectionError), redrive.run(journal, "open", entrypoint="m:f"):
        raise ConnectionError("lost")
    assert "only finished runs" in redrive.check_run((journal, "open")).message
    bad = tmp_path / "bad.rdj"
    bad.write_bytes(b"nonsense")
    result = redrive.check_run(bad)
    assert result.outcome == "error" and isinstance(result.error, redrive.JournalCorruptError)
    with pytest.raises(FileNotFoundError):
        redrive.check_runs([tmp_path / "missing"])
