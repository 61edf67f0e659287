"""The lease-takeover experiment: a fenced worker never starts a tool body (issue 12, #1).

Postgres, ``lease=``. Worker A (a real process) commits the claim of a
side-effecting ``refund``, then freezes itself (SIGSTOP) before the body
starts, and stays frozen past its lease. Worker B takes the run over: it
waits out A's lease plus the grace, finds ``refund`` in flight, asks its
``recover()`` (which reads the side-effect log: not done) and runs the body.
Then A is thawed (SIGCONT). Every body appends a line to a side-effect log
outside the processes (``body RUN PID TOKEN TIME``); the test proves from it
that A never started a body after losing its lease, that each refund ran
once, and that B's fencing token is larger than A's epoch.

On today's main (before the fix) A runs the refund body when thawed: a
duplicate side effect. Trials: ``REDRIVE_FENCE_TRIALS`` (default 5 for CI;
200 nightly). Each trial freezes A after a random extra delay (0-60 ms), so
the freeze falls at various points of the lease renewer's cycle.
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.crash.workerproc import Worker as Process
from tests.crash.workerproc import lease_lapsed, wait_until

pytestmark = [pytest.mark.crash, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("REDRIVE_FENCE_TRIALS", "5"))
LEASE = 1.0  # worker A's lease, in seconds


# -- the worker process ----------------------------------------------------------------------


def _effects_path() -> str:
    return os.environ["REDRIVE_FENCE_EFFECTS"]


def _log_body(run_id: str) -> None:
    token = redrive.fencing_token()
    line = f"body {run_id} {os.getpid()} {token} {time.time():.6f}\n".encode()
    fd = os.open(_effects_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _refund_recover(args: dict[str, Any], key: str) -> redrive.Recovery:
    """The external system's answer: a refund is done when its line is in the log."""
    path = Path(_effects_path())
    lines = path.read_text().splitlines() if path.exists() else []
    if any(line.split()[1] == args["run_key"] for line in lines):
        return redrive.Recovery.done({"refunded": args["amount"]})
    return redrive.Recovery.not_done()


@redrive.tool(read_only=True)
def lookup_order(run_key: str) -> dict[str, Any]:
    """Side-effect free."""
    return {"order": run_key, "amount": 42}


@redrive.tool(restart_safe=False, recover=_refund_recover)
def refund(run_key: str, amount: int) -> dict[str, Any]:
    """The side effect that must happen once."""
    _log_body(run_key)
    return {"refunded": amount}


def _say(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def worker(run_id: str, lease: float, freeze: bool, jitter: float) -> None:
    """Run ``run_id`` under a lease; with ``freeze``, SIGSTOP itself once refund is claimed."""
    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(
        os.environ["REDRIVE_PG"], schema=os.environ["REDRIVE_SCHEMA"], max_size=2
    )

    def hook(boundary: str, info: dict[str, Any]) -> None:
        if boundary == "tool_claimed" and info["name"] == "refund":
            time.sleep(jitter)
            _say({"frozen": info["seq"], "pid": os.getpid()})
            os.kill(os.getpid(), signal.SIGSTOP)

    redrive.replay.set_boundary_hook(hook if freeze else None)
    try:
        with redrive.run(journal, run_id, input=run_id, lease=lease, on_busy="wait") as run:
            order = lookup_order(run_id)
            run.finish(refund(run_id, order["amount"]))
        _say({"outcome": "ok", "output": run.output})
    except redrive.ReplayError as exc:
        _say({"outcome": type(exc).__name__, "error": str(exc)})
    finally:
        journal.close()


# -- the parent side -------------------------------------------------------------------------


class _Proc(Process):
    """A worker process of this module."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        super().__init__("tests.crash.test_fencing", env, *args)

    def end(self) -> None:
        self.thaw_and_stop()


def test_a_fenced_worker_never_starts_the_body(pg_url: str, pg_schema: str, tmp_path: Path) -> None:
    """SIGSTOP the holder after its claim past its lease, take over, SIGCONT: one body, B's."""
    from redrive.storage.postgres import PostgresJournal

    effects = tmp_path / "effects.log"
    env = dict(os.environ)
    env.update(
        REDRIVE_PG=pg_url,
        REDRIVE_SCHEMA=pg_schema,
        REDRIVE_FENCE_EFFECTS=str(effects),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    journal = PostgresJournal(pg_url, schema=pg_schema, max_size=2)
    rng = random.Random(12)
    refused = 0
    holders: dict[str, int] = {}
    takers: dict[str, int] = {}
    epochs: dict[str, int] = {}
    try:
        for trial in range(TRIALS):
            run_id = f"fence-{trial}"
            jitter = f"{rng.uniform(0.0, 0.06):.3f}"
            a = _Proc(env, "worker", run_id, str(LEASE), "freeze", jitter)
            try:
                frozen = a.read()
                assert "frozen" in frozen, frozen
                holders[run_id] = frozen["pid"]
                record = journal.get_run(run_id)
                assert record is not None and record.lease_epoch >= 1
                epochs[run_id] = record.lease_epoch
                wait_until(functools.partial(lease_lapsed, journal, run_id))
                b = _Proc(env, "worker", run_id, "30", "go", "0")
                try:
                    done = b.read()
                    takers[run_id] = b.proc.pid
                finally:
                    b.end()
                assert done == {"outcome": "ok", "output": {"refunded": 42}}, done
                a.proc.send_signal(signal.SIGCONT)  # A wakes just before its body
                thawed = a.read()
            finally:
                a.end()
            assert thawed["outcome"] == "LeaseLostError", thawed
            assert "before the body started" in thawed["error"]
            refused += 1
    finally:
        journal.close()
    lines = [line.split() for line in effects.read_text().splitlines()]
    by_run = Counter(line[1] for line in lines)
    # every refund ran exactly once, by the worker that took over; never by a fenced one
    assert by_run == Counter({f"fence-{t}": 1 for t in range(TRIALS)})
    for _, run_id, pid, token, _at in lines:
        assert int(pid) != holders[run_id], f"{run_id}: the fenced worker started the body"
        assert int(pid) == takers[run_id]
        assert int(token) == epochs[run_id] + 1  # the body ran under the new epoch
    print(f"{refused} of {TRIALS} fenced workers refused to start the body; 0 duplicates")


if __name__ == "__main__":
    _, mode, run_id, lease, how, jitter = sys.argv
    assert mode == "worker"
    worker(run_id, float(lease), how == "freeze", float(jitter))
