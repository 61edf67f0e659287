"""One journal conformance suite, run against every writable backend.

Backends: the in-memory reference, a DuckDB file, and Postgres (its own
schema per test; see ``tests/conftest.py``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive.errors import (
    AppendConflictError,
    JournalFormatError,
    LeaseLostError,
    RunBusyError,
    TerminalRunError,
    UnknownRunError,
)
from redrive.frames import FORMAT_VERSION, GENESIS, Frame, Kind, make_frame
from redrive.storage import (
    Journal,
    MemoryJournal,
    RunRecord,
    RunUpdate,
    copy_run,
    verify_frames,
)
from tests.handles import worker_handle

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("duckdb", id="duckdb"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    # frames hash-partitioned by run (docs/scaling.md), opened by URL option
    pytest.param("postgres-partitioned", id="postgres-partitioned", marks=pytest.mark.postgres),
]
SQL_BACKENDS = BACKENDS[1:]


def _open(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Journal:
    if kind == "memory":
        return MemoryJournal()
    if kind == "duckdb":
        from redrive.storage.duckdb import DuckDBJournal

        return DuckDBJournal(str(tmp_path / "runs.duckdb"))
    from redrive.storage.postgres import PostgresJournal

    url = request.getfixturevalue("pg_url")
    schema = request.getfixturevalue("pg_schema")
    if kind == "postgres-partitioned":
        url += ("&" if "?" in url else "?") + "partitions=4"
    return PostgresJournal(url, schema=schema, max_size=4)


@pytest.fixture(params=BACKENDS)
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """A fresh, empty journal of each backend."""
    j = _open(request.param, request, tmp_path)
    yield j
    j.close()


@pytest.fixture(params=SQL_BACKENDS)
def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """A factory opening (and later closing) SQL journals on one shared database."""
    opened: list[Any] = []

    def factory(**options: Any) -> Any:
        if request.param == "duckdb":
            from redrive.storage.duckdb import DuckDBJournal

            j: Any = DuckDBJournal(str(tmp_path / "runs.duckdb"), **options)
        else:
            from redrive.storage.postgres import PostgresJournal

            url = request.getfixturevalue("pg_url")
            schema = request.getfixturevalue("pg_schema")
            if request.param == "postgres-partitioned":
                url += ("&" if "?" in url else "?") + "partitions=4"
            j = PostgresJournal(url, schema=schema, max_size=2, **options)
        opened.append(j)
        return j

    yield factory
    for j in opened:
        j.close()


def _start(journal: Journal, run_id: str, *, at: float | None = None) -> Frame:
    first = make_frame(
        run_id=run_id,
        seq=0,
        kind=Kind.RUN_START,
        name="run",
        payload={"input": run_id},
        prev_chain=GENESIS,
    )
    now = time.time() if at is None else at
    created = journal.create_run(
        RunRecord(run_id=run_id, input_fp="f" * 32, created_at=now, updated_at=now), first
    )
    assert created
    return first


def _frames(run_id: str, start: int, prev: str, count: int, tag: str = "") -> list[Frame]:
    out = []
    for offset in range(count):
        frame = make_frame(
            run_id=run_id,
            seq=start + offset,
            kind=Kind.NOTE,
            name="note",
            payload={"i": start + offset, "tag": tag},
            prev_chain=prev,
        )
        out.append(frame)
        prev = frame.chain
    return out


def test_backend_satisfies_protocol(journal: Journal) -> None:
    """Every backend implements the Journal protocol."""
    assert isinstance(journal, Journal)


def test_create_run_once(journal: Journal) -> None:
    """A run is created once; a second create leaves the first untouched and returns False."""
    first = _start(journal, "r1")
    again = make_frame(
        run_id="r1",
        seq=0,
        kind=Kind.RUN_START,
        name="run",
        payload={"other": 1},
        prev_chain=GENESIS,
    )
    assert not journal.create_run(RunRecord(run_id="r1", input_fp="0" * 32), again)
    record = journal.get_run("r1")
    assert record is not None
    assert (record.next_seq, record.last_chain, record.input_fp) == (1, first.chain, "f" * 32)
    assert list(journal.frames("r1")) == [first]
    assert journal.get_run("nope") is None


def test_appends_at_same_seq_exactly_one_wins(journal: Journal) -> None:
    """Of concurrent appends at the same seq, exactly one commits; the others conflict."""
    first = _start(journal, "race")
    writers = 4
    barrier = threading.Barrier(writers)
    results: list[str] = []
    lock = threading.Lock()

    def write(n: int) -> None:
        frames = _frames("race", 1, first.chain, 2, tag=f"w{n}")
        barrier.wait()
        try:
            journal.append("race", frames, expected_seq=1)
            outcome = f"won:{n}"
        except AppendConflictError as exc:
            assert exc.run_id == "race" and exc.seq == 1
            outcome = "conflict"
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r.startswith("won")]
    assert len(winners) == 1 and results.count("conflict") == writers - 1
    stored = list(journal.frames("race"))
    assert [f.seq for f in stored] == [0, 1, 2]
    assert stored[1].data()["tag"] == "w" + winners[0].split(":")[1]
    assert verify_frames(iter(stored), source="test") == 3


def test_append_at_stale_or_future_seq_conflicts(journal: Journal) -> None:
    """An append whose expected seq is not the run's next seq is refused and changes nothing."""
    first = _start(journal, "r")
    journal.append("r", _frames("r", 1, first.chain, 1), expected_seq=1)
    before = journal.get_run("r")
    with pytest.raises(AppendConflictError) as info:
        journal.append("r", _frames("r", 1, first.chain, 1, tag="late"), expected_seq=1)
    assert info.value.fields["found"] == 2
    assert before is not None
    with pytest.raises(AppendConflictError):
        journal.append("r", _frames("r", 5, before.last_chain, 1), expected_seq=5)
    assert journal.get_run("r") == before


