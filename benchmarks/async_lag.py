"""Event-loop lag of many async runs on one loop, DuckDB next to Postgres.

``--runs`` concurrent runs share ONE asyncio event loop. Each does ``--steps``
model steps (a ``redrive.model`` async function that awaits 5 ms) and as many
side-effecting tool steps (``@redrive.tool`` async, so each one costs a claim
and an outcome write). A few more runs hold a run lease (``lease=``), and two
workers contend one leased run with ``on_busy="wait"``, so lease waits happen.

A watchdog task sleeps 1 ms in a loop and records how late it wakes up: that
lateness is the event-loop lag, the time the loop could run nothing else.
The report gives the worst and p99 lag, how many ticks were late by more
than 5 ms, the total wall time, and the median of one 2 KB append + fsync
measured in the same invocation (the goal: no single stall longer than about
one fsync). One run per journal is driven before the watchdog starts, so
one-off start-up costs (imports, the first connection, thread start) are
not counted. The machine's load (other processes on its cores) shows up as
lag too: compare figures taken in the same invocation.

Run: ``python -m benchmarks.async_lag [--pg URL] [--runs 50] [--steps N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from typing import Any

import redrive
from redrive.errors import RunBusyError
from redrive.storage import Journal, open_journal

from .floor import machine_floor

DEFAULT_PG = os.environ.get("REDRIVE_PG_URL") or "postgresql://postgres@127.0.0.1:5432/test"
LEASED_RUNS = 4
LEASE_SECONDS = 5.0
#: How long a contending worker waits for the lease holder (seconds).
BUSY_TIMEOUT = 10.0


@redrive.model(name="model:stub")
async def ask(prompt: str, n: int) -> dict[str, Any]:
    """A model call that takes 5 ms of (awaited) network time."""
    await asyncio.sleep(0.005)
    return {"text": f"answer {n} to {prompt}", "n": n}


@redrive.tool(restart_safe=False)
async def charge(run_key: str, n: int) -> int:
    """A side-effecting step with a no-op body."""
    return n


def fsync_median(directory: str) -> float:
    """Return the median seconds of one 2 KB append + fsync to a file in ``directory``."""
    return machine_floor(directory)["fsync_2k"]


async def _watchdog(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(max(0.0, time.perf_counter() - t0 - 0.001))


async def _one_run(journal: Journal, run_id: str, steps: int, **options: Any) -> None:
    async with redrive.run(journal, run_id, input=run_id, **options) as run:
        for n in range(steps):
            reply = await ask(run_id, n)
            await charge(run_id, reply["n"])
        run.finish(steps)


async def _contend(journal: Journal, run_id: str, steps: int) -> int:
    """Two workers on one leased run; the second waits for the first. Returns busy errors."""
    entered = asyncio.Event()
    options: dict[str, Any] = {
        "lease": LEASE_SECONDS,
        "on_busy": "wait",
        "busy_timeout": BUSY_TIMEOUT,
    }

    async def holder() -> None:
        async with redrive.run(journal, run_id, input=run_id, **options) as run:
            entered.set()
            for n in range(steps):
                reply = await ask(run_id, n)
                await charge(run_id, reply["n"])
            run.finish(steps)

    async def waiter() -> None:
        await entered.wait()
        await _one_run(journal, run_id, steps, **options)

    results = await asyncio.gather(holder(), waiter(), return_exceptions=True)
    busy = 0
    for result in results:
        if isinstance(result, RunBusyError):
            busy += 1
        elif isinstance(result, BaseException):
            raise result
    return busy


async def scenario(journal: Journal, *, runs: int, steps: int) -> dict[str, float]:
    """Drive every run on this loop under a watchdog; return lags and wall time (seconds)."""
    prefix = f"lag:{uuid.uuid4().hex[:8]}"
    await _one_run(journal, f"{prefix}:warm-up", 1, lease=LEASE_SECONDS)
    lags: list[float] = []
    stop = asyncio.Event()
    watchdog = asyncio.create_task(_watchdog(lags, stop))
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    jobs: list[Any] = [_one_run(journal, f"{prefix}:{i}", steps) for i in range(runs)]
    jobs += [
        _one_run(journal, f"{prefix}:leased:{i}", steps, lease=LEASE_SECONDS)
        for i in range(LEASED_RUNS)
    ]
    jobs.append(_contend(journal, f"{prefix}:contended", steps))
    results = await asyncio.gather(*jobs)
    wall = time.perf_counter() - t0
    stop.set()
    await watchdog
    ordered = sorted(lags)
    return {
        "worst": ordered[-1],
        "p99": ordered[int(0.99 * (len(ordered) - 1))],
        "late": float(sum(1 for lag in lags if lag > 0.005)),
        "wall": wall,
        "busy_errors": float(results[-1]),
        "samples": float(len(lags)),
    }


def _report(name: str, found: dict[str, float], fsync: float) -> None:
    print(
        f"{name:9} worst lag {found['worst'] * 1e3:9.2f} ms ({found['worst'] / fsync:7.1f} fsyncs)"
        f"  p99 {found['p99'] * 1e3:7.2f} ms  wall {found['wall']:6.2f} s"
        f"  busy errors {int(found['busy_errors'])}  ticks {int(found['samples'])}"
        f" ({int(found['late'])} late > 5 ms)"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the scenario on a DuckDB file and on Postgres and print the lag figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", default=DEFAULT_PG, help="Postgres URL ('' skips Postgres)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--steps", type=int, default=5, help="model steps (and tool steps) a run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        fsync = fsync_median(directory)
        print(
            f"{args.runs} runs (+{LEASED_RUNS} leased, +2 contending), {args.steps} model + "
            f"{args.steps} tool steps each; median fsync {fsync * 1e3:.3f} ms"
        )
        duck = open_journal(os.path.join(directory, "lag.duckdb"))
        try:
            found = asyncio.run(scenario(duck, runs=args.runs, steps=args.steps))
        finally:
            duck.close()
        _report("duckdb", found, fsync)
    if args.pg:
        schema = f"lag_{uuid.uuid4().hex[:8]}"
        pg = open_journal(args.pg, schema=schema, max_size=16)
        try:
            found = asyncio.run(scenario(pg, runs=args.runs, steps=args.steps))
        finally:
            pg.close()
            _drop_schema(args.pg, schema)
        _report("postgres", found, fsync)


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    main()
