"""Conformance-matrix cells in a child process that is killed at a chosen boundary.

Usage: ``python -m tests.integrations.matrix_child JOBS.json``. JOBS is a list
of jobs run in order; each runs one scenario (tests/integrations/matrix_drivers.py and the others)
inside ``redrive.run`` with its cell's run id, journal, side-effect log and
scripted server, and prints one JSON line ``{"cell", "output"}`` or
``{"cell", "error"}``. A job with ``"kill"`` set SIGKILLs this process at that
boundary (the boundaries the server cannot see: inside the tool, after a
session write, before ``run.finish``); the server kills it at a model call
(tests/integrations/test_conformance_matrix.py). So one process resumes the
previous cell and runs the next one until it dies: N cells cost N+1 processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redrive

PROMPT = "Ada's order arrived damaged; email her an apology."

#: the environment variable naming the boundary the running job dies at (set per job)
KILL_AT = "REDRIVE_MATRIX_KILL_AT"


def die_at(boundary: str) -> None:
    """SIGKILL this process if the running job is to die at ``boundary``."""
    if os.environ.get(KILL_AT) == boundary:
        os.kill(os.getpid(), signal.SIGKILL)


class Effects:
    """The side-effect log outside the process: one fsynced line per email sent."""

    def __init__(self, path: str) -> None:
        self.path = path

    def send(self, to: str, key: str) -> str:
        """Send the email (append the line), then maybe die with its result unrecorded."""
        with open(self.path, "a") as log:
            log.write(f"email to {to} key={key}\n")
            log.flush()
            os.fsync(log.fileno())
        die_at("in_tool")
        return f"sent to {to}"

    def recover(self, args: dict[str, Any], key: str) -> redrive.Recovery:
        """Look the in-flight call up in the log (as one asks a mail provider)."""
        lines = Path(self.path).read_text().splitlines() if Path(self.path).exists() else []
        if any(line.endswith(f"key={key}") for line in lines):
            return redrive.Recovery.done(f"sent to {args['to']}")
        return redrive.Recovery.not_done()


def _run_job(job: dict[str, Any], drive: Callable[..., Any], face: str) -> Any:
    """Run one job's scenario in its run; return what the scenario returned."""
    journal = redrive.open_journal(job["journal"])
    options: dict[str, Any] = {"live": job.get("mode", "live") == "live"}
    try:
        if face == "own":  # the scenario opens its runs itself (several deliveries)
            return drive(job, journal)
        if face == "sync":
            with redrive.run(journal, job["run_id"], **options) as run:
                output = drive(job, run)
                die_at("before_finish")
                return run.finish(output)

        async def main() -> Any:
            async with redrive.run(journal, job["run_id"], **options) as run:
                output = await drive(job, run)
                die_at("before_finish")
                return run.finish(output)

        return asyncio.run(main())
    finally:
        journal.close()


#: the boundaries at which the scripted server answers a transient error (matrix_cells.py)
TRANSIENT = {"error_1": "503", "error_2": "429"}


def _die_after_transient(job: dict[str, Any], exc: BaseException) -> None:
    """At a transient-error boundary, die once the provider's error reached the job.

    The worker gives up on the job (the queue redelivers it); the next process
    resumes the run. Any other error is printed instead, and the cell fails.
    """
    status = TRANSIENT.get(job.get("kill") or "")
    if status is not None and status in "".join(traceback.format_exception(exc)):
        os.kill(os.getpid(), signal.SIGKILL)


def main(path: str) -> None:
    """Run every job of the JOBS file in order."""
    from tests.integrations.matrix_bare import BARE_DRIVERS
    from tests.integrations.matrix_drivers import DRIVERS
    from tests.integrations.matrix_more import MORE_DRIVERS
    from tests.integrations.matrix_signed import SIGNED_DRIVERS
    from tests.integrations.matrix_state import STATE_DRIVERS

    for job in json.loads(Path(path).read_text()):
        os.environ[KILL_AT] = job.get("kill") or ""
        drivers = {**DRIVERS, **BARE_DRIVERS, **MORE_DRIVERS, **STATE_DRIVERS, **SIGNED_DRIVERS}
        drive, face = drivers[job["scenario"]]
        try:
            line: dict[str, Any] = {"cell": job["cell"], "output": _run_job(job, drive, face)}
        except BaseException as exc:
            _die_after_transient(job, exc)
            line = {
                "cell": job["cell"],
                "error": f"{type(exc).__name__}: {exc}"[:2000],
                "trace": traceback.format_exc()[-3000:],
            }
        print(json.dumps(line, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
