"""Many workers on one Postgres journal never pay a model call twice by default (issue 23
item 8, DESIGN C9), with real processes.

Workers are separate Python processes (``python -m tests.crash.test_shared_lease``)
that start the same run at an agreed instant, with the default ``lease``
(``"auto"``: a lease on a journal made for many workers). The model callable
and the tool append a line to a log outside the processes; the tests count
those lines: every model call and every side effect happens once per run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
import redrive.testing
from tests.crash.workerproc import Worker as _Process

pytestmark = [pytest.mark.crash, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 5


# -- the worker side -----------------------------------------------------------------------


def _log(what: str, run_id: str) -> None:
    line = f"{run_id} {what} {os.getpid()}\n".encode()
    fd = os.open(os.environ["REDRIVE_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@redrive.model
def plan(run_id: str, step: str) -> str:
    """The paid model call: logged outside the process each time it is made."""
    _log(f"model:{step}", run_id)
    time.sleep(0.05)  # long enough for the other worker to reach the same step
    return f"plan for {step}"


@redrive.tool(restart_safe=False)
def open_ticket(run_id: str) -> int:
    """A side effect that must happen once."""
    _log("tool:open_ticket", run_id)
    return 4417


def agent(run_id: str) -> dict[str, Any]:
    first = plan(run_id, "first")
    ticket = open_ticket(run_id)
    second = plan(run_id, f"second {ticket}")
    return {"plans": [first, second], "ticket": ticket}


def _journal() -> Any:
    from redrive.storage.postgres import PostgresJournal

    return PostgresJournal(
        os.environ["REDRIVE_PG"], schema=os.environ["REDRIVE_SCHEMA"], max_size=3
    )


def _say(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def _execute(journal: Any, run_id: str, **options: Any) -> dict[str, Any]:
    try:
        with redrive.run(journal, run_id, input=run_id, **options) as run:
            run.finish(agent(run_id))
        return {"run_id": run_id, "outcome": "ok", "output": run.output, "lease": run.lease}
    except redrive.ReplayError as exc:
        reason = getattr(exc, "reason", None)
        return {
            "run_id": run_id,
            "outcome": type(exc).__name__,
            "reason": str(reason) if reason is not None else None,
            "error": str(exc),
        }


def serve() -> None:
    """``go RUN_ID AT ON_BUSY [CRASH]`` lines: at wall time AT, run RUN_ID (default lease).

    With CRASH (a ``boundary:step`` of :mod:`redrive.testing`), the worker takes
    a 1-second lease and SIGKILLs itself there.
    """
    journal = _journal()
    _say({"ready": os.getpid()})
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "go":
            continue
        run_id, at, on_busy = words[1], float(words[2]), words[3]
        options: dict[str, Any] = {"on_busy": on_busy, "busy_timeout": 30}
        if len(words) > 4:
            point, _, name = words[4].partition(":")
            redrive.testing.crash_at(point, name)
            options["lease"] = 1.0
        time.sleep(max(0.0, at - time.time()))
        _say(_execute(journal, run_id, **options))
    journal.close()


# -- the parent side -----------------------------------------------------------------------


@pytest.fixture
def env(pg_url: str, pg_schema: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment of worker processes: the journal and the log of paid calls."""
    values = dict(os.environ)
    values.update(
        REDRIVE_PG=pg_url,
        REDRIVE_SCHEMA=pg_schema,
        REDRIVE_EFFECTS=str(tmp_path / "effects.log"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    yield values


class Worker(_Process):
    """A worker process of this module."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__("tests.crash.test_shared_lease", env)
        assert "ready" in self.read()


def _paid(env: dict[str, str]) -> Counter[tuple[str, str]]:
    path = Path(env["REDRIVE_EFFECTS"])
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((line.split()[0], line.split()[1]) for line in lines)


def _once(run_ids: list[str]) -> Counter[tuple[str, str]]:
    steps = ("model:first", "tool:open_ticket", "model:second")
    return Counter({(r, s): 1 for r in run_ids for s in steps})


def _together(workers: list[Worker], run_id: str, on_busy: str) -> list[dict[str, Any]]:
    at = time.time() + 0.5  # every worker opens the run at this instant
    for w in workers:
        w.send(f"go {run_id} {at} {on_busy}")
    return [w.read() for w in workers]


EXPECTED = {"plans": ["plan for first", "plan for second 4417"], "ticket": 4417}


def test_two_workers_started_together_pay_each_model_call_once(env: dict[str, str]) -> None:
    """Two processes start the same new run at the same instant (default lease, on_busy
    "wait"): both finish with the same output, each model call and the side effect once."""
    run_ids = [f"together-{i}" for i in range(TRIALS)]
    workers = [Worker(env), Worker(env)]
    try:
        for i, run_id in enumerate(run_ids):
            results = _together(workers, run_id, "wait")
            assert [r["outcome"] for r in results] == ["ok", "ok"], results
            assert all(r["output"] == EXPECTED for r in results)
            assert _paid(env) == _once(run_ids[: i + 1])
            assert all(r["lease"] == 30.0 for r in results)  # the default on Postgres
    finally:
        for w in workers:
            w.stop()


def test_the_second_worker_under_on_busy_raise_is_told_the_run_is_leased(
    env: dict[str, str],
) -> None:
    """on_busy="raise": the worker that does not get the lease stops with RunBusyError
    (reason leased) before any step, or replays the run when it came after the end."""
    run_ids = [f"raise-{i}" for i in range(TRIALS)]
    workers = [Worker(env), Worker(env)]
    try:
        for run_id in run_ids:
            results = _together(workers, run_id, "raise")
            outcomes = sorted(r["outcome"] for r in results)
            assert outcomes in (["RunBusyError", "ok"], ["ok", "ok"]), results
            for r in results:
                if r["outcome"] == "RunBusyError":
                    assert r["reason"] == "leased", r
    finally:
        for w in workers:
            w.stop()
    assert _paid(env) == _once(run_ids)


def test_after_the_first_worker_dies_two_resumers_pay_each_model_call_once(
    env: dict[str, str], pg_url: str, pg_schema: str
) -> None:
    """The first worker is SIGKILLed after its first model call was recorded; two workers
    resume the run together (default lease, on_busy "wait"): the rest runs once."""
    from redrive.storage.postgres import PostgresJournal

    run_ids = [f"crashed-{i}" for i in range(TRIALS)]
    for run_id in run_ids:
        victim = Worker(env)
        try:
            victim.send(f"go {run_id} 0 wait model_recorded:model:plan")
            victim.proc.wait(timeout=60)
        finally:
            victim.stop()
        assert victim.proc.returncode == -9
        workers = [Worker(env), Worker(env)]
        try:
            results = _together(workers, run_id, "wait")
        finally:
            for w in workers:
                w.stop()
        assert [r["outcome"] for r in results] == ["ok", "ok"], results
        assert all(r["output"] == EXPECTED for r in results)
    assert _paid(env) == _once(run_ids)
    journal = PostgresJournal(pg_url, schema=pg_schema, max_size=1)
    try:
        assert {journal.get_run(r).status for r in run_ids} == {"succeeded"}  # type: ignore[union-attr]
    finally:
        journal.close()


if __name__ == "__main__":
    serve()
