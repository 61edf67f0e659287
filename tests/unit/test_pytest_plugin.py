"""The pytest plugin's record modes, run in pytester sandboxes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redrive.pytest_plugin import MODES, record_mode

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


def test_an_unknown_marker_option_stops_the_session(pytester: pytest.Pytester) -> None:
    """Issue 17 #9: ``redact=`` on the marker was silently ignored (and the secret journaled);
    an unknown option or a positional argument is now a usage error naming it (as
    pytest-recording#68 asked of its marks: check their arguments, typos included)."""
    _write(pytester, ["a"], marker='(redact=("$..user",))')
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown @pytest.mark.redrive option(s) 'redact'*record_mode*"])
    assert _calls(pytester) == [] and not _journal(pytester).exists()
    _write(pytester, ["a"], marker='("once")')
    assert pytester.runpytest().ret == pytest.ExitCode.USAGE_ERROR
    _write(pytester, ["a"], marker='(record_mode="sometimes")')
    assert pytester.runpytest().ret == pytest.ExitCode.USAGE_ERROR


def test_rewrite_drops_steps_no_longer_used(pytester: pytest.Pytester) -> None:
    """Mode rewrite re-records from scratch: a step the test no longer makes is gone, so the
    next replay-only run uses the journal completely (pytest-recording#37: new_episodes keeps
    the old interactions; users asked for a mode that removes them)."""
    _write(pytester, ["a", "b"])
    pytester.runpytest().assert_outcomes(passed=1)
    _write(pytester, ["a"])
    result = pytester.runpytest("--redrive-record-mode=rewrite")
    result.assert_outcomes(passed=1)
    assert _calls(pytester) == ["a", "b", "a"]
    result = pytester.runpytest("--redrive-record-mode=none")
    result.assert_outcomes(passed=1)
    assert "not used completely" not in result.stdout.str()


def test_rewrite_keeps_the_old_recording_when_the_test_fails(pytester: pytest.Pytester) -> None:
    """rewrite records aside: a failing re-record leaves the old file as it was (issue 17, t2)."""
    _write(pytester, ["a"])
    pytester.runpytest().assert_outcomes(passed=1)
    good = _journal(pytester).read_bytes()
    pytester.makepyfile(
        test_agent=TEST_FILE.format(prompts=["a", "b"], marker="") + "    assert False\n"
    )
    pytester.runpytest("--redrive-record-mode=rewrite").assert_outcomes(failed=1)
    assert _journal(pytester).read_bytes() == good
    # the old recording still replays, with no live call
    _write(pytester, ["a"])
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=1)
    # a passing rewrite replaces it
    _write(pytester, ["a", "b"])
    pytester.runpytest("--redrive-record-mode=rewrite").assert_outcomes(passed=1)
    assert _journal(pytester).read_bytes() != good
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=1)


NETWORK_TEST = """
import pytest
import httpx2

def handler(request):
    return httpx2.Response(200, json={{"ok": True}})

@pytest.mark.redrive{marker}
def test_net():
    try:
        httpx2.Client(transport=httpx2.HTTPTransport()).get("http://127.0.0.1:9/")
    except BaseException:
        pass  # code under test that swallows even NetworkBlocked does not hide the request
    assert httpx2.Client(transport=httpx2.MockTransport(handler)).get("http://x/").json()
"""


@pytest.mark.parametrize(
    ("args", "marker", "blocked"),
    [
        (["--redrive-block-network"], "", True),
        ([], "(block_network=True)", True),
        (["--redrive-record-mode=none"], "", True),
        ([], "", False),
    ],
)
def test_the_network_guard_fails_requests_outside_recorded_steps(
    pytester: pytest.Pytester, args: list[str], marker: str, blocked: bool
) -> None:
    """With the guard on (flag, marker, or mode none) an HTTP request the test makes at the
    httpx transport level fails the test even when swallowed; MockTransport is not network
    (vcrpy#23: a setting that prevents any network request in the cassette's context)."""
    pytester.makepyfile(test_net=NETWORK_TEST.format(marker=marker))
    if "--redrive-record-mode=none" in args:  # none needs a recording: make an empty one
        pytester.runpytest().assert_outcomes(passed=1)
    result = pytester.runpytest(*args)
    if blocked:
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(["*GET http://127.0.0.1:9/*outside recorded steps*"])
    else:
        result.assert_outcomes(passed=1)


