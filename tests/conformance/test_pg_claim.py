"""Postgres: what one claim sends and writes (one statement, the run row's changed columns only)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from redrive.frames import GENESIS, Kind, make_frame
from redrive.storage import RunRecord

pytestmark = pytest.mark.postgres


def _started(journal: Any, run_id: str) -> tuple[int, str]:
    """Create ``run_id`` and take its lease; return (epoch, the first frame's chain)."""
    first = make_frame(
        run_id=run_id, seq=0, kind=Kind.RUN_START, name="run", payload={}, prev_chain=GENESIS
    )
    now = time.time()
    journal.create_run(RunRecord(run_id=run_id, created_at=now, updated_at=now), first)
    return journal.acquire_lease(run_id, "w1", 60.0), first.chain


def test_a_claim_is_one_statement_that_sets_only_the_seq_chain_and_time(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim is one statement, returns no rows, and leaves status, output and error unwritten.

    Its ``UPDATE`` of the run row sets next_seq, last_chain and updated_at (the
    fence, seq, chain and status are compared, not rewritten); its command is
    the ``INSERT`` of the frame, whose row count says it wrote.
    """
    import psycopg

    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(pg_url, schema=pg_schema, max_size=1)
    epoch, prev = _started(journal, "claim")
    sent: list[tuple[str, bool]] = []
    real = psycopg.Connection.execute

    def spy(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        cur = real(self, query, params, **kwargs)
        sent.append((str(query), cur.description is not None))
        return cur

    monkeypatch.setattr(psycopg.Connection, "execute", spy)
    frame = make_frame(
        run_id="claim",
        seq=1,
        kind=Kind.TOOL_START,
        name="charge",
        payload={"n": 1},
        prev_chain=prev,
        epoch=epoch,
    )
    journal.append("claim", [frame], expected_seq=1, epoch=epoch)
    monkeypatch.setattr(psycopg.Connection, "execute", real)
    assert len(sent) == 1, sent  # one round trip
    statement, returned_rows = sent[0]
    assert not returned_rows  # the row count answers; no result row travels back
    sets = re.search(r"UPDATE redrive_runs SET (.*?) WHERE", statement)
    assert sets is not None, statement
    assert sets.group(1) == "next_seq = %s, last_chain = %s, updated_at = %s"
    assert re.search(r"\)\s*INSERT INTO redrive_frames", statement), statement
    record = journal.get_run("claim")
    assert record is not None
    assert (record.next_seq, record.last_chain, record.status) == (2, frame.chain, "running")
    journal.close()


def test_a_relaxed_write_turns_off_synchronous_commit_for_its_own_transaction(
    pg_url: str, pg_schema: str
) -> None:
    """The statement of a relaxed write (``sync=False``) sets synchronous_commit off, locally."""
    import psycopg

    from redrive.storage._pgstatements import _append_statement, _frame_arrays
    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(pg_url, schema=pg_schema)
    epoch, prev = _started(journal, "relaxed")
    known = journal.get_run("relaxed")
    assert known is not None
    frame = make_frame(
        run_id="relaxed",
        seq=1,
        kind=Kind.TOOL_START,
        name="charge",
        payload={},
        prev_chain=prev,
        epoch=epoch,
    )
    relaxed = _append_statement(1, False, False, False)  # one frame, a lease, sync=False
    params = [2, frame.chain, time.time(), "relaxed", 1, prev, known.status, epoch]
    with psycopg.connect(pg_url, options=f"-c search_path={pg_schema}") as conn:
        before = conn.execute("SHOW synchronous_commit").fetchone()
        conn.rollback()
        cur = conn.execute(relaxed, params + _frame_arrays([frame]))
        assert cur.rowcount == 1
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
        conn.rollback()
        assert conn.execute("SHOW synchronous_commit").fetchone() == before
        # a stale row (another seq) matches nothing and writes nothing
        stale = [2, frame.chain, time.time(), "relaxed", 0, prev, known.status, epoch]
        cur = conn.execute(relaxed, stale + _frame_arrays([frame]))
        assert cur.rowcount == 0
        conn.rollback()
    journal.close()
