"""procrastinate: a job's run, its outcome carried out with procrastinate's retry and failure.

Declare the task with :data:`RETRY` (or :func:`retry_strategy`) and open the
job's run with :func:`run`::

    from redrive.queues import procrastinate as rq

    @app.task(retry=rq.RETRY)
    async def handle(job_id: str, text: str) -> str:
        async with rq.run(JOURNAL_URL, f"support:{job_id}", input={"text": text}) as run:
            return run.finish(await agent(text))

What each delivery comes to (:func:`redrive.queues.judge`), in procrastinate's terms:

- the run finished, or was finished already and is replayed: the job succeeds;
- another worker holds the run (a duplicate job, or a dead worker's lease not yet
  lapsed): the job is retried once that lease lapses (not counted against
  ``max_attempts``);
- the run stopped resumable (a provider outage, a journal write failure): the job
  is retried after ``backoff`` seconds, up to ``max_attempts`` attempts;
- a person must decide (a side effect in flight, a divergence): the job fails
  with :class:`redrive.queues.RunParkedError` naming the run and the commands (no
  retry; the run is listed by ``redrive runs --status blocked``);
- the run ended failed or cancelled: the job fails with the run's error.

A worker killed mid-job leaves its job ``doing``: procrastinate hands it out
again only when asked, so run :func:`requeue_stalled` periodically (a periodic
task, or cron): it retries the jobs of workers whose heartbeat stopped.

Needs ``pip install 'redrive[procrastinate]'``.
"""

from __future__ import annotations

import datetime
from typing import Final, Unpack

from ..replay import RunOptions
from ..storage import Journal
from ._run import QueueRun, missing_extra
from ._verdict import Outcome, Verdict, no_retry

try:
    import procrastinate
    from procrastinate.jobs import Job
    from procrastinate.retry import BaseRetryStrategy, RetryDecision
except ImportError as err:  # pragma: no cover - exercised by the no-extras test
    raise missing_extra("procrastinate", "procrastinate", "procrastinate", err) from err

__all__ = [
    "RETRY",
    "ProcrastinateCarrier",
    "RetryLater",
    "RunRetryStrategy",
    "requeue_stalled",
    "retry_strategy",
    "run",
]


class RetryLater(Exception):
    """Raised at the end of a delivery whose job should run again later (see :class:`Verdict`).

    Attributes:
        verdict: the delivery's verdict (``BUSY``, ``TRANSIENT`` or ``PAUSED``, with its delay
            in seconds).
    """

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


class RunRetryStrategy(BaseRetryStrategy):
    """procrastinate's retry strategy for redrive jobs: retries :class:`RetryLater` only.

    Args:
        max_attempts: attempts allowed for ``TRANSIENT`` and ``PAUSED`` outcomes (None: no limit);
            ``BUSY`` outcomes are always retried (the run's holder progresses or its
            lease lapses).
    """

    def __init__(self, max_attempts: int | None = 10) -> None:
        self.max_attempts = max_attempts

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> RetryDecision | None:
        """Retry a :class:`RetryLater` after its verdict's delay; give up on anything else."""
        if not isinstance(exception, RetryLater):
            return None
        verdict = exception.verdict
        if (
            verdict.outcome in (Outcome.TRANSIENT, Outcome.PAUSED)
            and self.max_attempts is not None
            and job.attempts >= self.max_attempts
        ):
            return None
        delay = datetime.timedelta(seconds=verdict.delay or 0.0)
        return RetryDecision(retry_at=datetime.datetime.now(datetime.UTC) + delay)


def retry_strategy(max_attempts: int | None = 10) -> RunRetryStrategy:
    """Return a :class:`RunRetryStrategy` (``@app.task(retry=retry_strategy(5))``)."""
    return RunRetryStrategy(max_attempts)


#: The default strategy: ``@app.task(retry=RETRY)``.
RETRY: Final[RunRetryStrategy] = RunRetryStrategy()


class ProcrastinateCarrier:
    """Carries a :class:`~redrive.queues.Verdict` out for a procrastinate job."""

    def plan(self, verdict: Verdict) -> Verdict:
        """``verdict`` as it is (the retry strategy waits its delay)."""
        return verdict

    def carry(self, verdict: Verdict) -> BaseException | None:
        """Return :class:`RetryLater` (the strategy retries it), a parked error, or None."""
        return RetryLater(verdict) if verdict.retry else no_retry(verdict)


def run(
    journal: Journal | str,
    run_id: str,
    *,
    backoff: float = 1.0,
    **options: Unpack[RunOptions],
) -> QueueRun:
    """Open ``run_id`` for this delivery of a procrastinate job (``async with`` or ``with``).

    Args:
        journal: the run's journal, or its URL.
        run_id: the run, named after the job (``f"support:{job_id}"``).
        backoff: seconds before retrying a delivery that stopped resumable.
        **options: :func:`redrive.run`'s options; ``lease`` defaults to
            :data:`redrive.queues.QUEUE_LEASE` seconds on every journal.

    Returns:
        A :class:`redrive.queues.QueueRun`; the task must be declared with
        ``retry=RETRY`` (or :func:`retry_strategy`) for its retries to happen.
    """
    return QueueRun(journal, run_id, carrier=ProcrastinateCarrier(), backoff=backoff, **options)


async def requeue_stalled(
    app: procrastinate.App, *, seconds_since_heartbeat: float = 30.0, queue: str | None = None
) -> list[int]:
    """Hand out again the jobs of workers whose heartbeat stopped (killed, lost); return their ids.

    Each job's run is then resumed by the worker that takes it: once the dead
    worker's run lease lapses, finished steps replay and the step it was in
    goes on (or is parked when it was a side effect in flight).

    Args:
        app: the procrastinate app (open).
        seconds_since_heartbeat: a worker silent this long (seconds) counts as dead; keep
            it above the workers' ``update_heartbeat_interval``.
        queue: only this queue's jobs (None: every queue).
    """
    stalled = await app.job_manager.get_stalled_jobs(
        queue=queue, seconds_since_heartbeat=seconds_since_heartbeat
    )
    ids: list[int] = []
    for job in stalled:
        await app.job_manager.retry_job(job)
        if job.id is not None:
            ids.append(job.id)
    return ids
