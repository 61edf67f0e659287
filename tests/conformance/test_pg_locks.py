"""Postgres: a worker frozen inside a journal transaction cannot wedge the others."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
        # the lock wait ended by lock_timeout (named in the error), not by the holder
        with pytest.raises(redrive.RunBusyError, match="lock_timeout"):
            journal.acquire_lease("frozen", "worker-b", 10.0)
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


# -- the kind: claims decided on a remembered row agree with a journal that reads it -----

_OPS = st.lists(
    st.tuples(
        st.integers(0, 1),  # which of two journal objects (each remembers its own rows)
        st.sampled_from(["append", "append-unleased", "lease", "lapse", "release", "cancel"]),
        st.integers(-1, 1),  # seq offset of an append; epoch offset of a fenced one
    ),
    min_size=1,
    max_size=12,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_one_statement_claims_agree_with_the_memory_journal(
    pg_url: str, pg_schema: str, ops: list[tuple[int, str, int]]
) -> None:
    """Two Postgres journal objects with stale remembered rows decide every write as memory does.

    Each object answers appends from the run row it last saw, so after the other object
    wrote, its row is stale: the one-statement claim must then match nothing and decide
    on a fresh read. Same outcome (the error class, or success) and same final row as
    :class:`~redrive.storage.MemoryJournal` doing the same operations.
    """
    import uuid

    import attrs

    from redrive.frames import GENESIS
    from redrive.storage import MemoryJournal
    from redrive.storage.postgres import PostgresJournal

    from .test_journal import _frames, _start

    run_id = f"kind-{uuid.uuid4().hex[:8]}"
    pgs = [PostgresJournal(pg_url, schema=pg_schema, max_size=1) for _ in range(2)]
    memory = MemoryJournal()
    try:
        first = _start(memory, run_id)
        created = memory.get_run(run_id)
        assert created is not None
        assert pgs[0].create_run(attrs.evolve(created, next_seq=0, last_chain=GENESIS), first)
        chain = {"prev": first.chain, "seq": 1, "epoch": 0}

        def apply(journal: Any, who: int, op: str, offset: int, frames: list[Any]) -> str:
            owner = f"w{who}"
            try:
                if op.startswith("append"):
                    seq = frames[0].seq
                    epoch = None if op == "append-unleased" else int(chain["epoch"]) + offset
                    journal.append(run_id, frames, expected_seq=seq, epoch=epoch)
                    return "ok:" + frames[0].chain
                if op == "lease":
                    return f"ok:{journal.acquire_lease(run_id, owner, 60)}"
                if op == "lapse":
                    journal.renew_lease(run_id, owner, int(chain["epoch"]), 0)
                elif op == "release":
                    journal.release_lease(run_id, owner, int(chain["epoch"]))
                else:
                    journal.cancel(run_id, reason="test", by=owner)
                return "ok"
            except Exception as exc:
                return type(exc).__name__

        for n, (who, op, offset) in enumerate(ops):
            seq = int(chain["seq"]) + offset
            frames = _frames(run_id, seq, str(chain["prev"]), 1, f"{who}-{n}")  # once: same chain
            got = apply(pgs[who], who, op, offset, frames)
            want = apply(memory, who, op, offset, frames)
            assert got == want, (n, who, op, offset)
            if want.startswith("ok:") and op.startswith("append"):
                chain["prev"], chain["seq"] = want[3:], int(chain["seq"]) + offset + 1
            elif want.startswith("ok:") and op == "lease":
                chain["epoch"] = int(want[3:])
        ours, theirs = pgs[0].get_run(run_id), memory.get_run(run_id)
        assert ours is not None and theirs is not None
        fields = ("status", "next_seq", "lease_owner", "lease_epoch", "error")
        assert [getattr(ours, f) for f in fields] == [getattr(theirs, f) for f in fields]

        def kept(journal: Any) -> list[tuple[int, str, str]]:  # a cancel's frame has its own time
            return [
                (f.seq, f.kind, "" if f.kind == "run_end" else f.chain)
                for f in journal.frames(run_id)
            ]

        assert kept(pgs[1]) == kept(memory)
    finally:
        for j in pgs:
            j.close()


def test_racing_claims_without_held_locks_still_let_exactly_one_win(
    pg_url: str, pg_schema: str
) -> None:
    """Outside case neoq#68 / rtcstats#336: releasing locks early let two workers take one job.

    Claims here hold no lock between statements, so the guarantee rests on the
    conditional UPDATE alone: two journal objects (two workers) claim the same seq
    at the same moment, round after round, and exactly one wins each round.
    """
    import threading

    from redrive.errors import AppendConflictError
    from redrive.storage.postgres import PostgresJournal

    from .test_journal import _frames, _start

    workers = [PostgresJournal(pg_url, schema=pg_schema, max_size=1) for _ in range(2)]
    first = _start(workers[0], "race")
    prev, seq = first.chain, 1
    for round_ in range(12):
        barrier = threading.Barrier(2)
        outcome: dict[int, str] = {}
        batches = [_frames("race", seq, prev, 1, f"w{i}-{round_}") for i in range(2)]

        def claim(
            i: int,
            batch: list[Any],
            barrier: threading.Barrier = barrier,
            outcome: dict[int, str] = outcome,
            seq: int = seq,
        ) -> None:
            barrier.wait()
            try:
                workers[i].append("race", batch, expected_seq=seq)
                outcome[i] = "won"
            except AppendConflictError:
                outcome[i] = "conflict"

        threads = [threading.Thread(target=claim, args=(i, batches[i])) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(outcome.values()) == ["conflict", "won"], (round_, outcome)
        winner = next(i for i, o in outcome.items() if o == "won")
        prev, seq = batches[winner][-1].chain, seq + 1
    kept = list(workers[1].frames("race"))
    assert [f.seq for f in kept] == list(range(13))
    assert kept[-1].chain == prev
    for j in workers:
        j.close()
