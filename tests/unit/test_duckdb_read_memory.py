"""Reading a long run from a DuckDB journal keeps memory bounded (issue 14, item 5).

No timings here: the figures live in ``benchmarks/replay_scale.py``. These
tests check the mechanisms: DuckDB's block cache is emptied as a reader pages
a run in (it otherwise keeps every block read until 80% of RAM), each page
query reads only the row groups holding its seq range, and a replay holds a
bounded number of decoded frames however long the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

import redrive
from redrive.frames import GENESIS, Frame, Kind, make_frame
from redrive.storage import RunRecord, _duckdb_store
from redrive.storage import duckdb as duckdb_storage
from redrive.storage.duckdb import DuckDBJournal


def _fill(path: Path, run_id: str, frames: int, payload_sql: str) -> None:
    """Put ``frames`` rows of one run straight into the journal's table (fast, no log)."""
    DuckDBJournal(str(path)).close()  # the schema
    con = duckdb.connect(str(path))
    try:
        con.execute(
            "INSERT INTO redrive_frames "
            "(run_id, seq, kind, name, key, payload, chain, written_at, epoch) "
            f"SELECT ?, i, 'note', 'n', 'k', {payload_sql}, 'c', 0.0, 0 FROM range(?) t(i)",
            [run_id, frames],
        )
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _cached_table_bytes(journal: DuckDBJournal) -> int:
    row = journal._store._con.execute(
        "SELECT memory_usage_bytes FROM duckdb_memory() WHERE tag = 'BASE_TABLE'"
    ).fetchone()
    return int(row[0]) if row else 0


def test_paging_a_long_run_in_keeps_duckdb_block_cache_bounded(tmp_path: Path) -> None:
    # 12,000 frames of 1.5 KB that compress poorly: some 10 MB of table blocks on disk
    path = tmp_path / "long.duckdb"
    payload = "(" + " || ".join(f"md5(i::VARCHAR || '{n}')" for n in range(48)) + ")::BLOB"
    _fill(path, "long", 12_000, payload)
    assert os.path.getsize(path) > 8 << 20
    journal = DuckDBJournal(str(path))
    try:
        limit = journal._store._con.execute("SELECT current_setting('memory_limit')").fetchone()
        count = sum(1 for _ in journal.frames("long"))
        assert count == 12_000
        # before the fix, DuckDB held every block read: the whole table (~10 MB)
        assert _cached_table_bytes(journal) < 4 << 20
        # the memory limit the eviction lowered briefly is back to what it was
        after = journal._store._con.execute("SELECT current_setting('memory_limit')").fetchone()
        assert after == limit
        assert journal._store._con.execute("SELECT current_setting('threads')").fetchone() == (1,)
    finally:
        journal.close()


def test_page_query_scans_only_the_row_groups_of_its_seq_range(tmp_path: Path) -> None:
    # 400,000 small frames: four of DuckDB's row groups (122,880 rows each)
    path = tmp_path / "wide.duckdb"
    total = 400_000
    _fill(path, "wide", total, "'x'::BLOB")
    profile = tmp_path / "profile.json"
    con = duckdb.connect(str(path), read_only=True)
    try:
        con.execute("PRAGMA enable_profiling = 'json'")
        con.execute(f"PRAGMA profiling_output = '{profile}'")
        rows = con.execute(duckdb_storage._PAGE_SQL, ["wide", 300_000, 301_000]).fetchall()
    finally:
        con.close()
    assert [r[1] for r in rows] == list(range(300_000, 301_000))
    scanned = json.loads(profile.read_text())["query"]["total_rows_scanned"]
    # a page reads the row group(s) its seq range falls in, not the whole run
    assert 1000 <= scanned <= 2 * 122_880 < total


@redrive.tool(read_only=True)
def _item(n: int) -> str:
    return "r" * 500


@redrive.model(name="model:memory")
def _ask(n: int) -> dict[str, object]:
    return {"text": "m" * 400, "usage": {"input_tokens": 7, "output_tokens": 3}}


def _tools(n: int) -> None:
    _item(n)


def _models_and_tools(n: int) -> None:
    # a model step and a tool step by turns; the model steps carry usage, which the run's
    # spend adds up as they replay (the spend held every replayed model step, frames and
    # all: a 40,002-frame replay grew the process by 165 MB)
    if n % 2:
        _ask(n)
    else:
        _item(n)


def _values(n: int) -> None:
    if n % 2:
        redrive.uuid4()
    else:
        _ask(n)


