"""procrastinate on PostgreSQL hands a job out again; the run is executed once (issue 27 item 8).

Real procrastinate worker processes (``python -m tests.queues.procrastinate_app``,
async tasks: the async face of :class:`redrive.queues.QueueRun`), their tables
and the journal in one Postgres schema per module, a 3 s run lease. A worker
killed mid-job leaves its job ``doing``; the test plays the periodic sweeper
(:func:`redrive.queues.procrastinate.requeue_stalled`). What ran is read outside
the workers: the side-effect log and the model server's request count. Trials
per scenario: ``REDRIVE_QUEUE_TRIALS`` (default 1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import procrastinate
import psycopg
import pytest

from redrive.queues.procrastinate import requeue_stalled
from redrive.storage.postgres import PostgresJournal
from tests.queues.bench import TRIALS, Bench, bench, wait_for
from tests.queues.procrastinate_app import make_app

pytestmark = [pytest.mark.crash, pytest.mark.postgres]


class ProcrastinateBench:
    """A bench with procrastinate workers, the producer app and this module's schema."""

    def __init__(self, bench: Bench, pg_url: str, schema: str) -> None:
        self.bench = bench
        self.pg_url = pg_url
        self.schema = schema
        self.app: procrastinate.App = make_app(bench.env)

    def _aio(self, work: Any) -> Any:
        async def go() -> Any:
            async with self.app.open_async():
                return await work()

        return asyncio.run(go())

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            conn.execute(f"SET search_path = {self.schema}")
            return list(conn.execute(query, args).fetchall())  # type: ignore[call-overload]

    def alive(self) -> int:
        """Workers whose heartbeat (every 0.5 s) is fresh."""
        query = (
            "SELECT count(*) FROM procrastinate_workers "
            "WHERE last_heartbeat > now() - interval '3 seconds'"
        )
        return int(self.sql(query)[0][0])

    def workers(self, n: int) -> None:
        """Start workers until ``n`` of this bench's processes run; wait for their heartbeats."""
        running = sum(1 for proc, _ in self.bench.workers if proc.poll() is None)
        for i in range(len(self.bench.workers), len(self.bench.workers) + n - running):
            self.bench.start(["-m", "tests.queues.procrastinate_app", f"w{i}"], f"worker{i}")
        wait_for("the workers to start", lambda: self.alive() >= n, logs=self.bench.logs)

    def send(self, job: str) -> int:
        return int(self._aio(lambda: self.app.configure_task("support").defer_async(job=job)))

    def status(self, job_id: int) -> str:
        return str(self.sql("SELECT status FROM procrastinate_jobs WHERE id = %s", job_id)[0][0])

    def requeue_until(self, what: str, done: Any) -> None:
        """Play the periodic sweeper (requeue the jobs of dead workers) until ``done()``."""

        def sweep() -> Any:
            self._aio(lambda: requeue_stalled(self.app, seconds_since_heartbeat=5.0))
            return done()

        wait_for(what, sweep, logs=self.bench.logs)

    def run_status(self, run_id: str) -> str | None:
        journal = PostgresJournal(self.pg_url, schema=self.schema, max_size=1)
        try:
            record = journal.get_run(run_id)
            return None if record is None else record.status
        finally:
            journal.close()


@pytest.fixture(scope="module")
def pq(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, queue_schema: str
) -> Iterator[ProcrastinateBench]:
    """Two procrastinate workers for this module's tests (each test has jobs of its own)."""
    env = {"REDRIVE_PG": pg_url, "REDRIVE_SCHEMA": queue_schema, "REDRIVE_LEASE": "3"}
    PostgresJournal(pg_url, schema=queue_schema, max_size=1).close()  # tables before workers
    with bench(tmp_path_factory.mktemp("procrastinate"), env) as made:
        queue = ProcrastinateBench(made, pg_url, queue_schema)
        queue._aio(queue.app.schema_manager.apply_schema_async)
        queue.workers(2)
        yield queue


def _succeeded(pq: ProcrastinateBench, job: str, ids: list[int]) -> None:
    wait_for(
        f"run support:{job} to succeed", lambda: pq.run_status(f"support:{job}") == "succeeded"
    )
    for job_id in ids:
        wait_for(
            f"job {job_id} to succeed",
            lambda job_id=job_id: pq.status(job_id) == "succeeded",
            logs=pq.bench.logs,
        )


