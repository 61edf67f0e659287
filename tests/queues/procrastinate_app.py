"""The procrastinate app of the queue tests, and its worker.

Run a worker with ``python -m tests.queues.procrastinate_app NAME``.

Its tables live in the schema ``REDRIVE_SCHEMA`` of ``REDRIVE_PG`` (one per test
module), next to the journal's. The worker beats every 0.5 s, so a killed one
counts as stalled after about a second
(:func:`redrive.queues.procrastinate.requeue_stalled`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Mapping

import procrastinate

from redrive.queues import procrastinate as rq
from tests.queues.agent import aagent, journal


def make_app(environ: Mapping[str, str]) -> procrastinate.App:
    """The app for the settings in ``environ`` (the workers' and the test's, alike)."""
    made = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=environ.get("REDRIVE_PG", "postgresql://postgres@127.0.0.1:5432/test"),
            kwargs={"options": f"-c search_path={environ.get('REDRIVE_SCHEMA', 'public')}"},
        )
    )

    @made.task(name="support", retry=rq.RETRY)
    async def support(job: str) -> str:
        """One support job: its run is ``support:{job}``."""
        lease = float(environ.get("REDRIVE_LEASE", "3"))
        async with rq.run(journal(), f"support:{job}", input={"job": job}, lease=lease) as run:
            return str(run.finish(await aagent(job)))

    return made


async def _work(name: str) -> None:
    app = make_app(os.environ)
    async with app.open_async():
        await app.run_worker_async(
            name=name,
            concurrency=1,
            fetch_job_polling_interval=0.2,
            update_heartbeat_interval=0.5,
            stalled_worker_timeout=2.0,
            listen_notify=False,
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(_work(sys.argv[1] if len(sys.argv) > 1 else "worker"))
