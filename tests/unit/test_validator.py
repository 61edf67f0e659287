"""One validator for a frame and a run (issue 24 #3, #4): ``verify`` passes a file exactly
when every read of it succeeds, and no journal acknowledges what it cannot read back."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive.errors import JournalCorruptError, ReplayError
from redrive.frames import Frame, PrefixRef, encode
from redrive.replay import iter_steps
from redrive.storage import Journal, MemoryJournal, RunRecord
from redrive.storage.duckdb import DuckDBJournal
from redrive.storage.postgres import PostgresJournal
from redrive.storage.rdj import RdjJournal, export_run
from tests.conftest import examples
from tests.hostile import write_rdj


@redrive.model(name="model:chat")
def _chat(messages: list[str]) -> dict[str, Any]:
    return {"text": f"{len(messages)} messages"}


@redrive.tool(restart_safe=False)
def _charge(amount: int) -> dict[str, Any]:
    return {"charged": amount}


@redrive.tool(read_only=True)
def _boom(n: int) -> int:
    raise KeyError(n)


def _loop(run: Any) -> dict[str, int]:
    history = ["hi", "there"]
    for i in range(3):
        history.append(_chat(list(history))["text"])  # prefix deltas from the second request
        _charge(i)
    with contextlib.suppress(KeyError):
        _boom(1)
    run.note("checked", {"ok": True})
    return {"steps": 3}


def _base() -> tuple[RunRecord, list[Frame]]:
    journal = MemoryJournal()
    with redrive.run(journal, "r", input={"n": 2}) as run:
        run.finish(_loop(run))
    record = journal.get_run("r")
    assert record is not None
    return record, list(journal.frames("r"))


BASE = _base()


def _epoch_file(path: Path) -> str:
    record, frames = BASE
    return write_rdj(path, record, [attrs.evolve(frames[0], epoch=2**64 - 1), *frames[1:]])


BODIES: list[int] = []


@redrive.tool(restart_safe=False)
def _send(n: int) -> int:
    BODIES.append(n)
    return n


def _other_run(journal: Journal) -> Any:
    with redrive.run(journal, "other"):
        sent = _send(7)
    return sent


def test_an_epoch_past_bigint_fails_verify_and_import_and_leaves_the_journal_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#3: on main the file passed verify, import printed "imported", and every later
    command on the DuckDB journal raised JournalCorruptError (the .rdlog record refused)."""
    path = _epoch_file(tmp_path / "e.rdj")
    db = str(tmp_path / "j.duckdb")
    journal = DuckDBJournal(db)
    _other_run(journal)
    journal.close()
    assert cli.main(["verify", path]) == cli.EXIT_FAILED
    assert "CORRUPT" in capsys.readouterr().out
    assert cli.main(["--journal", db, "import", path]) == cli.EXIT_JOURNAL
    assert "epoch" in capsys.readouterr().err
    journal = DuckDBJournal(db)
    assert [r.run_id for r in journal.runs()] == ["other"]
    BODIES.clear()
    assert _other_run(journal) == 7 and BODIES == []  # resumed: replayed, no body ran again
    journal.close()
    assert cli.main(["--journal", db, "verify"]) == cli.EXIT_OK


