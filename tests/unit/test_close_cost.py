"""Closing a DuckDB journal with nothing to move touches neither the tables nor the log (issue 26).

A worker that resumes a run held in the log and stops before writing (a
serverless function, a cron job, a CLI) used to pay DuckDB's open and a log
rewrite on ``close()``; one that replays a finished run paid DuckDB's open
too. Close keeps unfinished runs, then recently ended ones, in the log
within half the threshold, and moves the rest into the tables; when that is
nothing, close cancels a DuckDB open that has not started and leaves the log
as it is.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redrive.frames import GENESIS, Frame, Kind, make_frame
from redrive.storage import RunRecord, RunUpdate, _duckdb_held, _duckdb_journal
from redrive.storage._framelog import FrameLog
from redrive.storage.duckdb import DuckDBJournal


def _frame(run_id: str, seq: int, prev: str) -> Frame:
    return make_frame(
        run_id=run_id,
        seq=seq,
        kind=Kind.RUN_START if seq == 0 else Kind.NOTE,
        name="run" if seq == 0 else "note",
        payload={"i": seq},
        prev_chain=prev,
    )


def _write_run(journal: DuckDBJournal, run_id: str, steps: int, *, ended: bool) -> list[str]:
    """Create a run of ``steps`` frames (ended or left running); return its chains."""
    first = _frame(run_id, 0, GENESIS)
    now = time.time()
    journal.create_run(
        RunRecord(run_id=run_id, input_fp="f" * 32, created_at=now, updated_at=now), first
    )
    frames: list[Frame] = []
    prev = first.chain
    for seq in range(1, steps):
        frames.append(_frame(run_id, seq, prev))
        prev = frames[-1].chain
    update = RunUpdate(status="succeeded") if ended else None
    journal.append(run_id, frames, expected_seq=1, update=update)
    return [first.chain] + [f.chain for f in frames]


def _crash(journal: DuckDBJournal) -> None:
    """Drop a journal as a killed process would: no checkpoint, the file released."""
    journal._settle()
    assert journal._log is not None
    journal._log.close()
    journal._close_store()
    journal._release()


def _log_identity(path: str) -> tuple[int, bytes]:
    """The log's inode and bytes up to its last record (not a writer's preallocated zeros)."""
    log = path + ".rdlog"
    reader = FrameLog(log, read_only=True)
    for _ in reader.entries():
        pass
    return os.stat(log).st_ino, Path(log).read_bytes()[: reader._end]


def test_closing_after_a_read_of_an_unfinished_run_opens_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resume-and-stop: close cancels the DuckDB open and does not rewrite the log."""
    path = str(tmp_path / "runs.duckdb")
    writer = DuckDBJournal(path)
    chains = _write_run(writer, "live", 4, ended=False)
    writer.close()
    before = _log_identity(path)
    monkeypatch.setattr(_duckdb_journal, "OPEN_DELAY", 60.0)  # no background open meanwhile
    journal = DuckDBJournal(path)
    opening = journal._opening
    assert opening is not None
    assert [f.chain for f in journal.frames("live")] == chains
    journal.close()
    assert opening._store is None and opening._error is None  # DuckDB was never opened
    assert _log_identity(path) == before  # same file, same bytes: no rewrite
    again = DuckDBJournal(path)
    assert [f.chain for f in again.frames("live")] == chains
    again.close()


def test_replaying_a_finished_run_held_in_the_log_opens_nothing(tmp_path: Path) -> None:
    """Replay-and-stop: a log holding only ended runs starts no DuckDB open at all."""
    path = str(tmp_path / "runs.duckdb")
    writer = DuckDBJournal(path)
    chains = _write_run(writer, "done", 4, ended=True)
    writer.close()
    before = _log_identity(path)
    journal = DuckDBJournal(path)
    opening = journal._opening
    assert opening is not None and not opening.started  # no background open is pending
    assert [f.chain for f in journal.frames("done")] == chains
    assert journal.get_run("done").status == "succeeded"  # type: ignore[union-attr]
    journal.close()
    assert opening._store is None and opening._error is None  # DuckDB was never opened
    assert _log_identity(path) == before  # same file, same bytes: no rewrite


def _kept(journal: DuckDBJournal, written: dict[str, tuple[list[str], int, bool]]) -> set[str]:
    """The runs the documented rule keeps in the log at close (a model of _kept_runs)."""
    budget, kept = journal.checkpoint_frames // 2, set()
    for run_id, (_, steps, _) in sorted(
        ((k, v) for k, v in written.items() if not v[2]), key=lambda kv: (kv[1][1], kv[0])
    ):
        if steps > budget:
            break  # smallest first: past the first too big, every bigger one moves
        budget -= steps
        kept.add(run_id)
    ended = sorted(
        (-journal.get_run(k).updated_at, k, v[1])  # type: ignore[union-attr]
        for k, v in written.items()
        if v[2]
    )
    for _, run_id, steps in ended[: _duckdb_held.KEEP_ENDED_RUNS]:
        if steps > budget:
            break  # newest first: the first that does not fit and every older one move
        budget -= steps
        kept.add(run_id)
    return kept


@settings(max_examples=15, deadline=None)
@given(
    runs=st.lists(
        st.tuples(st.integers(min_value=1, max_value=8), st.booleans()), min_size=1, max_size=4
    ),
    threshold=st.sampled_from([6, 40]),
    read_only_session=st.booleans(),
)
def test_close_moves_exactly_what_must_move(
    tmp_path_factory: pytest.TempPathFactory,
    runs: list[tuple[int, bool]],
    threshold: int,
    read_only_session: bool,
) -> None:
    """Close rewrites the log iff it holds a run the rule does not keep (see ``_kept``).

    Whatever it does, every acknowledged frame reads back after a reopen, and
    the runs it keeps in the log are exactly the ones the rule keeps.
    """
    path = str(tmp_path_factory.mktemp("close") / "runs.duckdb")
    # a huge threshold while writing: no threshold checkpoint moves anything first
    writer = DuckDBJournal(path, checkpoint_frames=10_000)
    written = {
        f"run-{i}": (_write_run(writer, f"run-{i}", steps, ended=ended), steps, ended)
        for i, (steps, ended) in enumerate(runs)
    }
    if read_only_session:  # a crashed writer leaves its records in the log; a reader follows
        _crash(writer)
        journal = DuckDBJournal(path, checkpoint_frames=threshold)
        for run_id, (chains, _, _) in written.items():
            assert [f.chain for f in journal.frames(run_id)] == chains
    else:
        journal = writer
        journal.checkpoint_frames = threshold
    kept = _kept(journal, written)
    before = _log_identity(path)
    journal.close()
    assert (_log_identity(path) != before) == (kept != set(written))
    reopened = DuckDBJournal(path, checkpoint_frames=threshold)
    try:
        assert set(reopened._overlay.runs) == kept
        for run_id, (chains, _, _) in written.items():
            assert [f.chain for f in reopened.frames(run_id)] == chains
    finally:
        reopened.close()
