"""Celery on Redis redelivers a job; the run is executed once (issue 27 item 8).

Real ``celery worker`` processes (prefork, one child each) on the Redis at
127.0.0.1:6379 (its own database and key prefix per test), tasks with
``acks_late`` and ``reject_on_worker_lost``, a 2 s visibility timeout, a 3 s run
lease, and a Postgres journal (a schema per test). What ran is read outside the
workers: the side-effect log and the model server's request count. Trials per
scenario: ``REDRIVE_QUEUE_TRIALS`` (default 1).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from redrive.storage.postgres import PostgresJournal
from tests.queues.bench import TRIALS, Bench, bench, wait_for
from tests.queues.celery_app import make_app

pytestmark = [pytest.mark.crash, pytest.mark.postgres]

REDIS_DB = 7


class CeleryBench:
    """A bench with Celery workers, the producer app and the broker's keys of this test."""

    def __init__(self, bench: Bench, prefix: str) -> None:
        self.bench = bench
        self.prefix = prefix
        self.app: Celery = make_app(bench.env)
        self.redis = redis.Redis.from_url(bench.env["REDRIVE_REDIS"])

    def workers(self, n: int) -> None:
        logs = [
            self.bench.start(
                [
                    "-m",
                    "celery",
                    "-A",
                    "tests.queues.celery_app",
                    "worker",
                    "--pool=prefork",
                    "--concurrency=1",
                    "--loglevel=INFO",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-n",
                    f"w{i}-{self.prefix}@%h",
                ],
                f"celery{i}",
            )
            for i in range(n)
        ]
        for log in logs:
            wait_for("a celery worker to be ready", lambda log=log: b" ready." in log.read_bytes())

    def send(self, job: str) -> str:
        return str(self.app.send_task("support", args=[job]).id)

    def drained(self) -> bool:
        """No job waits in the queue and none is delivered unacknowledged (ETA retries included)."""
        queued = self.redis.llen(f"{self.prefix}jobs")
        unacked = self.redis.hlen(f"{self.prefix}unacked")
        return queued == 0 and unacked == 0

    def state(self, task_id: str) -> Any:
        return self.app.AsyncResult(task_id)


@pytest.fixture(scope="module")
def celery_bench(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, queue_schema: str
) -> Iterator[CeleryBench]:
    """Two Celery workers for this module's tests (each test has jobs of its own)."""
    prefix = f"rq-{uuid.uuid4().hex[:10]}:"
    env = {
        "REDRIVE_PG": pg_url,
        "REDRIVE_SCHEMA": queue_schema,
        "REDRIVE_REDIS": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "REDRIVE_PREFIX": prefix,
        "REDRIVE_VISIBILITY": "2",
        "REDRIVE_LEASE": "3",
    }
    PostgresJournal(pg_url, schema=queue_schema, max_size=1).close()  # tables before workers
    with bench(tmp_path_factory.mktemp("celery"), env) as made:
        queue = CeleryBench(made, prefix)
        queue.workers(2)
        try:
            yield queue
        finally:
            made.stop()
            keys = list(queue.redis.scan_iter(match=f"{prefix}*"))
            if keys:
                queue.redis.delete(*keys)
            queue.app.close()


def _status(pg_url: str, schema: str, run_id: str) -> str | None:
    journal = PostgresJournal(pg_url, schema=schema, max_size=1)
    try:
        record = journal.get_run(run_id)
        return None if record is None else record.status
    finally:
        journal.close()


def _finished(queue: CeleryBench, pg_url: str, schema: str, jobs: list[str]) -> None:
    for job in jobs:
        wait_for(
            f"run support:{job} to succeed",
            lambda job=job: _status(pg_url, schema, f"support:{job}") == "succeeded",
        )
    wait_for("every delivery to be acknowledged", queue.drained)


def test_a_redelivery_while_the_first_worker_runs_waits_for_it(
    celery_bench: CeleryBench, pg_url: str, queue_schema: str
) -> None:
    """The visibility timeout (2 s) lapses while open_ticket runs (5 s): the broker hands the
    job to the second worker, which finds the run leased (busy) and retries it later; when
    it runs again the run is finished and replays. One ticket, one email, each model call
    paid once."""
    for trial in range(TRIALS):  # one job at a time: the other worker is free to take it
        job = f"alive{trial}"
        celery_bench.bench.hold(job, "open_ticket", 5)
        task_id = celery_bench.send(job)
        _finished(celery_bench, pg_url, queue_schema, [job])
        celery_bench.bench.assert_once(job)
        assert celery_bench.state(task_id).state == "SUCCESS"
        outcomes = celery_bench.bench.outcomes(job)
        assert outcomes["busy"] >= 1, outcomes  # the job was redelivered while it ran
        assert set(outcomes) == {"busy", "done"}, outcomes


def test_a_worker_killed_after_a_model_call_is_resumed_without_paying_it_again(
    celery_bench: CeleryBench, pg_url: str, queue_schema: str
) -> None:
    """SIGKILL inside send_email (after two model calls and the ticket): Celery requeues the
    job (reject_on_worker_lost); the redelivery is busy until the dead worker's lease lapses,
    then resumes: both model calls and the ticket replay, the email runs again under the same
    idempotency key, the last model call is made once."""
    for trial in range(TRIALS):
        job = f"killed{trial}"
        celery_bench.bench.hold(job, "send_email", 60)
        task_id = celery_bench.send(job)
        celery_bench.bench.kill_inside(job, "send_email")
        _finished(celery_bench, pg_url, queue_schema, [job])
        celery_bench.bench.assert_once(job, emails=2)
        assert celery_bench.state(task_id).state == "SUCCESS"


