"""The Celery app of the queue tests: Redis broker and results, one task running the support job.

Settings from the environment (besides :mod:`tests.queues.agent`'s):
``REDRIVE_REDIS`` (the Redis URL, a database of its own), ``REDRIVE_PREFIX``
(every key of this test under its own prefix), ``REDRIVE_VISIBILITY`` (the
broker's visibility timeout, seconds) and ``REDRIVE_LEASE`` (the run lease, seconds).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from celery import Celery

from redrive.queues import celery as rq
from tests.queues.agent import agent, journal


def make_app(environ: Mapping[str, str]) -> Celery:
    """The app for the settings in ``environ`` (the workers' and the test's, alike)."""
    redis = environ.get("REDRIVE_REDIS", "redis://127.0.0.1:6379/5")
    prefix = environ.get("REDRIVE_PREFIX", "redrive-test:")
    made = Celery("redrive_queue_test", broker=redis)
    made.conf.update(
        result_backend=redis,
        result_backend_transport_options={"global_keyprefix": prefix},
        broker_transport_options={
            "global_keyprefix": prefix,
            "visibility_timeout": float(environ.get("REDRIVE_VISIBILITY", "2")),
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        task_default_queue="jobs",
    )
    return made


app = make_app(os.environ)


@app.task(bind=True, name="support", **rq.TASK_OPTIONS)
def support(self: object, job: str) -> str:
    """One support job: its run is ``support:{job}``."""
    lease = float(os.environ.get("REDRIVE_LEASE", "3"))
    with rq.run(self, journal(), f"support:{job}", input={"job": job}, lease=lease) as run:  # type: ignore[arg-type]
        return str(run.finish(agent(job)))
