"""Job queues that redeliver: a job's run, and its outcome carried out by the queue.

A queue delivers a job at least once: again when its worker died (a killed
process, a lost connection), and sometimes while the first worker still runs
it (a visibility timeout shorter than the job, a duplicate job). redrive makes
each delivery of the same job resume the same run (name the run after the job,
``f"support:{job_id}"``), under a run lease taken by default
(:data:`QUEUE_LEASE`, on every journal), so one worker executes the run at a
time and a redelivered job never pays for a finished model call again nor
repeats a side effect. What one delivery came to (:func:`judge`) is carried
out with the queue's own mechanism:

=================  ===============================================================
outcome            what the queue does with the job
=================  ===============================================================
``done``           acknowledged (the run finished, or is replayed finished)
``suspended``      acknowledged; enqueue the job again once the approval is decided
``busy``           retried when the other worker's lease lapses (not counted)
``transient``      retried after a back-off (counted against the queue's limit)
``paused``         the run stopped ``paused`` (a rate limit, retries used up): retried
                   after the provider's ``Retry-After`` or the back-off (counted); when
                   waiting cannot clear it (a quota, a budget): failed with
                   :class:`RunParkedError` naming ``redrive resume``; the run stays
                   ``paused`` either way (``redrive runs --status paused``)
``parked``         failed with :class:`RunParkedError` naming the run and the
                   commands that settle it; no retry; ``redrive runs --status
                   blocked`` lists the run
``failed``         failed with the run's error; no retry
=================  ===============================================================

- :mod:`redrive.queues.celery`: Celery (extra ``celery``).
- :mod:`redrive.queues.procrastinate`: procrastinate, on PostgreSQL (extra
  ``procrastinate``).

Each adapter imports its queue when imported, so importing one without its
extra raises ``ImportError`` naming the extra to install; this package needs
neither.
"""

from __future__ import annotations

from ._run import Carrier, QueueRun
from ._verdict import QUEUE_LEASE, Outcome, RunParkedError, Verdict, judge, parked_error

__all__ = [
    "QUEUE_LEASE",
    "Carrier",
    "Outcome",
    "QueueRun",
    "RunParkedError",
    "Verdict",
    "judge",
    "parked_error",
]