def test_frames_stream_in_seq_order(journal: Journal) -> None:
    """Reads yield frames in seq order, from any start, across page boundaries."""
    first = _start(journal, "long")
    frames = _frames("long", 1, first.chain, 1203)
    journal.append("long", frames[:600], expected_seq=1)
    journal.append("long", frames[600:], expected_seq=601)
    _start(journal, "other")
    stored = journal.frames("long")
    assert isinstance(stored, Iterator)
    seqs = [f.seq for f in stored]
    assert seqs == list(range(1204))
    assert [f.seq for f in journal.frames("long", start=1000)] == list(range(1000, 1204))
    assert next(iter(journal.frames("long", start=5))) == frames[4]
    assert list(journal.frames("missing")) == []
    assert verify_frames(journal.frames("long"), source="test") == 1204


def test_frames_round_trip_every_field(journal: Journal) -> None:
    """A stored frame reads back equal in every field, payload bytes and epoch included."""
    first = _start(journal, "rt")
    frame = make_frame(
        run_id="rt",
        seq=1,
        kind=Kind.TOOL_START,
        name="send_email",
        key="a" * 32,
        payload={"args": {"to": "bob", "blob": b"\x00\xff"}, "n": 1.5},
        prev_chain=first.chain,
        epoch=7,
    )
    journal.append("rt", [frame], expected_seq=1)
    assert list(journal.frames("rt", start=1)) == [frame]


def test_chain_and_density_are_checked(journal: Journal) -> None:
    """Mis-chained, non-dense and foreign frames are refused with ValueError, nothing written."""
    first = _start(journal, "c")
    good = _frames("c", 1, first.chain, 2)
    with pytest.raises(ValueError, match="chain"):
        journal.append("c", _frames("c", 1, "1" * 32, 1), expected_seq=1)
    with pytest.raises(ValueError, match="dense"):
        journal.append("c", [good[0], _frames("c", 3, good[0].chain, 1)[0]], expected_seq=1)
    _start(journal, "d")
    with pytest.raises(ValueError, match="appended to run"):
        journal.append("c", _frames("d", 1, first.chain, 1), expected_seq=1)
    record = journal.get_run("c")
    assert record is not None and record.next_seq == 1
    journal.append("c", good, expected_seq=1)
    assert verify_frames(journal.frames("c"), source="test") == 3


def test_unknown_run_is_reported(journal: Journal) -> None:
    """Writes and leases on a run that does not exist raise UnknownRunError."""
    with pytest.raises(UnknownRunError):
        journal.append("ghost", _frames("ghost", 0, GENESIS, 1), expected_seq=0)
    with pytest.raises(UnknownRunError):
        journal.acquire_lease("ghost", "w1", 10)
    with pytest.raises(UnknownRunError):
        journal.decide("ghost", "approve", True, by="ops")
    journal.release_lease("ghost", "w1", 1)


