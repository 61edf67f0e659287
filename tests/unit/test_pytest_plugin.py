"""The pytest plugin's record modes, run in pytester sandboxes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TEST_FILE = """
import pathlib
import pytest
import redrive

CALLS = pathlib.Path(__file__).parent / "calls.log"

@redrive.model(name="model:fake")
def fake_model(prompt):
    with CALLS.open("a") as log:
        log.write(prompt + "\\n")
    return {{"text": prompt.upper(), "usage": {{"input_tokens": 1, "output_tokens": 1}}}}

@pytest.mark.redrive{marker}
def test_agent():
    for prompt in {prompts!r}:
        assert fake_model(prompt)["text"] == prompt.upper()
"""


def _write(pytester: pytest.Pytester, prompts: list[str], marker: str = "") -> None:
    pytester.makepyfile(test_agent=TEST_FILE.format(prompts=prompts, marker=marker))


def _calls(pytester: pytest.Pytester) -> list[str]:
    log = pytester.path / "calls.log"
    return log.read_text().split() if log.exists() else []


def _journal(pytester: pytest.Pytester) -> Path:
    return pytester.path / "journals" / "test_agent" / "test_agent.rdj"


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


def test_once_records_then_replays(pytester: pytest.Pytester) -> None:
    """Mode once records when the journal is missing and replays without live calls after."""
    _write(pytester, ["a", "b"])
    pytester.runpytest("--redrive-record-mode=once").assert_outcomes(passed=1)
    assert _calls(pytester) == ["a", "b"] and _journal(pytester).exists()
    pytester.runpytest().assert_outcomes(passed=1)
    assert _calls(pytester) == ["a", "b"]


def test_none_fails_a_live_call_with_the_closest_steps(pytester: pytest.Pytester) -> None:
    """Mode none fails an unrecorded call with ReplayMissError naming it and the closest steps."""
    _write(pytester, ["a"])
    pytester.runpytest().assert_outcomes(passed=1)
    _write(pytester, ["a", "zzz"])
    result = pytester.runpytest("--redrive-record-mode=none")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ReplayMissError*model:fake*zzz*"])
    assert _calls(pytester) == ["a"]


def test_none_without_a_journal_errors(pytester: pytest.Pytester) -> None:
    """Mode none with no recorded journal errors at setup and says how to record one."""
    _write(pytester, ["a"])
    result = pytester.runpytest("--redrive-record-mode=none")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no journal was recorded*--redrive-record-mode=once*"])
    assert _calls(pytester) == []


def test_all_records_again(pytester: pytest.Pytester) -> None:
    """Mode all makes the live calls again and rewrites the journal."""
    _write(pytester, ["a"])
    pytester.runpytest().assert_outcomes(passed=1)
    _write(pytester, ["b"])
    pytester.runpytest("--redrive-record-mode=all").assert_outcomes(passed=1)
    assert _calls(pytester) == ["a", "b"]
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=1)
    assert _calls(pytester) == ["a", "b"]


def test_new_episodes_records_only_new_calls(pytester: pytest.Pytester) -> None:
    """Mode new_episodes replays the recorded call, records the new one, and saves both."""
    _write(pytester, ["a"])
    pytester.runpytest().assert_outcomes(passed=1)
    _write(pytester, ["a", "c"])
    pytester.runpytest("--redrive-record-mode=new_episodes").assert_outcomes(passed=1)
    assert _calls(pytester) == ["a", "c"]
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=1)
    assert _calls(pytester) == ["a", "c"]


def test_ci_defaults_to_none_and_beats_the_marker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With CI=true every test replays only, even one whose marker says once (issue 17 #1).

    On main the marker's ``once`` won over CI and the test called the live model.
    """
    monkeypatch.setenv("CI", "true")
    _write(pytester, ["a"])
    pytester.runpytest().assert_outcomes(errors=1)
    _write(pytester, ["a"], marker='(record_mode="once")')
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*record mode 'none' (CI is set)*--redrive-record-mode=once*"])
    assert _calls(pytester) == []
    # the command line beats CI: recording on purpose still works
    pytester.runpytest("--redrive-record-mode=once").assert_outcomes(passed=1)
    assert _calls(pytester) == ["a"]


@pytest.mark.parametrize("marker_mode", ["once", "new_episodes", "all", "rewrite"])
def test_command_line_none_beats_every_marker_mode(
    pytester: pytest.Pytester, marker_mode: str
) -> None:
    """--redrive-record-mode=none replays only whatever mode the marker names (issue 17 #1)."""
    _write(pytester, ["a"], marker=f"(record_mode={marker_mode!r})")
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(errors=1)
    assert _calls(pytester) == []


