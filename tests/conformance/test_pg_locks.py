"""Postgres: a worker frozen inside a journal transaction cannot wedge the others."""

from __future__ import annotations

import time

import pytest

import redrive

pytestmark = pytest.mark.postgres


def test_a_frozen_row_lock_gives_run_busy_not_a_hang(pg_url: str, pg_schema: str) -> None:
    """A run row locked by a stuck transaction makes a lease attempt fail in bounded time."""
    import psycopg

    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(pg_url, schema=pg_schema, lock_timeout=0.5)
    with redrive.run(journal, "frozen"):
        pass
    stuck = psycopg.connect(pg_url, options=f"-c search_path={pg_schema}")
    try:
        stuck.execute("SELECT * FROM redrive_runs WHERE run_id = %s FOR UPDATE", ["frozen"])
        started = time.monotonic()
        with pytest.raises(redrive.RunBusyError, match="lock_timeout"):
            journal.acquire_lease("frozen", "worker-b", 10.0)
        assert time.monotonic() - started < 30.0  # liveness (no hang), not a speed target
    finally:
        stuck.rollback()
        stuck.close()
    assert journal.acquire_lease("frozen", "worker-b", 10.0) >= 1
    journal.close()
