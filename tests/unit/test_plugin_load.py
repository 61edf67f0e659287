"""The pytest plugin loads each recording once a session, and sees a file changed on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from redrive.storage import MemoryJournal
from redrive.storage._copy import load_checked
from redrive.storage.rdj import RdjJournal, import_run

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

TEST_FILE = """
import pathlib
import pytest
import redrive

CALLS = pathlib.Path(__file__).parent / "calls.log"

@redrive.model(name="model:fake")
def fake_model(prompt):
    with CALLS.open("a") as log:
        log.write(prompt + "\\n")
    return {"text": prompt.upper()}

@pytest.mark.redrive
def test_agent(redrive_run):
    for prompt in ["a", "b"]:
        assert fake_model(prompt)["text"] == prompt.upper()
    assert redrive_run.replayed_steps in (0, 2)  # live, or both steps replayed
"""

#: Runs the one test twice in a session; between the two runs, CHANGE (if set) alters
#: the recording on disk; at the end, prints how many files the session read and checked.
CONFTEST = """
import os
from pathlib import Path

from redrive._plugin_load import CACHE

def pytest_collection_modifyitems(items):
    first = items[0]  # the same test again: a new item of the same node id
    items.append(type(first).from_parent(first.parent, name=first.name))

def pytest_runtest_logfinish(nodeid, location):
    change = os.environ.get("CHANGE")
    path = Path(__file__).parent / "journals" / "test_agent" / "test_agent.rdj"
    if change == "flip" and path.exists():
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # the same size, maybe the same mtime: only the bytes differ
        path.write_bytes(bytes(data))
        os.environ["CHANGE"] = ""

def pytest_terminal_summary(terminalreporter, config):
    cache = config.stash.get(CACHE, None)
    terminalreporter.write_line(f"READS={cache.reads if cache else 0}")
"""


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("CHANGE", raising=False)


def _record(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=TEST_FILE)
    pytester.runpytest("--redrive-record-mode=once").assert_outcomes(passed=1)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "calls.log").unlink()


def test_a_recording_replayed_twice_is_read_once_and_each_replay_has_all_its_steps(
    pytester: pytest.Pytester,
) -> None:
    """The second run replays from its own journal: the first consumed none of its steps."""
    _record(pytester)
    result = pytester.runpytest("--redrive-record-mode=none")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["READS=1"])
    assert not (pytester.path / "calls.log").exists()  # nothing went live


def test_a_recording_changed_on_disk_is_read_again(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte changed in the file between two runs of a session is seen (a damaged file)."""
    _record(pytester)
    monkeypatch.setenv("CHANGE", "flip")
    result = pytester.runpytest("--redrive-record-mode=none")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*JournalCorruptError*", "READS=1"])


def test_load_checked_makes_the_journal_a_copy_makes() -> None:
    """The run row and frames loaded from a checked file equal those import_run copies."""
    files = sorted((ROOT / "fixtures").rglob("*.rdj"))
    assert files
    for path in files:
        source = RdjJournal(path)
        copied, loaded = MemoryJournal(), MemoryJournal()
        row = import_run(path, copied)
        assert load_checked(source.header.run, tuple(source.frames(source.run_id)), loaded) == row
        assert loaded.get_run(row.run_id) == copied.get_run(row.run_id)
        assert list(loaded.frames(row.run_id)) == list(copied.frames(row.run_id))
        with pytest.raises(Exception, match="already holds"):
            load_checked(source.header.run, tuple(source.frames(source.run_id)), loaded)
        with pytest.raises(ValueError, match="use copy_run"):
            load_checked(
                source.header.run, tuple(source.frames(source.run_id))[:-1], MemoryJournal()
            )


def _fixture_rdj() -> Path:
    files = sorted((ROOT / "fixtures" / "runs" / "pass").glob("*.rdj"))
    assert files
    return files[0]


def test_a_replay_of_a_file_checked_on_open_decodes_and_hashes_each_frame_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The step reader takes the payloads and chains the file's reader checked (the plugin's path).

    Each payload is decoded once (by the check on open), each chain hashed
    once; the step reader gets the same steps a fresh decode gives, and the
    hand-off is left empty.
    """
    from redrive import _decoded
    from redrive import frames as frames_module
    from redrive.replay._steps import StepReader
    from redrive.storage import _validate

    path = _fixture_rdj()
    plain = RdjJournal(path)
    want = [
        (s.seq, s.kind, s.name, s.data)
        for s in StepReader(plain.run_id).read(plain.frames(plain.run_id))
    ]
    decoded: list[bytes] = []
    hashed: list[int] = []
    real_decode, real_chain = frames_module.decode, frames_module.Frame.expected_chain
    real_holds = frames_module._chain_holds

    def counting_decode(data: bytes) -> object:
        decoded.append(data)
        return real_decode(data)

    def counting_chain(frame: frames_module.Frame, prev: str) -> str:
        hashed.append(frame.seq)
        return real_chain(frame, prev)

    monkeypatch.setattr(frames_module, "decode", counting_decode)
    monkeypatch.setattr(_validate, "decode", counting_decode)

    def counting_holds(frame: frames_module.Frame, prev: str) -> bool:
        # the chain check's one-call form (its fallback is expected_chain, counted above)
        hashed.append(frame.seq)
        return real_holds(frame, prev)

    monkeypatch.setattr(frames_module.Frame, "expected_chain", counting_chain)
    monkeypatch.setattr(frames_module, "_chain_holds", counting_holds)
    _validate._PASSED.clear()
    source = RdjJournal(path, keep_payloads=True, data=path.read_bytes())
    held = tuple(source.frames(source.run_id))
    payloads = [f.payload for f in held]
    got = [(s.seq, s.kind, s.name, s.data) for s in StepReader(source.run_id).read(iter(held))]
    assert got == want
    assert sorted(hashed) == sorted({f.seq for f in held}) and len(hashed) == len(held)
    assert [d for d in decoded if d in payloads] == payloads  # each payload once, on open
    assert not _decoded._KEPT


def test_kept_payloads_go_to_one_taker_and_die_with_their_frame() -> None:
    """A kept payload is handed out once; a frame dropped untaken leaves nothing behind."""
    from redrive import _decoded

    path = _fixture_rdj()
    source = RdjJournal(path, keep_payloads=True)
    frame = next(iter(source.frames(source.run_id)))
    taken = _decoded.take(frame)
    assert taken == frame.data() and taken is not None
    assert _decoded.take(frame) is None  # once: a second reader decodes its own
    assert _decoded._KEPT
    del source, frame, taken
    import gc

    gc.collect()
    assert not _decoded._KEPT  # untaken payloads went with their frames


def test_a_recording_is_read_from_disk_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each load reads its file once: the bytes hashed for the cache are the bytes checked."""
    _record(pytester)
    opened: list[str] = []
    real_open = open

    def counting_open(file: object, *args: object, **kwargs: object) -> object:
        if str(file).endswith("test_agent.rdj"):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    import builtins

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(Path, "read_bytes", lambda self: _read(self, opened))
    result = pytester.runpytest_inprocess("--redrive-record-mode=none")
    result.assert_outcomes(passed=2)
    # the conftest runs the test twice: one read each (the second finds the same bytes
    # in the cache); the check on open reads the bytes already read
    assert len(opened) == 2, opened


def _read(path: Path, opened: list[str]) -> bytes:
    if path.name.endswith("test_agent.rdj"):
        opened.append(str(path))
    with path.open("rb") as fh:
        return fh.read()
