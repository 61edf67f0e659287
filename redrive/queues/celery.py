"""Celery: a task's run, its outcome carried out with Celery's own retry and failure.

Declare the task with late acknowledgement, so a job whose worker dies is
delivered again (``acks_late``; ``reject_on_worker_lost`` requeues it at once
when a prefork child is killed, the broker's visibility timeout otherwise), and
open the job's run with :func:`run`::

    from redrive.queues import celery as rq

    @app.task(bind=True, **rq.TASK_OPTIONS)
    def handle(self, job_id: str, text: str) -> str:
        with rq.run(self, JOURNAL_URL, f"support:{job_id}", input={"text": text}) as run:
            return run.finish(agent(text))

What each delivery comes to (:func:`redrive.queues.judge`), in Celery's terms:

- the run finished, or was finished already and is replayed: the task returns
  (acknowledged, ``SUCCESS``);
- another worker holds the run (``RunBusyError``: a redelivery while the first
  worker still runs it, or before a dead worker's lease lapsed):
  ``self.retry(countdown=...)`` until the lease lapses or the run is finished,
  without counting against ``max_retries``;
- the run stopped resumable (a provider outage, a journal write failure):
  ``self.retry(countdown=backoff)``, counting against the task's ``max_retries``
  (after them the task fails; the run stays ``running`` for ``redrive recover``);
- a person must decide (a side effect in flight, a divergence): the task fails
  with :class:`redrive.queues.RunParkedError` naming the run and the commands
  (no retry; the run is listed by ``redrive runs --status blocked``);
- the run ended failed or cancelled: the task fails with the run's error (no retry).

Needs ``pip install 'redrive[celery]'``.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Unpack

from ..replay import RunOptions
from ..storage import Journal
from ._run import QueueRun, missing_extra
from ._verdict import Outcome, Verdict, no_retry

try:
    from celery import Task
except ImportError as err:  # pragma: no cover - exercised by the no-extras test
    raise missing_extra("celery", "Celery", "celery", err) from err

__all__ = ["TASK_OPTIONS", "CeleryCarrier", "run"]

log = logging.getLogger("redrive.queues")

#: Options for ``@app.task(bind=True, **TASK_OPTIONS)``: acknowledge a job only once its
#: task returned or failed, and requeue it when its worker process is killed.
TASK_OPTIONS: Final[dict[str, Any]] = {"acks_late": True, "reject_on_worker_lost": True}


class CeleryCarrier:
    """Carries a :class:`~redrive.queues.Verdict` out on a bound Celery task.

    Args:
        task: the bound task (``self`` of ``@app.task(bind=True)``), executing this job.
    """

    def __init__(self, task: Task[Any, Any]) -> None:
        self.task = task

    def plan(self, verdict: Verdict) -> Verdict:
        """``verdict`` with its countdown capped at half the broker's visibility timeout.

        A countdown is held by the worker unacknowledged: past the broker's
        visibility timeout (Redis, SQS) the broker hands out a copy of the job.
        """
        visibility = self._visibility_timeout()
        if verdict.delay is None or visibility is None:
            return verdict
        return verdict.delayed(min(verdict.delay, visibility / 2))

    def carry(self, verdict: Verdict) -> BaseException | None:
        """Return Celery's ``Retry`` (the job is sent again), a parked error, or None.

        Raises:
            Exception: the run's error, when a ``TRANSIENT`` outcome used up the task's
                ``max_retries`` (Celery re-raises it; the job fails).
        """
        if verdict.retry:
            countdown = self.plan(verdict).delay
            extra: dict[str, Any] = {}
            if verdict.outcome is Outcome.BUSY:  # the holder progresses or its lease lapses
                extra["max_retries"] = self.task.request.retries + 1
            exc = verdict.error if isinstance(verdict.error, Exception) else None
            retry: BaseException = self.task.retry(
                countdown=countdown, exc=exc, throw=False, **extra
            )
            return retry
        return no_retry(verdict)

    def _visibility_timeout(self) -> float | None:
        """The broker's visibility timeout in seconds (Redis, SQS), or None (AMQP has none)."""
        try:
            options = self.task.app.conf.broker_transport_options or {}
            value = options.get("visibility_timeout")
        except Exception:
            return None
        return float(value) if isinstance(value, int | float) and value > 0 else None


def run(
    task: Task[Any, Any],
    journal: Journal | str,
    run_id: str,
    *,
    backoff: float = 1.0,
    **options: Unpack[RunOptions],
) -> QueueRun:
    """Open ``run_id`` for this delivery of a Celery job; ``with`` gives the :class:`redrive.Run`.

    Args:
        task: the bound task executing the job (``self`` under ``bind=True``).
        journal: the run's journal, or its URL (opened once per worker process; pass a
            URL or open the journal lazily, never before a prefork pool forks).
        run_id: the run, named after the job (``f"support:{job_id}"``).
        backoff: seconds before retrying a delivery that stopped resumable.
        **options: :func:`redrive.run`'s options; ``lease`` defaults to
            :data:`redrive.queues.QUEUE_LEASE` seconds on every journal.

    Returns:
        A :class:`redrive.queues.QueueRun` (use it as ``with``).
    """
    if getattr(task, "acks_late", False) is not True:
        log.warning(
            "task %s is acknowledged before it runs (acks_late is off): a job whose worker "
            "dies is lost to the queue, and its run waits for redrive recover; declare it "
            "with @app.task(bind=True, **redrive.queues.celery.TASK_OPTIONS)",
            getattr(task, "name", task),
        )
    return QueueRun(journal, run_id, carrier=CeleryCarrier(task), backoff=backoff, **options)