DURABLE_TEST = """
import pathlib
import pytest
import redrive

CALLS = pathlib.Path(__file__).parent / "calls.log"

@redrive.model(name="model:fake")
def fake_model(prompt):
    with CALLS.open("a") as log:
        log.write(prompt + "\\n")
    return prompt.upper()

@redrive.durable("runs.duckdb", run_id="refund:{{order_id}}")
def handle(order_id):
    return fake_model(order_id)

def by_url(order_id):
    with redrive.run("other.duckdb", f"support:{{order_id}}") as run:
        return run.finish(fake_model("url-" + order_id))

@pytest.mark.redrive{marker}
def test_refund():
    assert handle("{order}") == "{order}".upper()
    assert by_url("{order}") == "URL-{order}"
"""


def test_runs_the_code_opens_record_into_the_tests_journal(pytester: pytest.Pytester) -> None:
    """Issue 17 #2: ``@redrive.durable`` and ``redrive.run`` by URL inside a plugin test record
    into the test's journal (readable run ids), not ./runs.duckdb; a fresh checkout replays."""
    pytester.makepyfile(test_refund=DURABLE_TEST.format(marker="", order="1001"))
    pytester.runpytest().assert_outcomes(passed=1)
    assert _calls(pytester) == ["1001", "url-1001"]
    assert not (pytester.path / "runs.duckdb").exists()
    assert not (pytester.path / "other.duckdb").exists()
    folder = pytester.path / "journals" / "test_refund" / "test_refund.runs"
    assert sorted(p.name for p in folder.iterdir()) == ["refund%3A1001.rdj", "support%3A1001.rdj"]
    from redrive.storage.rdj import RdjJournal

    assert RdjJournal(folder / "refund%3A1001.rdj").run_id == "refund:1001"
    # replay only: no live call, and a changed call diverges instead of going live
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=1)
    assert _calls(pytester) == ["1001", "url-1001"]
    pytester.makepyfile(test_refund=DURABLE_TEST.format(marker="", order="1002"))
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(failed=1)
    assert _calls(pytester) == ["1001", "url-1001"]
    # rewrite: the runs of the old recording are dropped
    pytester.runpytest("--redrive-record-mode=rewrite").assert_outcomes(passed=1)
    assert sorted(p.name for p in folder.iterdir()) == ["refund%3A1002.rdj", "support%3A1002.rdj"]


LIVE_TOOLS_TEST = """
import pytest
import redrive

DB = []

@redrive.model(name="model:plan")
def plan(text):
    return "O-1"

@redrive.tool
def create_order(order_id):
    DB.append(order_id)
    return {{"order": order_id}}

@pytest.mark.redrive{marker}
def test_orders():
    DB.clear()
    create_order(plan("refund"))
    assert DB == ["O-1"]
"""


@pytest.mark.parametrize(
    ("args", "marker"),
    [([], "(live_tools=['create_order'])"), (["--redrive-live-tools=create_order"], "")],
)
def test_live_tools_in_a_plugin_test(
    pytester: pytest.Pytester, args: list[str], marker: str
) -> None:
    """Issue 17 #3: a test checking what a tool wrote passes on replay with live_tools (on main it
    passed recording and failed replaying: ``assert [] == ['O-1']``)."""
    pytester.makepyfile(test_orders=LIVE_TOOLS_TEST.format(marker=""))
    pytester.runpytest().assert_outcomes(passed=1)
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(failed=1)
    pytester.makepyfile(test_orders=LIVE_TOOLS_TEST.format(marker=marker))
    pytester.runpytest("--redrive-record-mode=none", *args).assert_outcomes(passed=1)


