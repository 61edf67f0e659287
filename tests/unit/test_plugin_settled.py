"""Re-recording unchanged behaviour leaves committed test recordings byte-identical (issue 27 #8).

On main the ``run_start`` fingerprint kept the git commit (``app_version``),
and every frame its wall time, so a re-record after any commit (or a second
later) rewrote every recording. The plugin now saves recordings settled
(:mod:`redrive._plugin_settle`) and leaves a file that already holds the same
behaviour as it is.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.storage import MemoryJournal
from redrive.storage.rdj import import_run
from tests.sdkserver import Reply, ScriptServer, chat_completion, serve

pytest_plugins = ["pytester"]

CHAT = chat_completion()

TEST_FILE = """
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

@redrive.model(name="model:fake")
def classify(text):
    return {{"label": "refund", "text": text}}

@redrive.tool
def refund(order_id):
    return {{"refunded": order_id}}

@redrive.durable("runs.duckdb", run_id="support:{{order_id}}")
def handle(order_id):
    reply = client.chat.completions.create(
        model="gpt-4o", messages=[{{"role": "user", "content": order_id}}]
    )
    assert reply.choices[0].message.content == "hello"
    return refund(order_id)

@pytest.mark.redrive
def test_support():
    assert classify("damaged")["label"] == "refund"
    assert handle("A-1") == {{"refunded": "A-1"}}
"""


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("REDRIVE_APP_VERSION", raising=False)


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_re_recording_after_a_commit_leaves_git_clean(pytester: pytest.Pytester) -> None:
    """Commit, record, commit the recordings, commit again, re-record: ``git diff
    --exit-code`` is clean, though the commit, the clock and the server's processing-time
    header all changed. On main the new commit (and every frame's time) rewrote them."""
    from redrive.replay._fingerprint import _git_commit

    with serve() as server:
        for ms in ("12", "907"):
            server.add(Reply(body=CHAT, headers={"openai-processing-ms": ms}))
        pytester.makepyfile(test_support=TEST_FILE.format(url=server.url + "/v1"))
        _git(pytester.path, "init", "-q")
        _git(pytester.path, "add", "-A")
        _git(pytester.path, "commit", "-qm", "code")
        _git_commit.cache_clear()
        pytester.runpytest().assert_outcomes(passed=1)
        journals = pytester.path / "journals" / "test_support"
        assert len(list(journals.rglob("*.rdj"))) == 2  # the test's run and support:A-1
        _git(pytester.path, "add", "journals")
        _git(pytester.path, "commit", "-qm", "recordings")
        (pytester.path / "NOTES.md").write_text("another commit\n")
        _git(pytester.path, "add", "NOTES.md")
        _git(pytester.path, "commit", "-qm", "notes")
        _git_commit.cache_clear()  # a new process would read the new commit
        pytester.runpytest("--redrive-record-mode=all").assert_outcomes(passed=1)
        assert len(server.requests) == 2  # the re-record really called the model
    diff = subprocess.run(
        ["git", "diff", "--exit-code", "--stat", "--", "journals"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
    )
    assert diff.returncode == 0, diff.stdout
    assert _git(pytester.path, "status", "--porcelain", "--", "journals") == ""


@contextlib.contextmanager
def _volatile(version: str, clock: float, pid: int, host: str) -> Iterator[None]:
    """The process looks like another commit, wall clock, process and host."""
    ticks = itertools.count()
    with (
        mock.patch.dict(os.environ, {"REDRIVE_APP_VERSION": version}),
        mock.patch("time.time", lambda: clock + next(ticks) * 0.25),
        mock.patch("os.getpid", lambda: pid),
        mock.patch("socket.gethostname", lambda: host),
    ):
        yield


@redrive.model(name="model:classify")
def _classify(text: str) -> dict[str, str]:
    return {"label": "refund", "text": text}


@redrive.tool
def _refund(order_id: str) -> dict[str, str]:
    return {"refunded": order_id}


@attrs.frozen
class _Sdk:
    server: ScriptServer
    client: Any  # a wrapped openai.OpenAI


def _behaviour(sdk: _Sdk | None) -> dict[str, str]:
    """The loop: a model callable, an SDK call (when given one), a tool."""
    _classify("damaged")
    if sdk is not None:
        sdk.client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    return _refund("A-1")


def _record(sdk: _Sdk | None, processing_ms: int) -> MemoryJournal:
    """Record the behaviour in a leased run of a fresh journal (the server answers once)."""
    if sdk is not None:
        sdk.server.add(Reply(body=CHAT, headers={"openai-processing-ms": str(processing_ms)}))
    journal = MemoryJournal(":memory:")
    with redrive.run(journal, "support:A-1", input={"order": "A-1"}, lease=30.0) as run:
        run.finish(_behaviour(sdk))
    return journal


VOLATILE = st.tuples(
    st.text("0123456789abcdef", min_size=7, max_size=40),
    st.floats(1e9, 4e9),
    st.integers(1, 2**22),
    st.text("abcdefghij-", min_size=1, max_size=12),
    st.integers(0, 100_000),
)


@pytest.fixture(scope="module")
def sdk() -> Iterator[_Sdk]:
    with serve() as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk", max_retries=0)
        with client:
            yield _Sdk(server, redrive.wrap(client))


@pytest.mark.parametrize("suffix", [".rdj", ".rdj.jsonl"])
@settings(max_examples=8)
@given(first=VOLATILE, second=VOLATILE)
def test_the_same_behaviour_under_other_volatile_values_saves_the_same_bytes(
    sdk: _Sdk,
    suffix: str,
    first: tuple[str, float, int, str, int],
    second: tuple[str, float, int, str, int],
) -> None:
    """Recorded under any two (app version, wall clock, pid, hostname, server header timing):
    two fresh recordings are byte-identical files; a re-record over the committed file (its
    response headers as received, date and processing time included, differ) leaves it
    byte-identical; and the committed file replays with no live call."""
    from redrive._plugin_settle import save_settled

    folder = Path(tempfile.mkdtemp())
    try:
        fresh = []
        for name, (version, clock, pid, host, _ms) in (("a", first), ("b", second)):
            with _volatile(version, clock, pid, host):
                path = folder / f"{name}{suffix}"
                assert save_settled(_record(None, 0), "support:A-1", path)
                fresh.append(path.read_bytes())
        assert fresh[0] == fresh[1]
        committed = folder / f"sdk{suffix}"
        with _volatile(*first[:4]):
            assert save_settled(_record(sdk, first[4]), "support:A-1", committed)
        saved = committed.read_bytes()
        with _volatile(*second[:4]):
            assert not save_settled(_record(sdk, second[4]), "support:A-1", committed)
        assert committed.read_bytes() == saved
        requests = len(sdk.server.requests)
        replayed = MemoryJournal(":memory:")
        import_run(committed, replayed)
        with redrive.run(replayed, "support:A-1", live=False) as run:
            assert run.finish(_behaviour(sdk)) == {"refunded": "A-1"}
        assert len(sdk.server.requests) == requests
    finally:
        shutil.rmtree(folder)