def test_an_epoch_past_bigint_is_refused_by_postgres_import_as_corruption(
    tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    """#3: on main the Postgres import raised a raw psycopg NumericValueOutOfRange."""
    path = _epoch_file(tmp_path / "e.rdj")
    journal = PostgresJournal(pg_url, schema=pg_schema)
    try:
        with pytest.raises(JournalCorruptError, match="epoch"):
            redrive.import_run(path, journal)
        assert journal.get_run("r") is None
    finally:
        journal.close()


@pytest.mark.parametrize("backend", ["memory", "duckdb", "postgres"])
@pytest.mark.parametrize(
    ("field", "value"),
    [("epoch", 2**63), ("seq", 2**64 - 1), ("name", "a\x00b"), ("key", "KEY"), ("at", 1e400)],
)
def test_the_writer_refuses_a_frame_no_journal_can_read_back(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str, field: str, value: Any
) -> None:
    """The writer asks the validator first: nothing is acknowledged that a reader refuses."""
    record, frames = BASE
    journal: Journal
    if backend == "memory":
        journal = MemoryJournal()
    elif backend == "duckdb":
        journal = DuckDBJournal(str(tmp_path / "w.duckdb"))
    else:
        url, schema = request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
        journal = PostgresJournal(url, schema=schema)
    try:
        start = RunRecord(run_id="r", input_fp=record.input_fp, created_at=1.0, updated_at=1.0)
        journal.create_run(start, frames[0])
        bad = attrs.evolve(frames[1], **{field: value})
        with pytest.raises(ValueError, match=field):
            journal.append("r", [bad], expected_seq=1)
        assert [f.seq for f in journal.frames("r")] == [0]
    finally:
        journal.close()


# -- the property: verify passes iff every read succeeds -----------------------------------

FIELDS = ["turn", "step", "attempt", "event", "state", "error", "status", "flags", "request"]
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.lists(st.integers(-3, 40), max_size=3),
    st.builds(lambda n: {"messages": PrefixRef(n, [])}, st.integers(0, 9)),
)
FRAME_JUNK = {
    "seq": st.integers(-1, 2**64),
    "epoch": st.integers(-1, 2**64),
    "at": st.floats(allow_nan=False),
    "key": st.sampled_from(["", "x", "A" * 32, "a" * 32]),
    "name": st.sampled_from(["", "n", "a\x00b"]),
    "kind": st.sampled_from(["note", "tool_done", "value", "run_end", "nope"]),
}
RUN_JUNK = {
    "status": st.sampled_from(["running", "succeeded", "zombie", "cancelled"]),
    "error": st.one_of(st.none(), st.text(max_size=3)),
    "output": st.one_of(st.none(), st.binary(max_size=3)),
    "created_at": st.floats(allow_nan=False),
    "entrypoint": st.one_of(st.none(), st.sampled_from(["m:f", "a\x00"])),
}


@st.composite
def hostile_files(draw: st.DrawFn) -> tuple[RunRecord, list[Frame]]:
    """A valid run with a few mutations: payload fields, frame fields, row fields, frames
    dropped or swapped; re-chained, so only the validator can tell."""
    record, frames = BASE
    frames = list(frames)
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["payload", "frame", "row", "drop", "swap"]))
        index = draw(st.integers(0, len(frames) - 1))
        if what == "payload":
            data = frames[index].data()
            data[draw(st.sampled_from(FIELDS))] = draw(JUNK)
            with contextlib.suppress(TypeError, ValueError):
                frames[index] = attrs.evolve(frames[index], payload=encode(data))
        elif what == "frame":
            field = draw(st.sampled_from(sorted(FRAME_JUNK)))
            frames[index] = attrs.evolve(frames[index], **{field: draw(FRAME_JUNK[field])})
        elif what == "row":
            field = draw(st.sampled_from(sorted(RUN_JUNK)))
            record = attrs.evolve(record, **{field: draw(RUN_JUNK[field])})
        elif what == "drop" and len(frames) > 1:
            del frames[index]
        elif what == "swap" and index + 1 < len(frames):
            frames[index], frames[index + 1] = frames[index + 1], frames[index]
    return record, frames


def _reads(path: str, tmp: Path) -> list[Callable[[], object]]:
    """Every read of a run file: open, frames, replay's step reader, show, export, import."""

    def steps() -> None:
        for _step in iter_steps(RdjJournal(path).frames("r"), "r"):
            pass

    def show() -> None:
        if cli.main(["show", path]) != cli.EXIT_OK:
            raise JournalCorruptError("show failed")

    def export() -> None:
        export_run(RdjJournal(path), "r", tmp / "again.rdj")

    def imported() -> None:
        redrive.import_run(path, MemoryJournal())

    return [lambda: list(RdjJournal(path).frames("r")), steps, show, export, imported]


@settings(
    max_examples=examples(default=20, ci=40, thorough=300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=hostile_files())
def test_verify_passes_exactly_when_every_read_succeeds(
    case: tuple[RunRecord, list[Frame]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Property (#4): for a hostile ``.rdj`` file, ``verify`` exits 0 iff show, the replay
    step reader, export and import all succeed; a failing read is a redrive error."""
    record, frames = case
    tmp = tmp_path_factory.mktemp("v")
    try:
        path = write_rdj(tmp / "r.rdj", record, frames)
    except (TypeError, ValueError, OverflowError):
        return  # the layout itself cannot hold it (a negative seq in a header count...)
    failed = []
    for read in _reads(path, tmp):
        try:
            read()
        except ReplayError as exc:
            failed.append(exc)
    verdict = cli.main(["verify", path])
    assert verdict in (cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_JOURNAL)
    assert (verdict == cli.EXIT_OK) == (not failed), failed
