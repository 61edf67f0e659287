"""Many workers on one Postgres journal, with real processes.

Workers are separate Python processes (``python -m tests.crash.test_workers
serve``) that take orders on stdin and answer JSON lines on stdout. Every
tool body appends one line to a side-effect log outside the processes; the
tests count those lines. Trial count: ``REDRIVE_WORKER_TRIALS`` (default 50: every trial
raced in a 20-trial run; 200 or more for a deeper run, docs/testing.md).

Also here: a worker SIGSTOPped past its lease, taken over, then SIGCONTed
writes nothing; a worker SIGKILLed while holding the lease is taken over
after expiry; a second process opening a DuckDB journal in use gets
``JournalLockedError``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.crash.workerproc import Worker as _Process
from tests.crash.workerproc import lease_lapsed, wait_until

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("REDRIVE_WORKER_TRIALS", "50"))
TOOLS = ("lookup_customer", "open_ticket", "send_email")


# -- the agent loop every worker runs ------------------------------------------------


def _log(tool: str, arg: str) -> None:
    line = f"{arg} {tool} {os.getpid()}\n".encode()
    fd = os.open(os.environ["REDRIVE_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class Interrupted(ConnectionError):
    """Stops the first execution of a run, leaving it resumable."""


@redrive.tool(read_only=True)
def lookup_customer(run_key: str) -> dict[str, str]:
    """Side-effect-free lookup (logged, so it is counted too)."""
    _log("lookup_customer", run_key)
    return {"id": "cus_" + run_key[-6:], "email": "ana@example.com"}


@redrive.tool(restart_safe=False)
def open_ticket(run_key: str, customer: str) -> int:
    """Opens a ticket: a side effect that must happen once."""
    _log("open_ticket", run_key)
    time.sleep(0.02)  # long enough for the other worker to reach the same step
    return 4417


@redrive.tool(restart_safe=False)
def send_email(run_key: str, to: str, ticket: int) -> str:
    """Sends an email: a side effect that must happen once."""
    _log("send_email", run_key)
    time.sleep(0.02)
    return f"queued #{ticket}"


@redrive.model
def plan(step: str) -> str:
    """A deterministic stand-in for the model."""
    return f"plan for {step}"


def agent(run_id: str, *, stop_early: bool = False) -> dict[str, Any]:
    """The loop: lookup, model, open a ticket, model, send an email."""
    customer = lookup_customer(run_id)
    first = plan("open a ticket")
    if stop_early:
        raise Interrupted("worker interrupted after the first model call")
    ticket = open_ticket(run_id, customer["id"])
    second = plan(f"email ticket {ticket}")
    sent = send_email(run_id, customer["email"], ticket)
    return {"plans": [first, second], "ticket": ticket, "sent": sent}


def _journal() -> Any:
    from redrive.storage.postgres import PostgresJournal

    return PostgresJournal(
        os.environ["REDRIVE_PG"], schema=os.environ["REDRIVE_SCHEMA"], max_size=3
    )


def interrupt(journal: Any, run_id: str) -> None:
    """Run the first part of ``run_id`` and stop it there (status stays running)."""
    try:
        with redrive.run(journal, run_id, input=run_id, lease=None):  # an unleased start
            agent(run_id, stop_early=True)
    except Interrupted:
        return
    raise AssertionError("the interrupted run finished")


def _execute(journal: Any, run_id: str, **options: Any) -> dict[str, Any]:
    try:
        with redrive.run(journal, run_id, input=run_id, **options) as run:
            unfinished = not run.finished
            run.finish(agent(run_id))
        return {
            "run_id": run_id,
            "outcome": "ok",
            "output": run.output,
            "unfinished": unfinished,  # entered before the run was done
        }
    except redrive.ReplayError as exc:
        return {"run_id": run_id, "outcome": type(exc).__name__, "error": str(exc)}


def _say(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def serve() -> None:
    """Worker main loop: ``go RUN_ID...`` lines on stdin, one JSON line per run on stdout."""
    journal = _journal()
    _say({"ready": os.getpid()})
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "go":
            continue
        for run_id in words[1:]:
            # unleased (lease=None; Postgres takes a lease by default): these workers race
            # inside the same run, so the atomic claims are what keeps side effects once
            _say(_execute(journal, run_id, lease=None, on_busy="wait", busy_timeout=30))
    journal.close()


def leased(run_id: str, lease: float, stop: str) -> None:
    """Run ``run_id`` holding a lease; at ``stop`` (a boundary:tool) say so and freeze or wait."""
    point, _, tool = stop.partition(":")
    journal = _journal()

    def hook(boundary: str, info: dict[str, Any]) -> None:
        if boundary == point and info["name"] == tool:
            _say({"stopped": boundary, "seq": info["seq"]})
            os.kill(os.getpid(), signal.SIGSTOP)

    redrive.replay.set_boundary_hook(hook if stop else None)
    _say(_execute(journal, run_id, lease=lease, on_busy="wait", busy_timeout=30))
    journal.close()


def open_duckdb(path: str) -> None:
    """Try to open a DuckDB journal and report what happened."""
    from redrive.storage.duckdb import DuckDBJournal

    try:
        DuckDBJournal(path).close()
        _say({"outcome": "opened"})
    except redrive.ReplayError as exc:
        _say({"outcome": type(exc).__name__, "error": str(exc)})


# -- the parent side -------------------------------------------------------------------


@pytest.fixture
def env(pg_url: str, pg_schema: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment of worker processes: the journal and the side-effect log."""
    values = dict(os.environ)
    values.update(
        REDRIVE_PG=pg_url,
        REDRIVE_SCHEMA=pg_schema,
        REDRIVE_EFFECTS=str(tmp_path / "effects.log"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    os.environ["REDRIVE_EFFECTS"] = values["REDRIVE_EFFECTS"]
    try:
        yield values
    finally:
        del os.environ["REDRIVE_EFFECTS"]


@pytest.fixture
def journal(pg_url: str, pg_schema: str) -> Iterator[Any]:
    """The parent's handle on the shared Postgres journal."""
    from redrive.storage.postgres import PostgresJournal

    j = PostgresJournal(pg_url, schema=pg_schema, max_size=2)
    yield j
    j.close()


def _effects(env: dict[str, str]) -> Counter[tuple[str, str]]:
    path = Path(env["REDRIVE_EFFECTS"])
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((line.split()[0], line.split()[1]) for line in lines)


def _expected_output(run_id: str) -> dict[str, Any]:
    return {
        "plans": ["plan for open a ticket", "plan for email ticket 4417"],
        "ticket": 4417,
        "sent": "queued #4417",
    }


class Worker(_Process):
    """A worker process of this module (`serve` or `leased`, by its first argument)."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        super().__init__("tests.crash.test_workers", env, *args)


def _start(workers: list[Worker]) -> None:
    for w in workers:
        assert "ready" in w.read()


@pytest.mark.postgres
def test_two_workers_resume_the_same_run_at_once(env: dict[str, str], journal: Any) -> None:
    """Two processes resume each interrupted run at the same moment; every body runs once."""
    run_ids = [f"pair-{i}" for i in range(TRIALS)]
    for run_id in run_ids:
        interrupt(journal, run_id)
    workers = [Worker(env, "serve"), Worker(env, "serve")]
    overlapped = 0  # trials where both workers executed the unfinished run at once
    try:
        _start(workers)
        for run_id in run_ids:
            for w in workers:
                w.send(f"go {run_id}")
            results = [w.read() for w in workers]
            assert [r["outcome"] for r in results] == ["ok", "ok"], results
            assert results[0]["output"] == results[1]["output"] == _expected_output(run_id)
            overlapped += all(r["unfinished"] for r in results)
    finally:
        for w in workers:
            w.stop()
    print(f"{overlapped} of {TRIALS} trials had both workers inside the unfinished run")
    assert overlapped > 0, "no trial raced: the test did not exercise concurrent claims"
    effects = _effects(env)
    assert effects == Counter({(r, t): 1 for r in run_ids for t in TOOLS})
    assert {r.status for r in journal.runs()} == {"succeeded"}


@pytest.mark.postgres
def test_eight_workers_on_fifty_runs(env: dict[str, str], journal: Any) -> None:
    """Eight processes each drive all fifty runs in their own order; every body runs once."""
    run_ids = [f"fleet-{i}" for i in range(50)]
    for run_id in run_ids[::2]:
        interrupt(journal, run_id)  # half resumed, half started by whoever comes first
    workers = [Worker(env, "serve") for _ in range(8)]
    try:
        _start(workers)
        rng = random.Random(5)
        for w in workers:
            order = run_ids[:]
            rng.shuffle(order)
            w.send("go " + " ".join(order))
        results = [w.read(timeout=120) for w in workers for _ in run_ids]
    finally:
        for w in workers:
            w.stop()
    assert Counter(r["outcome"] for r in results) == Counter({"ok": 8 * 50})
    assert all(r["output"] == _expected_output(r["run_id"]) for r in results)
    assert _effects(env) == Counter({(r, t): 1 for r in run_ids for t in TOOLS})
    records = journal.runs()
    assert len(records) == 50 and {r.status for r in records} == {"succeeded"}


@pytest.mark.postgres
def test_stopped_worker_taken_over_writes_nothing(env: dict[str, str], journal: Any) -> None:
    """A worker frozen past its lease is taken over; thawed, it writes nothing and stops."""
    run_id = "frozen"
    interrupt(journal, run_id)
    before = journal.get_run(run_id).next_seq
    frozen = Worker(env, "leased", run_id, "1.0", "tool_recorded:open_ticket")
    try:
        stopped = frozen.read()
        assert stopped["stopped"] == "tool_recorded"
        wait_until(lambda: lease_lapsed(journal, run_id))
        assert [r.run_id for r in journal.stale_runs()] == [run_id]
        old_epoch = journal.get_run(run_id).lease_epoch
        taker = Worker(env, "leased", run_id, "30", "")
        try:
            done = taker.read()
        finally:
            taker.stop()
        assert done["outcome"] == "ok" and done["output"] == _expected_output(run_id)
        after_takeover = list(journal.frames(run_id))
        frozen.proc.send_signal(signal.SIGCONT)
        thawed = frozen.read()
        assert thawed["outcome"] == "LeaseLostError", thawed
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
        frozen.stop()
    assert list(journal.frames(run_id)) == after_takeover
    record = journal.get_run(run_id)
    assert record.status == "succeeded" and record.lease_epoch == old_epoch + 1
    stopped_seq = stopped["seq"]
    assert {f.epoch for f in after_takeover if f.seq < before} == {0}  # the unleased start
    assert {f.epoch for f in after_takeover if before <= f.seq <= stopped_seq + 1} == {old_epoch}
    assert {f.epoch for f in after_takeover if f.seq > stopped_seq + 1} == {old_epoch + 1}
    assert _effects(env) == Counter({(run_id, t): 1 for t in TOOLS})
    assert journal.stale_runs() == []


@pytest.mark.postgres
def test_killed_lease_holder_is_taken_over_after_expiry(env: dict[str, str], journal: Any) -> None:
    """A worker SIGKILLed while holding the lease is taken over once the lease expires."""
    run_id = "killed"
    interrupt(journal, run_id)
    victim = Worker(env, "leased", run_id, "1.0", "tool_recorded:open_ticket")
    try:
        assert victim.read()["stopped"] == "tool_recorded"
        victim.proc.kill()
        victim.proc.wait()
    finally:
        victim.stop()
    record = journal.get_run(run_id)
    assert record.lease_owner is not None  # the dead worker still holds it
    taker = Worker(env, "leased", run_id, "30", "")
    try:
        done = taker.read()
    finally:
        taker.stop()
    assert done["outcome"] == "ok" and done["output"] == _expected_output(run_id)
    after = journal.get_run(run_id)
    assert after.status == "succeeded" and after.lease_epoch == record.lease_epoch + 1
    assert _effects(env) == Counter({(run_id, t): 1 for t in TOOLS})


def test_duckdb_in_use_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    """A second process opening a DuckDB journal in use gets JournalLockedError naming it."""
    from redrive.storage.duckdb import DuckDBJournal

    path = tmp_path / "busy.duckdb"
    holder = DuckDBJournal(str(path))
    try:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        other = Worker(env, "duckdb", str(path))
        try:
            said = other.read()
        finally:
            other.stop()
    finally:
        holder.close()
    assert said["outcome"] == "JournalLockedError"
    assert str(path) in said["error"] and "Postgres" in said["error"]


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "serve":
        serve()
    elif mode == "leased":
        leased(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    elif mode == "duckdb":
        open_duckdb(sys.argv[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
