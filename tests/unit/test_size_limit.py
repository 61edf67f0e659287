"""One size limit, checked at write time on every path (issue 12 #2, #5).

A value over :data:`redrive.storage.MAX_VALUE` fails its step with a
``JournalWriteError`` naming the run, seq, size and limit before anything is
acknowledged; what was journaled before stays; every value a journal accepts
survives a crash, a reopen, an export and an import.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.errors import JournalWriteError
from redrive.storage import MAX_VALUE, MemoryJournal, _checks
from redrive.storage import _base as base
from redrive.storage.duckdb import DuckDBJournal
from redrive.storage.rdj import _transfer as transfer


def crash(journal: DuckDBJournal) -> None:
    """Drop a journal as a killed process would: no checkpoint, the file released."""
    journal._log.close()  # type: ignore[union-attr]
    journal._store.close()
    journal._release()


def record(journal: redrive.storage.Journal, run_id: str, size: int) -> JournalWriteError | None:
    """Record a run whose second step returns ``size`` bytes; return the write error, if any."""

    @redrive.tool(read_only=True)
    def small() -> str:
        return "small"

    @redrive.tool(read_only=True)
    def big(n: int) -> bytes:
        return b"x" * n

    try:
        with redrive.run(journal, run_id) as run:
            small()
            run.finish(len(big(size)))
    except JournalWriteError as exc:
        return exc
    return None


def round_trip(path: str, run_id: str, folder: str) -> None:
    """Reopen after a crash, export, import: every frame the journal accepted comes back."""
    reopened = DuckDBJournal(path)
    frames = list(reopened.frames(run_id))
    assert frames and all(base.frame_size(f) <= _checks.MAX_VALUE for f in frames)
    assert any(f.name == "small" and f.kind == "tool_done" for f in frames)
    target = os.path.join(folder, "run.rdj")
    redrive.export_run(reopened, run_id, target)
    into = MemoryJournal()
    redrive.import_run(target, into)
    assert [f.chain for f in into.frames(run_id)] == [f.chain for f in frames]
    reopened.close()


@settings(max_examples=25, deadline=None)
@given(delta=st.integers(-80, 80))
def test_values_around_the_limit_survive_a_crash_export_and_import(delta: int) -> None:
    """Property (a small limit for speed): written or refused cleanly; refused -> clear error."""
    limit = 65_536  # over any run_start frame (its flags grow with the environment)
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as folder:
        mp.setattr(_checks, "MAX_VALUE", limit)
        path = os.path.join(folder, "runs.duckdb")
        journal = DuckDBJournal(path, checkpoint_frames=10_000)
        error = record(journal, "r", limit - 40 + delta)
        if error is not None:
            text = str(error)
            assert error.run_id == "r" and error.seq is not None
            assert f"seq {error.seq}" in text and f"{limit:,}-byte limit" in text
            assert "Nothing of this write was journaled" in text and "reference" in text
        crash(journal)
        round_trip(path, "r", folder)


def test_a_value_over_the_real_limit_fails_the_step_and_keeps_the_rest(tmp_path: Path) -> None:
    """Issue 12 #2/#5 at real size: just under writes, round-trips; just over is refused."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=10_000)
    assert record(journal, "under", MAX_VALUE - 1024) is None
    error = record(journal, "over", MAX_VALUE + 1)
    assert error is not None and error.run_id == "over"
    assert f"{MAX_VALUE:,}-byte limit" in str(error)
    crash(journal)
    round_trip(path, "under", str(tmp_path))
    reopened = DuckDBJournal(path)
    over = list(reopened.frames("over"))
    assert any(f.name == "small" and f.kind == "tool_done" for f in over)
    assert all(base.frame_size(f) <= MAX_VALUE for f in over)
    reopened.close()


def test_export_never_writes_a_file_its_reader_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record over the .rdj limit (journaled before the limit) is refused; no file, no temp."""
    journal = MemoryJournal()
    assert record(journal, "r", 3000) is None
    monkeypatch.setattr(transfer, "MAX_RECORD", 2000)
    target = tmp_path / "run.rdj"
    with pytest.raises(JournalWriteError, match=r"over the 2,000-byte limit of an \.rdj record"):
        redrive.export_run(journal, "r", target)
    assert list(tmp_path.iterdir()) == []


def test_an_input_over_the_limit_creates_no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside case temporalio/temporal#1267: arguments too large left an execution with no
    history that blocked later ones. Here the run is not created at all."""
    monkeypatch.setattr(_checks, "MAX_VALUE", 65_536)
    journal = MemoryJournal()
    with (
        pytest.raises(JournalWriteError, match="seq 0") as caught,
        redrive.run(journal, "huge", input={"blob": "x" * 100_000}),
    ):
        pass
    assert caught.value.run_id == "huge" and journal.get_run("huge") is None
    with redrive.run(journal, "small", input={"blob": "x"}) as run:
        run.finish(1)
    assert journal.get_run("small").status == "succeeded"  # type: ignore[union-attr]


@pytest.mark.postgres
def test_postgres_refuses_the_same_values_and_imports_what_duckdb_wrote(
    tmp_path: Path, pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same limit on Postgres: over it is refused cleanly; an export from DuckDB imports."""
    from redrive.storage.postgres import PostgresJournal

    monkeypatch.setattr(_checks, "MAX_VALUE", 65_536)
    journal = PostgresJournal(pg_url, schema=pg_schema)
    error = record(journal, "over", 70_000)
    assert error is not None and "65,536-byte limit" in str(error)
    assert any(f.name == "small" for f in journal.frames("over"))
    duck = DuckDBJournal(str(tmp_path / "runs.duckdb"))
    assert record(duck, "under", 60_000) is None
    redrive.export_run(duck, "under", tmp_path / "under.rdj")
    duck.close()
    redrive.import_run(tmp_path / "under.rdj", journal)
    assert journal.get_run("under").status == "succeeded"  # type: ignore[union-attr]
    journal.close()