def test_a_worker_killed_inside_a_side_effect_parks_the_run_for_a_person(
    celery_bench: CeleryBench, pg_url: str, queue_schema: str
) -> None:
    """SIGKILL inside open_ticket (not restart-safe): the redelivered job does not open a second
    ticket, and is not silently acknowledged either: the task fails with RunParkedError naming
    the run and `redrive resolve`, Celery does not retry it, `redrive runs --status blocked`
    lists the run. After `redrive resolve ... --done` and the job enqueued again, the run
    finishes: one ticket, each model call paid once."""
    url = f"{pg_url}?schema={queue_schema}"
    for trial in range(TRIALS):
        job = f"parked{trial}"
        run_id = f"support:{job}"
        celery_bench.bench.hold(job, "open_ticket", 60)
        task_id = celery_bench.send(job)
        celery_bench.bench.kill_inside(job, "open_ticket")
        result = wait_for(
            "the job to fail parked",
            lambda task_id=task_id: (
                celery_bench.state(task_id).failed() and celery_bench.state(task_id)
            ),
        )
        wait_for("every delivery to be acknowledged", celery_bench.drained)
        error = result.result
        assert type(error).__name__ == "RunParkedError", repr(error)
        assert run_id in str(error) and "redrive resolve" in str(error)
        assert _status(pg_url, queue_schema, run_id) == "running"
        assert len(celery_bench.bench.started(job, "open_ticket")) == 1
        assert celery_bench.bench.model_calls(job) == {0: 1}

        celery_bench.bench.resolve_parked(url, job)  # a person settles it
        celery_bench.send(job)
        _finished(celery_bench, pg_url, queue_schema, [job])
        celery_bench.bench.assert_once(job)


def test_several_workers_and_duplicate_jobs_run_each_side_effect_once(
    celery_bench: CeleryBench, pg_url: str, queue_schema: str
) -> None:
    """Two workers, four jobs each enqueued twice (an at-least-once producer): every job's
    run finishes once; no ticket, email or model call twice."""
    jobs = [f"many{t}-{i}" for t in range(TRIALS) for i in range(4)]
    for job in jobs:
        celery_bench.bench.hold(job, "open_ticket", 0.5)
        celery_bench.send(job)
        celery_bench.send(job)
    _finished(celery_bench, pg_url, queue_schema, jobs)
    for job in jobs:
        celery_bench.bench.assert_once(job)
        assert set(celery_bench.bench.outcomes(job)) <= {"busy", "done"}


def test_a_rate_limited_model_call_pauses_the_run_and_celery_retries_it_later(
    celery_bench: CeleryBench, pg_url: str, queue_schema: str
) -> None:
    """The model refuses the second turn of a job once with 429 and ``Retry-After: 1`` (after
    the ticket was opened): the run stops ``paused`` with the refusal as its reason, the
    delivery's verdict is ``paused`` and Celery retries the job after the countdown; the
    retry resumes the run: the ticket and the first model call replay, the refused turn is
    asked again, the job succeeds. One ticket, one email, the refused turn asked twice."""
    bench = celery_bench.bench
    with bench.refusing("paused") as refused:
        for trial in range(TRIALS):
            job = f"paused{trial}"
            task_id = celery_bench.send(job)
            _finished(celery_bench, pg_url, queue_schema, [job])
            print(bench.account(job))
            assert refused.count(job) == 1
            assert bench.model_calls(job) == {0: 1, 1: 2, 2: 1}, bench.logs()[-3000:]
            assert len(bench.started(job, "open_ticket")) == 1
            assert len(bench.started(job, "send_email")) == 1
            outcomes = bench.outcomes(job)
            # the broker may hand out a copy of a delivery held past its visibility timeout
            # (busy, then done by replay): at least once, each side effect still once
            assert outcomes["paused"] == 1 and outcomes["done"] >= 1, outcomes
            assert set(outcomes) <= {"paused", "busy", "done"}, outcomes
            assert celery_bench.state(task_id).state == "SUCCESS"


@pytest.mark.parametrize(("refusals", "after"), [(1, 5), (3, 5)])
def test_a_retry_after_longer_than_the_visibility_timeout_runs_each_side_effect_once(
    celery_bench: CeleryBench, pg_url: str, queue_schema: str, refusals: int, after: int
) -> None:
    """celery#3270's shape: a retry whose countdown outlives the broker's visibility timeout
    (``Retry-After: 5`` against 2 s) is held unacknowledged and handed out again. The model
    refuses the job's second turn ``refusals`` times in a row; the run pauses, Celery retries
    it, the run finishes: one ticket, one email, the refused turn asked ``refusals + 1``
    times, every delivery acknowledged."""
    bench = celery_bench.bench
    with bench.refusing(f"late{refusals}-", times=refusals, retry_after=after) as refused:
        for trial in range(TRIALS):
            job = f"late{refusals}-{trial}"
            task_id = celery_bench.send(job)
            _finished(celery_bench, pg_url, queue_schema, [job])
            print(bench.account(job))
            assert refused.count(job) == refusals
            assert bench.model_calls(job) == {0: 1, 1: refusals + 1, 2: 1}, bench.account(job)
            assert len(bench.started(job, "open_ticket")) == 1
            assert len(bench.started(job, "send_email")) == 1
            outcomes = bench.outcomes(job)
            assert outcomes["paused"] >= 1 and outcomes["done"] >= 1, outcomes
            assert set(outcomes) <= {"paused", "busy", "done"}, outcomes
            assert celery_bench.state(task_id).state == "SUCCESS"