def test_command_line_all_re_records_a_marked_test(pytester: pytest.Pytester) -> None:
    """--redrive-record-mode=all re-records even a test whose marker says once."""
    _write(pytester, ["a"], marker='(record_mode="once")')
    pytester.runpytest().assert_outcomes(passed=1)
    _write(pytester, ["b"], marker='(record_mode="once")')
    pytester.runpytest().assert_outcomes(failed=1)  # drifted: once replays only
    pytester.runpytest("--redrive-record-mode=all").assert_outcomes(passed=1)
    pytester.runpytest().assert_outcomes(passed=1)
    assert _calls(pytester) == ["a", "b"]


def test_failing_test_recording_is_not_saved(pytester: pytest.Pytester) -> None:
    """A test that fails while recording leaves no journal behind."""
    pytester.makepyfile(
        test_agent=TEST_FILE.format(prompts=["a"], marker="") + "    assert False\n"
    )
    pytester.runpytest().assert_outcomes(failed=1)
    assert not _journal(pytester).exists()


def test_unused_journal_is_reported(pytester: pytest.Pytester) -> None:
    """A passing test that no longer makes every recorded call is listed in the summary."""
    _write(pytester, ["a", "b"])
    pytester.runpytest().assert_outcomes(passed=1)
    _write(pytester, ["a"])
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*redrive: recorded journals not used completely*",
            "*test_agent.rdj*left recorded steps unused*",
        ]
    )


def test_plugin_imports_nothing_heavy() -> None:
    """Loading the plugin module imports neither DuckDB, rich nor the SDKs."""
    code = (
        "import sys, redrive.pytest_plugin; "
        "print(sorted({'duckdb', 'rich', 'openai', 'anthropic', 'httpx'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


COLLIDING = """
import pathlib
import pytest
import redrive

CALLS = pathlib.Path(__file__).parent / "calls.log"

@redrive.tool(read_only=True)
def lookup(q: str) -> str:
    with CALLS.open("a") as log:
        log.write(q.replace(" ", "+") + "\\n")
    return f"live answer for {q}"

@pytest.mark.redrive
@pytest.mark.parametrize("q", ["order 1", "order_1"])
def test_lookup(q):
    assert lookup(q=q) == f"live answer for {q}"

class TestA:
    @pytest.mark.redrive
    def test_same(self):
        assert lookup(q="a") == "live answer for a"

class TestB:
    @pytest.mark.redrive
    def test_same(self):
        assert lookup(q="b") == "live answer for b"
"""


def test_ids_that_sanitize_alike_get_their_own_journals(pytester: pytest.Pytester) -> None:
    """Ids "order 1"/"order_1" and same-named methods of two classes record to four files."""
    pytester.makepyfile(test_collide=COLLIDING)
    pytester.runpytest("--redrive-record-mode=all").assert_outcomes(passed=4)
    files = sorted(p.name for p in (pytester.path / "journals" / "test_collide").iterdir())
    assert len(files) == 4
    assert [f.rsplit("-", 1)[0] for f in files] == [
        "test_lookup_order_1",
        "test_lookup_order_1",
        "test_same",
        "test_same",
    ]
    assert sorted(_calls(pytester)) == ["a", "b", "order+1", "order_1"]
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=4)
    assert len(_calls(pytester)) == 4


def test_journal_names_are_stable_and_plain_when_safe(pytester: pytest.Pytester) -> None:
    """A plain test keeps <name>.rdj; a parametrized one gets the same hashed name every run."""
    items = pytester.getitems(COLLIDING + "\ndef test_plain(redrive_run):\n    pass\n")
    from redrive.pytest_plugin import journal_path

    names = {item.nodeid.split("::", 1)[1]: journal_path(item).name for item in items}
    assert names["test_plain"] == "test_plain.rdj"
    assert names["test_lookup[order 1]"] != names["test_lookup[order_1]"]
    expected = hashlib.sha256(b"test_lookup[order 1]").hexdigest()[:8]
    assert names["test_lookup[order 1]"] == f"test_lookup_order_1-{expected}.rdj"


def test_two_tests_on_one_journal_file_stop_the_session(pytester: pytest.Pytester) -> None:
    """Two markers naming the same path= fail collection with a message naming both tests."""
    pytester.makepyfile(
        test_shared="""
import pytest

@pytest.mark.redrive(path="journals/shared.rdj")
def test_one():
    pass

@pytest.mark.redrive(path="journals/shared.rdj")
def test_two():
    pass
"""
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_shared.py::test_one and test_shared.py::test_two would record to the same "
            "journal file*shared.rdj*"
        ]
    )
    assert not (pytester.path / "journals").exists()