DRIFT_TEST = """
import pytest
import redrive

PROMPT = {prompt!r}

@redrive.model(name="model:fake")
def fake_model(prompt):
    return prompt.upper()

def agent():
    return fake_model(PROMPT)

def test_drift(redrive_run):
    assert agent()
"""


def test_a_divergence_in_a_test_reads_in_one_screen(pytester: pytest.Pytester) -> None:
    """Issue 17 #5: a prompt change prints the step, the caller's line, the path diff and the
    re-record command, without redrive's own frames (on main: ~100 lines, 60 of redrive)."""
    pytester.makepyfile(test_drift=DRIFT_TEST.format(prompt="refund please"))
    pytester.runpytest().assert_outcomes(passed=1)
    pytester.makepyfile(test_drift=DRIFT_TEST.format(prompt="refund now"))
    result = pytester.runpytest("--redrive-record-mode=none")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*diverged from its journal at seq 1*",
            "*called from: test_drift.py:11 in agent*",
            "*$.prompt: 'refund please' -> 'refund now'*",
            "*re-record this test: `pytest test_drift.py::test_drift --redrive-record-mode=rewrite`*",  # noqa: E501
        ]
    )
    assert "redrive/replay" not in out and "redrive/recorders" not in out
    assert "ReplayPolicy" not in out and "fork" not in out
    assert len(out.splitlines()) < 60


ASYNC_DRIFT_TEST = """
import asyncio
import redrive

PROMPT = {prompt!r}

@redrive.model(name="model:fake")
async def fake_model(prompt):
    return prompt.upper()

async def agent():
    # a framework would run the call in tasks of its own; asyncio's frames stand for it
    return await asyncio.wait_for(asyncio.create_task(fake_model(PROMPT)), 10)

def test_drift(redrive_run):
    assert asyncio.run(agent())
"""


def test_a_divergence_through_framework_frames_leaves_them_out(pytester: pytest.Pytester) -> None:
    """Issue 25 #7: the frames of the standard library and installed packages (a framework,
    asyncio) between the test and the agent are left out of a replay error's traceback, with
    a note saying so; the agent's line is named."""
    pytester.makepyfile(test_drift=ASYNC_DRIFT_TEST.format(prompt="refund please"))
    pytester.runpytest().assert_outcomes(passed=1)
    pytester.makepyfile(test_drift=ASYNC_DRIFT_TEST.format(prompt="refund now"))
    result = pytester.runpytest("--redrive-record-mode=none")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*called from: test_drift.py:12 in agent*",
            "*redrive: * frame(s) of installed packages and the standard library are left out*",
        ]
    )
    assert "asyncio/runners.py" not in out and "asyncio/base_events.py" not in out
    assert "redrive/replay" not in out
    full = pytester.runpytest("--redrive-record-mode=none", "--full-trace").stdout.str()
    assert "asyncio/runners.py" in full


SDK_TEST = """
import openai
import pytest
import redrive

client = redrive.wrap(openai.OpenAI(base_url={url!r}, api_key="sk-test", max_retries=0))


@pytest.fixture(autouse=True, scope="module")
def _close_client():
    # a client left to the garbage collector leaks its keep-alive socket into
    # whichever later test the collector runs in (a ResourceWarning there)
    yield
    client.close()

@pytest.mark.redrive
def test_sdk():
    reply = client.chat.completions.create(
        model="gpt-4o", messages=[{{"role": "user", "content": "hi"}}]
    )
    assert reply.choices[0].message.content == "hello"
"""


def test_the_guard_lets_a_recording_wrapped_client_through(pytester: pytest.Pytester) -> None:
    """Under --redrive-block-network a wrapped SDK client's live call is recorded (it is a
    recorded step), and its replay makes no request at all (pytest-recording#68: a recording
    mode under block_network raised instead of recording)."""
    from tests.sdkserver import Reply, chat_completion, serve

    chat = chat_completion()
    with serve() as server:
        server.add(Reply(body=chat))
        pytester.makepyfile(test_sdk=SDK_TEST.format(url=server.url + "/v1"))
        pytester.runpytest("--redrive-block-network").assert_outcomes(passed=1)
        pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=1)
        assert len(server.requests) == 1