@pytest.mark.parametrize("step", [_tools, _models_and_tools, _values], ids=lambda f: f.__name__)
def test_replaying_a_long_run_keeps_few_decoded_frames_alive(
    tmp_path: Path, step: Callable[[int], None]
) -> None:
    steps = 3000
    path = str(tmp_path / "replay.duckdb")
    journal = DuckDBJournal(path)
    with redrive.run(journal, "long"):
        for n in range(steps):
            step(n)
    journal.close()

    alive: list[weakref.ref[Frame]] = []

    class Watching(DuckDBJournal):
        def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
            for frame in super().frames(run_id, start=start):
                alive.append(weakref.ref(frame))
                yield frame

    most = 0
    watching = Watching(path)
    try:
        with redrive.run(watching, "long") as run:
            for n in range(steps):
                step(n)
                if n % 100 == 99:
                    most = max(most, sum(1 for r in alive if r() is not None))
        assert run.live_steps == 0
    finally:
        watching.close()
    assert len(alive) >= steps
    # one page of frames (the reader's current page) and a few steps' worth, not the run
    assert most <= duckdb_storage._PAGE + 50, most


def test_a_long_run_keeps_issue_counts_only_for_parents_a_flow_stands_at() -> None:
    # each completed step is a parent steps can be issued from; once no flow stands at
    # it, its counts go, so recording or replaying N steps does not keep N entries
    from redrive.storage import MemoryJournal

    journal = MemoryJournal()
    steps = 2000
    for _ in range(2):  # record, then replay
        with redrive.run(journal, "issued") as run:
            most = 0
            for n in range(steps):
                _item(n)
                most = max(most, run._flows.parents_held)
        assert most <= 3, most
    assert run.replayed_steps == steps


class _Spy:
    """A DuckDB connection that records the statements run through it."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.statements: list[str] = []

    def execute(self, sql: str, *args: object) -> duckdb.DuckDBPyConnection:
        self.statements.append(sql)
        return self.con.execute(sql, *args)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self.con.cursor()

    def close(self) -> None:
        self.con.close()


def test_no_eviction_lowers_the_memory_limit_under_a_background_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a background checkpoint inserts, a reader's eviction waits (it could fail it)."""
    store = duckdb_storage._Store(str(tmp_path / "j.duckdb"), read_only=False)
    inserting, release = threading.Event(), threading.Event()
    real_insert = _duckdb_store._insert

    def held_insert(cur: object, *rest: object) -> None:
        inserting.set()
        assert release.wait(10)
        real_insert(cur, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(_duckdb_store, "_insert", held_insert)  # where _Store.ingest_apart calls it
    mover = threading.Thread(target=store.ingest_apart, args=([], [], []))
    mover.start()
    try:
        assert inserting.wait(10)
        spy = _Spy(store._con)
        store._con = spy  # type: ignore[assignment]
        store._drop_cached_blocks()
        assert not [s for s in spy.statements if "memory_limit" in s]
    finally:
        release.set()
        mover.join(10)
    store._drop_cached_blocks()  # the move is over: evicting works again
    assert [s for s in spy.statements if s.startswith("SET memory_limit")]
    store.close()


@pytest.mark.parametrize("background", [False, True])
def test_a_checkpoint_leaves_duckdb_block_cache_bounded(tmp_path: Path, background: bool) -> None:
    """The table blocks a checkpoint writes are dropped from DuckDB's cache once on disk.

    Outside tester (issue 14): recording a 20,000-step run grew the worker by
    about 100 MiB, the blocks every checkpoint had written staying cached.
    """
    journal = DuckDBJournal(str(tmp_path / "rec.duckdb"), checkpoint_frames=400)
    try:
        frames: list[Frame] = []
        chain = GENESIS
        for seq in range(6_000):  # ~9 MB of payload that compresses poorly
            text = "".join(hashlib.md5(f"{seq}:{n}".encode()).hexdigest() for n in range(48))
            frame = make_frame(
                run_id="rec",
                seq=seq,
                kind=Kind.RUN_START if seq == 0 else Kind.NOTE,
                name="run" if seq == 0 else "note",
                payload={"i": seq, "text": text},
                prev_chain=chain,
            )
            chain = frame.chain
            frames.append(frame)
        now = frames[0].at
        journal.create_run(
            RunRecord(run_id="rec", input_fp="f" * 32, created_at=now, updated_at=now), frames[0]
        )
        # DuckDB checkpoints its own WAL into the file every 16 MB written (reading
        # and caching the table's blocks); at 1 MB, 9 MB of frames do it several times
        journal._store._con.execute("SET checkpoint_threshold = '1MB'")
        for start in range(1, 6_000, 500):  # twelve checkpoints, as a long recording makes
            journal.append("rec", frames[start : start + 500], expected_seq=start)
            if background:
                journal._settle()  # the threshold checkpoint ran on its own thread
            else:
                journal.checkpoint()
        assert _cached_table_bytes(journal) < 4 << 20
        assert sum(1 for _ in journal.frames("rec")) == 6_000
    finally:
        journal.close()