def test_run_rows_update_with_appends(journal: Journal) -> None:
    """Run rows carry status, output and error written with an append, and list newest first."""
    for i, run_id in enumerate(["a", "b", "c"]):
        _start(journal, run_id, at=1000.0 + i)
    record = journal.get_run("a")
    assert record is not None
    end = make_frame(
        run_id="a",
        seq=1,
        kind=Kind.RUN_END,
        name="run",
        payload={"status": "succeeded"},
        prev_chain=record.last_chain,
    )
    out = redrive.frames.encode({"answer": 42})
    journal.append("a", [end], expected_seq=1, update=RunUpdate(status="succeeded", output=out))
    journal.append("b", [], expected_seq=1, update=RunUpdate(status="failed", error="E: boom"))
    a = journal.get_run("a")
    b = journal.get_run("b")
    assert a is not None and b is not None
    assert (a.status, a.next_seq, a.last_chain, a.output_value()) == (
        "succeeded",
        2,
        end.chain,
        {"answer": 42},
    )
    assert (b.status, b.error, b.next_seq) == ("failed", "E: boom", 1)
    assert [r.run_id for r in journal.runs()] == ["c", "b", "a"]
    assert [r.run_id for r in journal.runs(limit=2)] == ["c", "b"]
    assert [r.run_id for r in journal.runs(status="succeeded")] == ["a"]
    assert [r.run_id for r in journal.interrupted_runs()] == ["c"]


def test_leases_fence_stale_writers(journal: Journal) -> None:
    """A lease taken over after expiry bumps the epoch; the old holder can no longer write."""
    first = _start(journal, "L")
    epoch1 = journal.acquire_lease("L", "w1", 60)
    assert epoch1 == 1
    with pytest.raises(RunBusyError) as busy:
        journal.acquire_lease("L", "w2", 60)
    assert not isinstance(busy.value, LeaseLostError)
    journal.renew_lease("L", "w1", epoch1, 0)  # expires at once
    epoch2 = journal.acquire_lease("L", "w2", 60)
    assert epoch2 == 2
    with pytest.raises(LeaseLostError):
        journal.renew_lease("L", "w1", epoch1, 60)
    with pytest.raises(LeaseLostError) as lost:
        journal.append("L", _frames("L", 1, first.chain, 1), expected_seq=1, epoch=epoch1)
    assert lost.value.fields["current_epoch"] == 2
    record = journal.get_run("L")
    assert record is not None and record.next_seq == 1 and record.lease_owner == "w2"
    journal.append("L", _frames("L", 1, first.chain, 1), expected_seq=1, epoch=epoch2)
    journal.release_lease("L", "w1", epoch1)  # not the holder: no effect
    assert (journal.get_run("L") or record).lease_owner == "w2"
    journal.release_lease("L", "w2", epoch2)
    released = journal.get_run("L")
    assert released is not None
    assert (released.lease_owner, released.lease_expires, released.lease_epoch) == (None, None, 2)
    assert journal.acquire_lease("L", "w3", 60) == 3


def test_stale_runs_lists_expired_running_leases(journal: Journal) -> None:
    """stale_runs lists running runs whose lease lapsed, honouring older_than."""
    for run_id in ["live", "lapsed", "done", "never"]:
        _start(journal, run_id)
    journal.acquire_lease("live", "w", 600)
    journal.acquire_lease("lapsed", "w", 0)
    journal.acquire_lease("done", "w", 0)
    journal.append("done", [], expected_seq=1, update=RunUpdate(status="succeeded"))
    assert [r.run_id for r in journal.stale_runs()] == ["lapsed"]
    assert journal.stale_runs(older_than=3600) == []
    assert {r.run_id for r in journal.interrupted_runs()} == {"live", "lapsed", "never"}


def test_decisions_first_wins(journal: Journal) -> None:
    """The first decision on an approval is kept and returned to every later decider."""
    _start(journal, "ap")
    assert journal.decision("ap", "refund") is None
    first = journal.decide("ap", "refund", True, by="alice", note="ok")
    second = journal.decide("ap", "refund", False, by="bob")
    assert (first.approved, first.by, first.note) == (True, "alice", "ok")
    assert second == first == journal.decision("ap", "refund")
    other = journal.decide("ap", "escalate", False, by="bob")
    assert other.approved is False and journal.decision("ap", "escalate") == other


