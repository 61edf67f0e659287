"""Disk full during the bulk move into DuckDB (issue 12 #9).

A write fsynced to the log is durable and acknowledged even when the bulk
move into DuckDB fails; the worker goes on, ``close()`` raises only redrive's
``JournalWriteError`` saying the log holds the writes, and after space is
freed the reopened journal reads them from the log and moves them in.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

import redrive
from redrive.errors import JournalWriteError
from redrive.storage._framelog import START
from redrive.storage.duckdb import DuckDBJournal


def full_disk(journal: DuckDBJournal, monkeypatch: pytest.MonkeyPatch, how: str) -> list[int]:
    """Make every bulk move fail as on a full disk; return the list of attempts."""
    attempts: list[int] = []

    def ingest(*args: Any) -> None:
        attempts.append(1)
        if how == "oserror":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise duckdb.IOException("IO Error: could not write file: No space left on device")

    monkeypatch.setattr(journal._store, "ingest", ingest)
    monkeypatch.setattr(journal._store, "ingest_apart", ingest)  # the background checkpoint
    return attempts


@pytest.mark.parametrize("how", ["oserror", "duckdb"])
def test_a_failed_bulk_move_loses_nothing_and_runs_each_body_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The claim is fsynced to the log: the body runs, its result is journaled, once."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=3)
    attempts = full_disk(journal, monkeypatch, how)
    calls: list[int] = []

    @redrive.tool
    def refund(n: int) -> int:
        calls.append(n)
        return n

    with redrive.run(journal, "r") as run:  # no JournalWriteError: every write is durable
        run.finish([refund(n) for n in range(6)])
    journal._settle()  # the threshold checkpoint runs in the background
    assert calls == list(range(6)) and attempts
    assert journal.get_run("r").status == "succeeded"  # type: ignore[union-attr]
    with pytest.raises(JournalWriteError, match="Nothing is lost") as caught:
        journal.close()
    assert ".rdlog" in str(caught.value) and "reopen" in str(caught.value)
    monkeypatch.undo()  # space freed
    # the run is over half the threshold, so close moves it (a small ended run stays)
    reopened = DuckDBJournal(path, checkpoint_frames=3)
    assert reopened.get_run("r").status == "succeeded"  # type: ignore[union-attr]
    with redrive.run(reopened, "r") as again:  # replays without running a body
        again.finish([refund(n) for n in range(6)])
    assert calls == list(range(6))
    reopened.close()  # the bulk move succeeds now: the log is emptied
    assert Path(path + ".rdlog").stat().st_size == START


def test_an_interrupted_run_resumes_after_space_is_freed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies while the disk is full resumes from its log; no body repeats."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=2)
    full_disk(journal, monkeypatch, "duckdb")
    calls: list[int] = []

    @redrive.tool
    def send(n: int) -> int:
        calls.append(n)
        return n

    def worker() -> None:  # dies (no exit of its run) after two steps
        redrive.run(journal, "r").__enter__()
        send(1)
        send(2)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    journal._settle()
    journal._log.close()  # type: ignore[union-attr]  # the process dies: no checkpoint
    journal._store.close()
    journal._release()
    monkeypatch.undo()
    reopened = DuckDBJournal(path)
    with redrive.run(reopened, "r") as run:
        run.finish([send(1), send(2), send(3)])
    assert calls == [1, 2, 3]
    reopened.close()
