"""The DuckDB journal keeps unfinished runs in its log and opens its tables in the background."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redrive.errors import JournalCorruptError, JournalFormatError, JournalLockedError
from redrive.frames import GENESIS, Frame, Kind, make_frame
from redrive.storage import RunRecord, RunUpdate, _duckdb_held
from redrive.storage._framelog import START
from redrive.storage.duckdb import DuckDBJournal


def _frame(run_id: str, seq: int, prev: str) -> Frame:
    kind = Kind.RUN_START if seq == 0 else Kind.NOTE
    return make_frame(
        run_id=run_id,
        seq=seq,
        kind=kind,
        name="run" if seq == 0 else "note",
        payload={"i": seq},
        prev_chain=prev,
    )


def crash(journal: DuckDBJournal) -> None:
    """Drop a journal as a killed process would: no checkpoint, the file released.

    A background checkpoint in flight ends first (a kill during one is
    tests/crash/test_log_rewrite_crash.py's).
    """
    journal._settle()
    assert journal._log is not None
    journal._log.close()
    with contextlib.suppress(Exception):
        journal._close_store()
    journal._release()


class Model:
    """What was acknowledged: each run's frames (by chain) and status."""

    def __init__(self) -> None:
        self.chains: dict[str, list[str]] = {}
        self.status: dict[str, str] = {}

    def check(self, journal: DuckDBJournal) -> None:
        for run_id, chains in self.chains.items():
            assert [f.chain for f in journal.frames(run_id)] == chains, run_id
            row = journal.get_run(run_id)
            assert row is not None and row.status == self.status[run_id], run_id
            assert row.next_seq == len(chains)
        assert {r.run_id: r.status for r in journal.runs()} == self.status


_OPS = st.one_of(
    st.tuples(st.just("start"), st.integers(0, 5)),
    st.tuples(st.just("append"), st.integers(0, 5), st.integers(1, 4)),
    st.tuples(st.just("end"), st.integers(0, 5)),
    st.tuples(st.sampled_from(["close", "crash", "checkpoint", "check"])),
)


@settings(max_examples=60, deadline=None)
@given(threshold=st.integers(3, 10), ops=st.lists(_OPS, max_size=40))
def test_any_interleaving_reads_back_every_acknowledged_frame(
    tmp_path_factory: pytest.TempPathFactory, threshold: int, ops: list[tuple[Any, ...]]
) -> None:
    """Runs that start, append and end, with checkpoints, closes and crashes between.

    Every acknowledged frame and row reads back from a reopened journal,
    whether it sits in the tables, the log, or (a run partly moved) both.
    """
    path = str(tmp_path_factory.mktemp("lazy") / "runs.duckdb")
    model = Model()
    journal = DuckDBJournal(path, checkpoint_frames=threshold)
    for op in ops:
        name = op[0]
        if name in ("start", "append", "end"):
            run_id = f"run-{op[1]}"
            chains = model.chains.get(run_id)
            if name == "start":
                if chains is not None:
                    continue
                first = _frame(run_id, 0, GENESIS)
                now = time.time()
                row = RunRecord(run_id=run_id, input_fp="f" * 32, created_at=now, updated_at=now)
                assert journal.create_run(row, first)
                model.chains[run_id] = [first.chain]
                model.status[run_id] = "running"
                continue
            if chains is None or model.status[run_id] != "running":
                continue
            count = op[2] if name == "append" else 1
            frames, prev = [], chains[-1]
            for seq in range(len(chains), len(chains) + count):
                frames.append(_frame(run_id, seq, prev))
                prev = frames[-1].chain
            update = RunUpdate(status="succeeded") if name == "end" else None
            journal.append(run_id, frames, expected_seq=len(chains), update=update)
            chains.extend(f.chain for f in frames)
            if name == "end":
                model.status[run_id] = "succeeded"
        elif name == "check":
            model.check(journal)
        elif name == "checkpoint":
            journal.checkpoint()
        else:
            if name == "close":
                journal.close()
            else:
                crash(journal)
            journal = DuckDBJournal(path, checkpoint_frames=threshold)
            model.check(journal)
    journal.close()
    reopened = DuckDBJournal(path, checkpoint_frames=threshold)
    try:
        model.check(reopened)
    finally:
        reopened.close()


def _unfinished(path: str, run_id: str = "live", steps: int = 3) -> list[str]:
    """Write a run that stays running, close the journal; return the run's chains."""
    journal = DuckDBJournal(path)
    prev, chains = GENESIS, []
    first = _frame(run_id, 0, prev)
    now = time.time()
    journal.create_run(
        RunRecord(run_id=run_id, input_fp="f" * 32, created_at=now, updated_at=now), first
    )
    chains.append(first.chain)
    frames = []
    for seq in range(1, steps):
        frames.append(_frame(run_id, seq, chains[-1] if not frames else frames[-1].chain))
    journal.append(run_id, frames, expected_seq=1)
    chains.extend(f.chain for f in frames)
    journal.close()
    return chains


def test_closing_keeps_unfinished_runs_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() keeps unfinished and recently ended runs in the log; older ended ones move."""
    path = str(tmp_path / "runs.duckdb")
    chains = _unfinished(path)
    assert os.path.getsize(path + ".rdlog") > START
    journal = DuckDBJournal(path)
    journal.append("live", [], expected_seq=3, update=RunUpdate(status="succeeded"))
    journal.close()
    assert os.path.getsize(path + ".rdlog") > START  # ended just now: kept
    monkeypatch.setattr(_duckdb_held, "KEEP_ENDED_AGE", -1.0)  # every ended run is old now
    again = DuckDBJournal(path)
    assert [f.chain for f in again.frames("live")] == chains
    again.close()
    assert os.path.getsize(path + ".rdlog") == START  # moved into the tables
    last = DuckDBJournal(path)
    assert [f.chain for f in last.frames("live")] == chains
    last.close()


def test_resuming_a_run_held_in_the_log_does_not_wait_for_the_tables(tmp_path: Path) -> None:
    """Reading a run wholly in the log never opens the tables; its first write waits for them."""
    path = str(tmp_path / "runs.duckdb")
    chains = _unfinished(path)
    journal = DuckDBJournal(path)
    try:
        assert journal._opening is not None  # opened in the background
        row = journal.get_run("live")
        assert row is not None and row.next_seq == 3
        assert [f.chain for f in journal.frames("live")] == chains
        assert journal.decision("live", "ok") is None
        assert journal._opened is None  # nobody asked for the tables
        # a write waits for the file (its format must be known before anything is
        # acknowledged); by the first live step the background open has mostly run
        journal.append("live", [_frame("live", 3, chains[-1])], expected_seq=3)
        assert journal._opened is not None
        assert [r.run_id for r in journal.runs()] == ["live"]
        assert journal._opened is not None
    finally:
        journal.close()


def test_a_huge_unfinished_run_moves_into_the_tables(tmp_path: Path) -> None:
    """Unfinished runs over half the threshold are moved too (and read back from the tables)."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=10)
    first = _frame("big", 0, GENESIS)
    now = time.time()
    journal.create_run(
        RunRecord(run_id="big", input_fp="f" * 32, created_at=now, updated_at=now), first
    )
    frames, prev = [], first.chain
    for seq in range(1, 30):
        frames.append(_frame("big", seq, prev))
        prev = frames[-1].chain
    journal.append("big", frames, expected_seq=1)
    journal._settle()  # the threshold checkpoint runs in the background
    assert journal._overlay.held == 0  # moved, not kept
    assert len(list(journal.frames("big"))) == 30
    journal.close()


# -- errors of a background open -------------------------------------------------------


def _sync_error(path: str) -> BaseException:
    """The error a journal on ``path`` raises when its log is empty (a synchronous open)."""
    log = path + ".rdlog"
    saved = Path(log).read_bytes()
    os.remove(log)
    try:
        with pytest.raises((JournalFormatError, JournalLockedError)) as raised:
            DuckDBJournal(path)
        return raised.value
    finally:
        Path(log).write_bytes(saved)


def _lazy_error(path: str) -> BaseException:
    """Open with the log holding records: opening succeeds; the first use of the tables raises."""
    journal = DuckDBJournal(path)
    try:
        assert journal.get_run("live") is not None  # held in the log: no wait, no error
        with pytest.raises((JournalFormatError, JournalLockedError)) as raised:
            journal.runs()
        with pytest.raises(type(raised.value)) as again:  # every later use says the same
            journal.close()
        assert again.value.message == raised.value.message
        return raised.value
    finally:
        assert journal.closed


def test_a_file_of_another_schema_is_refused_at_first_use(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.duckdb")
    _unfinished(path)
    con = duckdb.connect(path)
    con.execute("UPDATE redrive_meta SET value = '99' WHERE key = 'schema'")
    con.close()
    lazy = _lazy_error(path)
    sync = _sync_error(path)
    assert type(lazy) is type(sync) is JournalFormatError
    assert str(lazy) == str(sync)
    assert "schema version 99" in str(lazy)


def test_a_file_locked_by_another_process_is_refused_at_first_use(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.duckdb")
    _unfinished(path)
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; con = duckdb.connect(sys.argv[1]); print('held', flush=True); "
            "sys.stdin.read()",
            path,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            lazy = _lazy_error(path)
            sync = _sync_error(path)
        finally:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait()
    assert type(lazy) is type(sync) is JournalLockedError
    assert str(lazy) == str(sync)
    assert "open for writing in another process" in str(lazy)


def test_a_newer_journal_gets_no_write_before_its_format_is_known(tmp_path: Path) -> None:
    """A write waits for the background open: a newer journal's run is read, never claimed.

    Outside tester (issue 14): with the tables' format unchecked, an older
    redrive resumed an unfinished run of a newer journal from the log and ran
    its side effects live before ``close()`` refused the file.
    """
    path = str(tmp_path / "runs.duckdb")
    chains = _unfinished(path)
    con = duckdb.connect(path)
    con.execute("UPDATE redrive_meta SET value = '99' WHERE key = 'schema'")
    con.close()
    journal = DuckDBJournal(path)
    assert [f.chain for f in journal.frames("live")] == chains  # reading needs no tables
    with pytest.raises(JournalFormatError, match="schema version 99"):
        journal.append("live", [_frame("live", 3, chains[-1])], expected_seq=3)
    with pytest.raises(JournalFormatError, match="schema version 99"):
        journal.close()
    assert journal.closed
    con = duckdb.connect(path)
    con.execute(f"UPDATE redrive_meta SET value = '{_schema()}' WHERE key = 'schema'")
    con.close()
    again = DuckDBJournal(path)
    assert [f.chain for f in again.frames("live")] == chains  # nothing was appended
    again.close()


def _schema() -> int:
    from redrive.storage._sql import SCHEMA_VERSION

    return SCHEMA_VERSION


def test_a_journal_dropped_without_close_does_not_keep_the_file_open(tmp_path: Path) -> None:
    """Dropping a lazily opened journal cancels (or closes) its background open."""
    import gc

    path = str(tmp_path / "runs.duckdb")
    _unfinished(path)
    journal = DuckDBJournal(path)
    opening = journal._opening
    assert opening is not None
    del journal
    gc.collect()
    assert opening._claimed and opening._done.is_set()
    if opening._store is not None:  # the timer fired first: the connection was closed
        with pytest.raises(duckdb.Error):
            opening._store._con.execute("SELECT 1")
    again = DuckDBJournal(path)
    assert len(list(again.frames("live"))) == 3
    again.close()


class _Stop(SystemExit):
    """An interruption (a deploy's SIGTERM handler): the run stays ``running``, as after a
    crash. (A retryable error would pause it, and resuming a paused run writes its status
    back to ``running`` when it opens, which opens the tables then.)"""


def _loop(calls: list[int], stop_at: int | None) -> Any:
    import redrive

    @redrive.tool(read_only=True)
    def step(n: int) -> int:
        if n == stop_at:
            raise _Stop(f"stop at {n}")
        calls.append(n)
        return n

    def loop() -> list[int]:
        return [step(n) for n in range(4)]

    return loop


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_run_resumes_from_the_log_without_the_tables(tmp_path: Path, face: str) -> None:
    """Interrupted, closed, reopened: the run replays from the log; the tables open only later."""
    import asyncio

    import redrive

    path = str(tmp_path / "runs.duckdb")
    calls: list[int] = []
    journal = DuckDBJournal(path)
    with pytest.raises(_Stop), redrive.run(journal, "r", input=1):
        _loop(calls, stop_at=2)()
    journal.close()
    assert calls == [0, 1]
    assert os.path.getsize(path + ".rdlog") > START  # the unfinished run stayed in the log

    reopened = DuckDBJournal(path)
    try:
        seen: list[bool] = []
        loop = _loop(calls, stop_at=None)

        def body() -> list[int]:
            seen.append(reopened._opened is None)
            return loop()

        if face == "sync":
            with redrive.run(reopened, "r", input=1) as run:
                out = run.finish(body())
        else:

            async def main() -> list[int]:
                async with redrive.run(reopened, "r", input=1) as run:
                    return run.finish(await asyncio.to_thread(body))

            out = asyncio.run(main())
        assert out == [0, 1, 2, 3]
        assert calls == [0, 1, 2, 3]  # 0 and 1 replayed, not run again
        assert seen == [True]  # opening and claiming the run needed no tables
    finally:
        reopened.close()
    final = DuckDBJournal(path)
    row = final.get_run("r")
    assert row is not None and row.status == "succeeded"
    final.close()


def test_the_write_crossing_the_threshold_does_not_wait_for_the_bulk_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bulk move runs in the background; writes and reads go on; nothing is lost."""
    import threading

    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=6)
    store = journal._store
    started, release = threading.Event(), threading.Event()
    ingest = store.ingest_apart

    def blocked(*args: Any) -> None:
        started.set()
        assert release.wait(30)
        ingest(*args)

    monkeypatch.setattr(store, "ingest_apart", blocked)
    first = _frame("big", 0, GENESIS)
    now = time.time()
    journal.create_run(
        RunRecord(run_id="big", input_fp="f" * 32, created_at=now, updated_at=now), first
    )
    chains = [first.chain]

    def grow(count: int) -> None:
        frames = []
        for seq in range(len(chains), len(chains) + count):
            frames.append(_frame("big", seq, frames[-1].chain if frames else chains[-1]))
        journal.append("big", frames, expected_seq=len(chains))
        chains.extend(f.chain for f in frames)

    grow(8)  # 9 frames held, over the threshold, over the budget of kept frames: moved
    assert started.wait(30)  # the move started, and this write returned before it ended
    assert journal._mover is not None and not release.is_set()
    grow(2)  # written while the move is in flight
    assert [f.chain for f in journal.frames("big")] == chains
    assert [r.run_id for r in journal.runs()] == ["big"]
    release.set()
    journal._settle()
    assert [f.seq for f in store.page("big", 0, 100)] == list(range(9))
    assert [f.seq for f in journal._overlay.frames["big"]] == [9, 10]  # kept the later ones
    assert [f.chain for f in journal.frames("big")] == chains
    crash(journal)
    reopened = DuckDBJournal(path, checkpoint_frames=6)
    try:
        assert [f.chain for f in reopened.frames("big")] == chains
        row = reopened.get_run("big")
        assert row is not None and row.next_seq == 11
    finally:
        reopened.close()
    again = DuckDBJournal(path)
    assert [f.chain for f in again.frames("big")] == chains
    again.close()


@pytest.mark.parametrize("log_holds_records", [False, True])
def test_a_file_that_is_not_duckdb_is_unreadable_before_any_write(
    tmp_path: Path, log_holds_records: bool
) -> None:
    """Not a DuckDB file: JournalCorruptError (unreadable) naming it, at open or first write."""
    path = str(tmp_path / "runs.duckdb")
    if log_holds_records:
        chains = _unfinished(path)
        os.unlink(path)
    with open(path, "wb") as fh:
        fh.write(b"this is not a database\n" * 400)
    if not log_holds_records:
        with pytest.raises(JournalCorruptError, match="is not a DuckDB database file"):
            DuckDBJournal(path)
        return
    journal = DuckDBJournal(path)
    assert [f.chain for f in journal.frames("live")] == chains
    with pytest.raises(JournalCorruptError, match="is not a DuckDB database file") as raised:
        journal.append("live", [_frame("live", 3, chains[-1])], expected_seq=3)
    assert raised.value.fields["source"] == os.path.abspath(path)
    assert raised.value.fields["reason"] == "unreadable"
    with pytest.raises(JournalCorruptError):
        journal.close()