def test_a_duplicate_job_while_the_first_runs_waits_for_it(pq: ProcrastinateBench) -> None:
    """The same job enqueued twice, taken by both workers while open_ticket runs (3 s): the
    second finds the run leased (busy) and is retried later; it then replays the finished
    run. One ticket, one email, each model call paid once; both jobs succeed."""
    for trial in range(TRIALS):
        job = f"alive{trial}"
        pq.bench.hold(job, "open_ticket", 3)
        first = pq.send(job)
        wait_for("open_ticket to start", lambda job=job: pq.bench.started(job, "open_ticket"))
        second = pq.send(job)
        _succeeded(pq, job, [first, second])
        pq.bench.assert_once(job)
        outcomes = pq.bench.outcomes(job)
        assert outcomes["busy"] >= 1 and outcomes["done"] == 2, outcomes


def test_a_worker_killed_after_a_model_call_is_resumed_without_paying_it_again(
    pq: ProcrastinateBench,
) -> None:
    """SIGKILL inside send_email: the sweeper hands the job out again once the worker's heartbeat
    stopped; the run resumes once the dead worker's lease lapsed: the model calls and the ticket
    replay, the email runs again under the same idempotency key, the last call is made once."""
    for trial in range(TRIALS):
        job = f"killed{trial}"
        pq.bench.hold(job, "send_email", 60)
        job_id = pq.send(job)
        pq.bench.kill_inside(job, "send_email")
        pq.workers(2)  # a new worker in place of the killed one
        pq.requeue_until(
            "the job to be handed out again", lambda job_id=job_id: pq.status(job_id) != "doing"
        )
        _succeeded(pq, job, [job_id])
        pq.bench.assert_once(job, emails=2)


def test_a_worker_killed_inside_a_side_effect_parks_the_run_for_a_person(
    pq: ProcrastinateBench,
) -> None:
    """SIGKILL inside open_ticket (not restart-safe): the job handed out again does not open a
    second ticket; it fails with RunParkedError (procrastinate does not retry it), and
    `redrive runs --status blocked` lists the run. Resolved and enqueued again, it finishes."""
    url = f"{pq.pg_url}?schema={pq.schema}"
    for trial in range(TRIALS):
        job = f"parked{trial}"
        pq.bench.hold(job, "open_ticket", 60)
        job_id = pq.send(job)
        pq.bench.kill_inside(job, "open_ticket")
        pq.workers(2)
        pq.requeue_until(
            "the job to fail parked", lambda job_id=job_id: pq.status(job_id) == "failed"
        )
        assert "parked" in pq.bench.outcomes(job)
        assert "RunParkedError" in pq.bench.logs() and pq.run_status(f"support:{job}") == "running"
        assert len(pq.bench.started(job, "open_ticket")) == 1
        assert pq.bench.model_calls(job) == {0: 1}

        pq.bench.resolve_parked(url, job)  # a person settles it
        _succeeded(pq, job, [pq.send(job)])
        pq.bench.assert_once(job)


def test_several_workers_and_duplicate_jobs_run_each_side_effect_once(
    pq: ProcrastinateBench,
) -> None:
    """Four jobs each enqueued twice on the workers: every run finishes once; no ticket, email
    or model call twice, and every job succeeds."""
    jobs = [f"many{t}-{i}" for t in range(TRIALS) for i in range(4)]
    ids: dict[str, list[int]] = {}
    for job in jobs:
        pq.bench.hold(job, "open_ticket", 0.5)
        ids[job] = [pq.send(job), pq.send(job)]
    for job in jobs:
        _succeeded(pq, job, ids[job])
        pq.bench.assert_once(job)


def test_a_rate_limited_model_call_pauses_the_run_and_the_job_is_retried_later(
    pq: ProcrastinateBench,
) -> None:
    """The model refuses a job's second turn once with 429 and ``Retry-After: 1`` (after the
    ticket was opened): the run stops ``paused``, the delivery's verdict is ``paused`` and
    the retry strategy schedules the job again; the retry resumes the run (the ticket and the
    first model call replay, the refused turn is asked again) and the job succeeds. One
    ticket, one email, the refused turn asked twice."""
    bench = pq.bench
    with bench.refusing("paused") as refused:
        for trial in range(TRIALS):
            job = f"paused{trial}"
            job_id = pq.send(job)
            _succeeded(pq, job, [job_id])
            print(bench.account(job))
            assert refused.count(job) == 1
            assert bench.model_calls(job) == {0: 1, 1: 2, 2: 1}, bench.logs()[-3000:]
            assert len(bench.started(job, "open_ticket")) == 1
            assert len(bench.started(job, "send_email")) == 1
            outcomes = bench.outcomes(job)
            assert outcomes["paused"] == 1 and outcomes["done"] == 1, outcomes