def test_text_journals_replay_and_re_record_as_a_readable_diff(pytester: pytest.Pytester) -> None:
    """Issue 17 #10: with --redrive-journal-format=jsonl the test's journal is JSON Lines; it
    replays offline, and a re-recorded prompt change differs only in the lines of its steps,
    where the new prompt is readable."""
    _write(pytester, ["a"])
    pytester.runpytest("--redrive-journal-format=jsonl").assert_outcomes(passed=1)
    path = pytester.path / "journals" / "test_agent" / "test_agent.rdj.jsonl"
    assert path.exists() and not _journal(pytester).exists()
    pytester.runpytest(
        "--redrive-journal-format=jsonl", "--redrive-record-mode=none"
    ).assert_outcomes(passed=1)
    assert _calls(pytester) == ["a"]
    before = path.read_text().split("\n")
    _write(pytester, ["changed prompt"])
    pytester.runpytest(
        "--redrive-journal-format=jsonl", "--redrive-record-mode=rewrite"
    ).assert_outcomes(passed=1)
    after = path.read_text().split("\n")
    changed = [line for line in after if line not in before]
    assert any('"changed prompt"' in line for line in changed)
    assert all(line.startswith("{") for line in after if line)


def test_a_marker_can_choose_the_text_format(pytester: pytest.Pytester) -> None:
    """``journal_format="jsonl"`` on the marker; an unknown format is a usage error."""
    _write(pytester, ["a"], marker='(journal_format="jsonl")')
    pytester.runpytest().assert_outcomes(passed=1)
    assert (pytester.path / "journals" / "test_agent" / "test_agent.rdj.jsonl").exists()
    _write(pytester, ["a"], marker='(journal_format="yaml")')
    assert pytester.runpytest().ret == pytest.ExitCode.USAGE_ERROR


@given(
    command_line=st.none() | st.sampled_from(MODES),
    ci=st.booleans(),
    marker=st.none() | st.sampled_from(MODES),
)
def test_one_precedence_rule_for_every_mode(
    command_line: str | None, ci: bool, marker: str | None
) -> None:
    """For every combination: the command line wins, then CI (always ``none``, so never the
    network), then the marker, then ``once`` (issue 17 #1: on main a marker beat CI and the
    command line for every mode but ``all``)."""
    mode, why = record_mode(command_line, ci, marker)
    if command_line:
        assert mode == command_line and why == "--redrive-record-mode"
    elif ci:
        assert mode == "none"
    else:
        assert mode == (marker or "once")


ASYNC_DURABLE_TEST = """
import asyncio
import pathlib
import pytest
import redrive

CALLS = pathlib.Path(__file__).parent / "calls.log"

@redrive.model(name="model:fake")
async def fake_model(prompt):
    with CALLS.open("a") as log:
        log.write(prompt + "\\n")
    return prompt.upper()

@redrive.durable("runs.duckdb", run_id="refund:{{order_id}}")
async def handle(order_id):
    return await fake_model(order_id)

@pytest.mark.redrive
def test_refund():
    assert asyncio.run(handle("{order}")) == "{order}".upper()
"""


def test_an_async_durable_function_records_into_the_tests_journal(
    pytester: pytest.Pytester,
) -> None:
    """The async face of issue 17 #2: an async ``@redrive.durable`` run from the test records
    into the test's journal and replays from it."""
    pytester.makepyfile(test_refund=ASYNC_DURABLE_TEST.format(order="7"))
    pytester.runpytest().assert_outcomes(passed=1)
    folder = pytester.path / "journals" / "test_refund" / "test_refund.runs"
    assert [p.name for p in folder.iterdir()] == ["refund%3A7.rdj"]
    assert not (pytester.path / "runs.duckdb").exists()
    pytester.runpytest("--redrive-record-mode=none").assert_outcomes(passed=1)
    assert _calls(pytester) == ["7"]