def test_claim_race_runs_body_once(journal: Journal) -> None:
    """Of several Runs reaching the same unfinished step, one runs the body; the rest wait."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    @redrive.tool
    def send_email(to: str) -> str:
        with lock:
            calls[to] += 1
        time.sleep(0.02)
        return f"sent to {to}"

    @redrive.tool
    def open_ticket(subject: str) -> int:
        with lock:
            calls[subject] += 1
        return 17

    workers = 3
    barrier = threading.Barrier(workers)
    outputs: list[Any] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            # each simulated worker has its own handle, as a process of its own would
            # (one process opens one live block per run on one journal object)
            handle = worker_handle(journal)
            # unleased (lease=None; Postgres takes a lease by default, which would keep
            # the others out of the run): the atomic claim alone keeps the body once
            with redrive.run(handle, "claim", input="x", on_busy="wait", lease=None) as run:
                barrier.wait()  # every worker is inside the run before the first claim
                ticket = open_ticket("refund")
                run.finish([ticket, send_email(f"bob-{ticket}")])
            with lock:
                outputs.append(run.output)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert calls == Counter({"refund": 1, "bob-17": 1})
    assert outputs == [[17, "sent to bob-17"]] * workers
    record = journal.get_run("claim")
    assert record is not None and record.status == "succeeded"
    assert verify_frames(journal.frames("claim"), source="test") == record.next_seq


def test_claim_race_raises_when_asked(journal: Journal) -> None:
    """With on_busy='raise' a worker that loses a claim gets RunBusyError; the body runs once."""
    calls: list[int] = []
    lock = threading.Lock()

    @redrive.tool
    def charge_card(cents: int) -> str:
        with lock:
            calls.append(cents)
        time.sleep(0.02)
        return "charged"

    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def worker() -> None:
        try:
            # unleased (lease=None, as above): both workers get inside the run
            with redrive.run(
                worker_handle(journal), "pay", input=1, on_busy="raise", lease=None
            ) as run:
                barrier.wait()
                run.finish(charge_card(500))
            outcome = "ok"
        except RunBusyError as exc:
            assert exc.run_id == "pay"
            outcome = "busy"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [500]
    assert sorted(outcomes) == ["busy", "ok"]


def test_format_and_schema_version(sql_backend: Callable[..., Any]) -> None:
    """A SQL journal stores the frame format and schema version and reopens cleanly."""
    from redrive.storage._sql import SCHEMA_VERSION

    first = sql_backend()
    assert first.format_version() == FORMAT_VERSION
    assert first.schema_version() == SCHEMA_VERSION
    first.check_schema()
    first.close()
    again = sql_backend()
    assert again.schema_version() == SCHEMA_VERSION


def test_schema_too_new_or_too_old_is_reported(sql_backend: Callable[..., Any]) -> None:
    """A newer schema is refused on open; an older one is migrated, or reported read-only."""
    from redrive.storage._sql import SCHEMA_VERSION

    j = sql_backend()
    _start(j, "kept")
    j.close()
    _set_schema(sql_backend, "99")
    with pytest.raises(JournalFormatError, match="schema version 99") as newer:
        # a DuckDB journal whose log holds records raises at the first use of its tables
        _first_use(sql_backend)
    assert newer.value.fields["too"] == "new"
    # put it back to version 1 (before the numbered index) and reopen
    _set_schema(sql_backend, "1")
    reopened = sql_backend()
    assert reopened.schema_version() == SCHEMA_VERSION
    assert (reopened.get_run("kept") or RunRecord(run_id="?")).run_id == "kept"
    reopened.close()
    _set_schema(sql_backend, "1")
    with pytest.raises(JournalFormatError, match="older") as older:
        _checked(sql_backend)
    assert older.value.fields["too"] == "old"


def test_older_frame_format_reads_and_is_marked_current(
    sql_backend: Callable[..., Any],
) -> None:
    """A format-1 journal opens and replays; opening it to write marks it format 2; 3 is refused."""
    j = sql_backend()
    _start(j, "old")
    j.close()
    _set_schema(sql_backend, "1", key="format")
    reopened = sql_backend()
    assert reopened.format_version() == FORMAT_VERSION == 2
    assert [f.seq for f in reopened.frames("old")] == [0]
    reopened.close()
    _set_schema(sql_backend, str(FORMAT_VERSION + 1), key="format")
    with pytest.raises(JournalFormatError, match="Upgrade redrive"):
        _first_use(sql_backend)


def _set_schema(factory: Callable[..., Any], value: str, *, key: str = "schema") -> None:
    """Rewrite the stored schema (or format) version without the open-time check (test helper)."""
    import contextlib

    from redrive.storage._sql import SqlJournal

    opener = SqlJournal._migrate
    SqlJournal._migrate = lambda self: None  # type: ignore[method-assign]
    try:
        j = factory()
        getattr(j, "_store", None)  # the DuckDB journal may open its tables in the background
    finally:
        SqlJournal._migrate = opener  # type: ignore[method-assign]
    sql = getattr(j, "_store", j)  # the DuckDB journal keeps its tables in a store
    with contextlib.closing(j), sql._transaction() as cur:
        cur.execute(sql._sql("UPDATE redrive_meta SET value = ? WHERE key = ?"), [value, key])


def _first_use(factory: Callable[..., Any]) -> None:
    """Open and use the tables (a DuckDB journal whose log holds records opens them lazily)."""
    import contextlib

    j = factory()
    try:
        j.runs()
    finally:
        with contextlib.suppress(Exception):
            j.close()


def _checked(factory: Callable[..., Any]) -> None:
    """Open without migrating and run the read-only schema check (test helper)."""
    from redrive.storage._sql import SqlJournal

    opener = SqlJournal._migrate
    SqlJournal._migrate = lambda self: None  # type: ignore[method-assign]
    try:
        j = factory()
        getattr(j, "_store", None)  # the DuckDB journal may open its tables in the background
    finally:
        SqlJournal._migrate = opener  # type: ignore[method-assign]
    j.check_schema()


@pytest.mark.postgres
def test_postgres_read_only_open_reports_missing_schema(pg_url: str, pg_schema: str) -> None:
    """Opening Postgres without migrating reports a schema older than this redrive's."""
    from redrive.storage.postgres import PostgresJournal

    with pytest.raises(JournalFormatError, match="schema version 0") as info:
        PostgresJournal(pg_url, schema=pg_schema, migrate=False)
    assert info.value.fields["too"] == "old"
    PostgresJournal(pg_url, schema=pg_schema).close()
    j = PostgresJournal(pg_url, schema=pg_schema, migrate=False)
    j.close()


