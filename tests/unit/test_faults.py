"""Faults during a run: disk full, read-only journal, truncated export, dropped Postgres connection.

What is simulated, honestly: "disk full" is an ``OSError(ENOSPC)`` injected
into the DuckDB journal's write transaction (no tiny filesystem is mounted);
the read-only journal is a real DuckDB file reopened ``read_only=True``; the
truncated file is a real ``.rdj`` export cut at every byte offset of its last
frame record; the dropped connection is a real ``pg_terminate_backend`` from
another connection while an append is in its transaction.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive.errors import JournalCorruptError
from redrive.storage import verify_frames
from redrive.storage.duckdb import DuckDBJournal

EFFECTS: list[str] = []


@redrive.tool(restart_safe=False)
def send_invoice(customer: str) -> str:
    EFFECTS.append(customer)
    return f"inv-{customer}"


@redrive.model(name="model:stub")  # type: ignore[untyped-decorator]
def ask(prompt: str) -> str:
    return f"answer to {prompt}"


def loop(customers: list[str]) -> list[str]:
    out = []
    for c in customers:
        out.append(ask(f"bill {c}?"))
        out.append(send_invoice(c))
    return out


@pytest.fixture(autouse=True)
def _clear() -> None:
    EFFECTS.clear()


def _frames(journal: Any, run_id: str) -> list[Any]:
    return list(journal.frames(run_id))


def test_disk_full_stops_before_the_tool_body_and_keeps_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write failing with ENOSPC is a JournalWriteError; no unclaimed body runs; nothing lost."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path)
    real = DuckDBJournal.append
    disk = {"full": False}

    def full(self: DuckDBJournal, run_id: str, frames: Any, **kwargs: Any) -> None:
        # the disk fills up at the claim of the third invoice; every write after fails too
        if any(f.kind == "tool_start" and f.data()["args"] == {"customer": "c"} for f in frames):
            disk["full"] = True
        if disk["full"]:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(self, run_id, frames, **kwargs)

    monkeypatch.setattr(DuckDBJournal, "append", full)
    with (
        pytest.raises(redrive.JournalWriteError, match="No space left") as info,
        redrive.run(journal, "job:1") as failed,
    ):
        loop(["a", "b", "c"])
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert failed.status == "running"  # a journal failure leaves the run resumable
    assert EFFECTS == ["a", "b"]  # c's claim was never durable, so its body never ran
    monkeypatch.setattr(DuckDBJournal, "append", real)
    journal.close()
    journal = DuckDBJournal(path)  # read back from the file
    kept = _frames(journal, "job:1")
    assert verify_frames(iter(kept), source=path) == len(kept)
    assert [f.kind for f in kept].count("tool_done") == 2
    with redrive.run(journal, "job:1") as run:  # space is back: resume finishes the run
        out = loop(["a", "b", "c"])
    # the model call for "c" was journaled before the disk filled: it is not paid again
    assert out[-1] == "inv-c" and EFFECTS == ["a", "b", "c"] and run.replayed_steps == 5
    journal.close()


def test_read_only_journal_replays_but_refuses_live_steps_clearly(tmp_path: Path) -> None:
    """A read-only DuckDB journal replays, then a live step fails clearly and loses nothing."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path)
    with pytest.raises(ConnectionError), redrive.run(journal, "job:2"):
        loop(["a"])
        raise ConnectionError("worker lost its network")  # resumable stop
    before = _frames(journal, "job:2")
    journal.close()
    ro = DuckDBJournal(path, read_only=True)
    with pytest.raises(Exception, match=r"(?i)read.only") as info, redrive.run(ro, "job:2"):
        loop(["a", "b"])
    assert not isinstance(info.value, AssertionError)
    assert EFFECTS == ["a"]  # b's claim could not be written, so b did not run
    ro.close()
    journal = DuckDBJournal(path)
    assert [f.chain for f in _frames(journal, "job:2")] == [f.chain for f in before]
    journal.close()


def test_rdj_truncated_at_every_byte_of_its_last_frame_is_corrupt_not_lost(tmp_path: Path) -> None:
    """An export cut inside its last frame raises JournalCorruptError after the earlier frames."""
    from redrive.storage.rdj import RdjJournal, export_run

    journal = redrive.open_journal(":memory:")
    with redrive.run(journal, "job:3") as run:
        run.finish(loop(["a", "b"]))
    frames = _frames(journal, "job:3")
    path = tmp_path / "job.rdj"
    export_run(journal, "job:3", path)
    data = path.read_bytes()
    # the last frame's record starts where its payload's bytes begin, minus the record head
    last = frames[-1]
    start = data.rfind(last.chain.encode()) - len(last.payload) - 64
    end_record = data.rfind(b"E")
    assert 0 < start < end_record
    cut_path = tmp_path / "cut.rdj"
    for offset in range(start, len(data)):
        cut_path.write_bytes(data[:offset])
        seen: list[Any] = []
        with pytest.raises(JournalCorruptError) as info:
            cut = RdjJournal(str(cut_path))
            try:
                seen.extend(cut.frames("job:3"))
            finally:
                cut.close()
        assert "truncat" in str(info.value).lower() or "end" in str(info.value).lower()
        assert [f.chain for f in seen] == [f.chain for f in frames[: len(seen)]]


PG_URL = os.environ.get("REDRIVE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh Postgres schema, dropped afterwards (fails under CI when the server is down)."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: {exc}")
    schema = f"faults_{uuid.uuid4().hex[:10]}"
    try:
        yield schema
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()


@pytest.mark.postgres
def test_postgres_connection_dropped_mid_append(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend killed inside an append raises, commits nothing partial, loses nothing."""
    import psycopg

    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(PG_URL, schema=pg_schema, min_size=1, max_size=1)
    real = PostgresJournal._append_if  # the one statement of a claim
    state = {"armed": False}

    def drop(self: PostgresJournal, *args: Any, **kwargs: Any) -> bool:
        if state["armed"]:
            state["armed"] = False
            with self._statement() as cur:  # max_size=1: the connection the claim gets
                cur.execute("SELECT pg_backend_pid()")
                pid = cur.fetchone()[0]
            with psycopg.connect(PG_URL, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", [pid])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PostgresJournal, "_append_if", drop)
    # a journal error leaves the run resumable (JournalWriteError, caused by the driver's)
    with pytest.raises(redrive.JournalWriteError) as info, redrive.run(journal, "job:4"):
        loop(["a"])
        state["armed"] = True  # the next append (b's claim) loses its connection
        loop(["b"])
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
    assert EFFECTS == ["a"]
    monkeypatch.setattr(PostgresJournal, "_append_if", real)
    with contextlib.closing(PostgresJournal(PG_URL, schema=pg_schema)) as fresh:
        kept = _frames(fresh, "job:4")
        assert verify_frames(iter(kept), source="pg") == len(kept)
        assert [f.kind for f in kept].count("tool_done") == 1
        record = fresh.get_run("job:4")
        assert record is not None and record.next_seq == len(kept)
        assert record.status == "running"
        # the claim whose write failed is dropped, not written later: b did not run, so a
        # resume runs it once
        with redrive.run(fresh, "job:4") as resumed:
            out = loop(["a", "b"])
        assert out[-1] == "inv-b" and resumed.live_steps == 1
    assert EFFECTS == ["a", "b"]
    journal.close()
