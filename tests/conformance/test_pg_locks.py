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


def test_a_worker_frozen_inside_a_claim_does_not_block_takeover(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12 #14: a worker frozen mid-claim holds no row lock, so takeover does not wait.

    Worker A freezes inside its append, after it checked the run row and before its
    write (on a journal that locks the row with ``SELECT ... FOR UPDATE`` first, the
    lock is held right there, across a client round trip). Worker B takes the lapsed
    lease over at once; when A wakes up its write is fenced off.
    """
    import threading

    from redrive.storage import _sql
    from redrive.storage import postgres as pg
    from redrive.storage._base import appended as real_appended

    from .test_journal import _frames, _start

    a = pg.PostgresJournal(pg_url, schema=pg_schema, lock_timeout=0.5)
    b = pg.PostgresJournal(pg_url, schema=pg_schema, lock_timeout=0.5)
    first = _start(a, "claim")
    epoch1 = a.acquire_lease("claim", "w1", 60)
    a.renew_lease("claim", "w1", epoch1, 0)  # the lease lapses now: B may take over
    frozen, wake = threading.Event(), threading.Event()
    outcome: dict[str, BaseException | None] = {}

    def freezing(*args: object, **kwargs: object) -> object:
        if threading.current_thread().name == "worker-a" and not frozen.is_set():
            frozen.set()
            wake.wait(30)
        return real_appended(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_sql, "appended", freezing)
    monkeypatch.setattr(pg, "appended", freezing, raising=False)

    def worker_a() -> None:
        try:
            a.append(
                "claim", _frames("claim", 1, first.chain, 1, "a"), expected_seq=1, epoch=epoch1
            )
            outcome["a"] = None
        except BaseException as exc:
            outcome["a"] = exc

    thread = threading.Thread(target=worker_a, name="worker-a")
    thread.start()
    try:
        assert frozen.wait(30)
        epoch2 = b.acquire_lease("claim", "w2", 60)  # main: RunBusyError after lock_timeout
        assert epoch2 == epoch1 + 1
        b.append("claim", _frames("claim", 1, first.chain, 1, "b"), expected_seq=1, epoch=epoch2)
    finally:
        wake.set()
        thread.join(30)
    assert isinstance(outcome["a"], redrive.LeaseLostError)
    record = b.get_run("claim")
    assert record is not None and record.next_seq == 2 and record.lease_owner == "w2"
    assert [f.payload for f in b.frames("claim", start=1)] == [
        f.payload for f in _frames("claim", 1, first.chain, 1, "b")
    ]
    a.close()
    b.close()