@pytest.mark.postgres
def test_open_journal_dispatches_postgres_urls(pg_url: str, pg_schema: str) -> None:
    """open_journal('postgresql://...') returns a PostgresJournal passing options through."""
    from redrive.storage.postgres import PostgresJournal

    j = redrive.open_journal(pg_url, schema=pg_schema)
    try:
        assert isinstance(j, PostgresJournal) and j.durable and not j.read_only
        assert pg_schema in j.url
    finally:
        j.close()


def test_copy_run_into_and_within_each_backend(journal: Journal) -> None:
    """copy_run fills any backend from another journal, and copies within it under a new id."""
    source = MemoryJournal()
    first = _start(source, "s")
    tail = _frames("s", 1, first.chain, 2500)  # more than one batch of appends
    source.append("s", tail, expected_seq=1, update=RunUpdate(status="succeeded"))
    copied = copy_run(source, "s", journal)
    assert (copied.next_seq, copied.status, copied.last_chain) == (
        2501,
        "succeeded",
        tail[-1].chain,
    )
    assert [f.chain for f in journal.frames("s")] == [first.chain] + [f.chain for f in tail]
    assert copy_run(source, "s", journal) == copied  # the same copy again is a no-op
    prefix = copy_run(journal, "s", journal, upto=10, new_id="s2")
    assert (prefix.run_id, prefix.next_seq, prefix.status) == ("s2", 10, "running")
    assert verify_frames(journal.frames("s2"), source="test") == 10
    with pytest.raises(AppendConflictError):
        copy_run(journal, "s", journal, upto=5, new_id="s2")


# -- cancel: the only way a run ends cancelled ------------------------------------------------


def test_cancel_ends_a_running_run_naming_who_and_why(journal: Journal) -> None:
    """cancel() appends a chained run_end naming who and why, and sets the row's status."""
    first = _start(journal, "c")
    journal.append("c", _frames("c", 1, first.chain, 2), expected_seq=1)
    record = journal.cancel("c", reason="customer asked", by="alice")
    assert (record.status, record.error, record.next_seq) == (
        "cancelled",
        "cancelled by alice: customer asked",
        4,
    )
    assert journal.get_run("c") == record
    stored = list(journal.frames("c"))
    assert verify_frames(iter(stored), source="test") == 4
    end = stored[-1]
    assert end.kind == Kind.RUN_END.value
    assert end.data() == {
        "status": "cancelled",
        "output": None,
        "error": "cancelled by alice: customer asked",
        "reason": "customer asked",
        "by": "alice",
    }
    assert [r.run_id for r in journal.runs(status="cancelled")] == ["c"]
    assert journal.interrupted_runs() == []


def test_cancel_refuses_the_executing_workers_next_append(journal: Journal) -> None:
    """A worker holding the lease finds its next append refused: the run is terminal."""
    first = _start(journal, "held")
    epoch = journal.acquire_lease("held", "w1", 600)
    journal.cancel("held", reason="stop", by="ops")
    with pytest.raises(TerminalRunError) as info:
        journal.append("held", _frames("held", 2, first.chain, 1), expected_seq=2, epoch=epoch)
    assert info.value.status == "cancelled" and "ops" in str(info.value)
    record = journal.get_run("held")
    assert record is not None and record.next_seq == 2 and record.status == "cancelled"


def test_cancel_of_an_ended_or_unknown_run_changes_nothing(journal: Journal) -> None:
    """Cancelling a finished, failed or cancelled run raises TerminalRunError; an unknown one
    UnknownRunError; empty reason or by ValueError. Nothing is written."""
    for run_id, status in [("ok", "succeeded"), ("bad", "failed")]:
        _start(journal, run_id)
        journal.append(run_id, [], expected_seq=1, update=RunUpdate(status=status, error="e"))
    _start(journal, "gone")
    journal.cancel("gone", reason="first", by="a")
    for run_id in ["ok", "bad", "gone"]:
        before = journal.get_run(run_id)
        with pytest.raises(TerminalRunError, match="nothing to cancel"):
            journal.cancel(run_id, reason="again", by="b")
        assert journal.get_run(run_id) == before
    with pytest.raises(UnknownRunError):
        journal.cancel("nope", reason="r", by="b")
    _start(journal, "open")
    with pytest.raises(ValueError):
        journal.cancel("open", reason="", by="b")
    with pytest.raises(ValueError):
        journal.cancel("open", reason="r", by="")
    assert (journal.get_run("open") or RunRecord(run_id="x")).status == "running"


def test_cancel_racing_appends_lands_after_them(journal: Journal) -> None:
    """A cancel racing a writer commits after the writer's frames (or refuses them)."""
    first = _start(journal, "race")
    barrier = threading.Barrier(2)
    outcome: list[str] = []

    def writer() -> None:
        barrier.wait()
        try:
            journal.append("race", _frames("race", 1, first.chain, 1), expected_seq=1)
            outcome.append("appended")
        except (TerminalRunError, AppendConflictError):
            outcome.append("refused")

    thread = threading.Thread(target=writer)
    thread.start()
    barrier.wait()
    journal.cancel("race", reason="r", by="b")
    thread.join()
    stored = list(journal.frames("race"))
    assert verify_frames(iter(stored), source="test") == len(stored)
    assert stored[-1].kind == Kind.RUN_END.value
    assert len(stored) == (3 if outcome == ["appended"] else 2)


@pytest.mark.postgres
def test_partitioned_frames_are_hash_partitions_by_run(pg_url: str, pg_schema: str) -> None:
    """``?partitions=4`` makes the frames table 4 hash partitions; runs spread over them."""
    import psycopg

    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(pg_url + "?partitions=4", schema=pg_schema)
    for i in range(16):
        first = _start(journal, f"spread-{i}")
        journal.append(f"spread-{i}", _frames(f"spread-{i}", 1, first.chain, 3), expected_seq=1)
    with psycopg.connect(pg_url, options=f"-c search_path={pg_schema}") as conn:
        kinds = conn.execute(
            "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = 'redrive_frames' AND n.nspname = %s",
            [pg_schema],
        ).fetchall()
        used = conn.execute("SELECT count(DISTINCT tableoid) FROM redrive_frames").fetchone()
    assert kinds == [("p",)]
    assert used is not None and used[0] >= 2
    assert [f.seq for f in journal.frames("spread-3")] == [0, 1, 2, 3]
    journal.close()
    reopened = PostgresJournal(pg_url, schema=pg_schema)  # the layout stays; no option needed
    assert [f.seq for f in reopened.frames("spread-3")] == [0, 1, 2, 3]
    reopened.close()
    with pytest.raises(ValueError, match="2 to 1024"):
        PostgresJournal(pg_url + "?partitions=1", schema=pg_schema)


@pytest.mark.postgres
def test_partitions_on_an_unpartitioned_journal_is_refused(pg_url: str, pg_schema: str) -> None:
    """A journal keeps the layout it was created with; the error says how to move runs."""
    from redrive.storage.postgres import PostgresJournal

    PostgresJournal(pg_url, schema=pg_schema).close()
    with pytest.raises(ValueError, match="already exists unpartitioned"):
        PostgresJournal(pg_url, schema=pg_schema, partitions=4)
