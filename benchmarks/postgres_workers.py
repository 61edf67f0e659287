"""Many workers on one journal: steps per second and claim latency, Postgres next to DuckDB.

Each worker executes its own runs of side-effecting tool steps (no-op
bodies), so every step costs a claim (``tool_start`` durable before the body)
and an outcome write. Postgres workers are separate processes; DuckDB allows
one writing process per file, so its "workers" are threads of one process
sharing the journal. Claim latency is the time from the tool call to its
``tool_claimed`` boundary (the claim is durable). Everything is reported as
a ratio against a bare ``INSERT`` round trip on the same Postgres, measured
in the same run.

Run: ``python -m benchmarks.postgres_workers [--url postgresql://...] [--steps 400]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
import uuid
from typing import Any

import redrive
from redrive.replay import set_boundary_hook

DEFAULT_URL = os.environ.get("REDRIVE_PG_URL") or "postgresql://postgres@127.0.0.1:5432/test"
RUNS_PER_WORKER = 8

_claim_started = threading.local()


@redrive.tool(restart_safe=False)
def charge(run_key: str, n: int) -> int:
    """A side-effecting step with a no-op body."""
    return n


def _hook_into(latencies: list[float]) -> None:
    def hook(point: str, info: dict[str, Any]) -> None:
        if point == "tool_claimed":
            latencies.append(time.perf_counter() - _claim_started.t0)

    set_boundary_hook(hook)


def _drive(journal: Any, prefix: str, steps: int, latencies: list[float]) -> int:
    per_run = max(1, steps // RUNS_PER_WORKER)
    done = 0
    for r in range(RUNS_PER_WORKER):
        run_id = f"{prefix}:{r}"
        with redrive.run(journal, run_id, input=r):
            for n in range(per_run):
                _claim_started.t0 = time.perf_counter()
                charge(run_id, n)
                done += 1
    return done


def _pg_worker(url: str, schema: str, prefix: str, steps: int, start: Any, out: Any) -> None:
    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(url, schema=schema, max_size=2)
    latencies: list[float] = []
    _hook_into(latencies)
    start.wait()
    began = time.perf_counter()
    done = _drive(journal, prefix, steps, latencies)
    out.put((done, began, time.perf_counter(), latencies))
    journal.close()


def bare_insert(url: str, schema: str, rounds: int = 400) -> float:
    """Median seconds of one autocommit INSERT of a 2 KB row on Postgres (the baseline)."""
    import psycopg
    from psycopg import sql

    payload = os.urandom(2048)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        conn.execute("CREATE TABLE IF NOT EXISTS bench_bare (id BIGINT PRIMARY KEY, b BYTEA)")
        samples = []
        for i in range(rounds):
            t0 = time.perf_counter()
            conn.execute("INSERT INTO bench_bare VALUES (%s, %s)", [i, payload])
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def claim_vs_bare(url: str, schema: str, rounds: int = 300) -> dict[str, float]:
    """Interleave bare INSERTs and one journal claim (append of a 2 KB frame, fenced).

    Three autocommit round trips from this process to the same server, sampled
    alternately so load drifts hit all alike, each prepared by psycopg after
    the same number of executions:

    * the **bare INSERT of the same frame**: the claim's frame row (the same
      nine columns and values) into a table shaped like ``redrive_frames``
      (``LIKE ... INCLUDING ALL``: the same types and primary key), with no
      check and no run row, through a plain connection (the baseline);
    * a bare INSERT of the frame's payload alone into a two-column table
      ``(id BIGINT PRIMARY KEY, b BYTEA)`` (what this benchmark compared
      against before; reported as ``bare2_*``);
    * the claim: ``journal.append`` of the frame at the run's next seq under
      the run's lease.

    Returns medians and p99s (seconds): ``bare_*`` (the same frame),
    ``bare2_*`` (payload only), ``claim_*``; ``ratio`` = claim median / bare
    median (the goal: at most 1.2) and ``ratio2`` = claim median / bare2 median.
    """
    import psycopg
    from psycopg import sql

    from redrive.frames import GENESIS, Kind, make_frame
    from redrive.storage import RunRecord
    from redrive.storage._sql import FRAME_ATTRS, FRAME_COLUMNS
    from redrive.storage.postgres import PostgresJournal

    payload = os.urandom(2048)
    journal = PostgresJournal(url, schema=schema, max_size=1)
    run_id = f"claim-{uuid.uuid4().hex[:8]}"
    first = make_frame(
        run_id=run_id, seq=0, kind=Kind.RUN_START, name="run", payload={}, prev_chain=GENESIS
    )
    now = time.time()
    journal.create_run(RunRecord(run_id=run_id, created_at=now, updated_at=now), first)
    epoch = journal.acquire_lease(run_id, "bench", 3600)
    prev = first.chain
    bare: list[float] = []
    bare2: list[float] = []
    claim: list[float] = []
    table = f"bench_frames_{uuid.uuid4().hex[:8]}"
    two = f"bench_claim_{uuid.uuid4().hex[:8]}"
    marks = ", ".join(["%s"] * len(FRAME_COLUMNS))
    insert_frame = f"INSERT INTO {table} ({', '.join(FRAME_COLUMNS)}) VALUES ({marks})"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        conn.execute(f"CREATE TABLE {table} (LIKE redrive_frames INCLUDING ALL)")
        conn.execute(f"CREATE TABLE {two} (id BIGINT PRIMARY KEY, b BYTEA)")
        for i in range(rounds):
            frame = make_frame(
                run_id=run_id,
                seq=i + 1,
                kind=Kind.TOOL_START,
                name="charge",
                payload={"blob": payload},
                prev_chain=prev,
                epoch=epoch,
            )
            prev = frame.chain
            row = [getattr(frame, a) for a in FRAME_ATTRS]
            t0 = time.perf_counter()
            conn.execute(insert_frame, row)
            t1 = time.perf_counter()
            journal.append(run_id, [frame], expected_seq=i + 1, epoch=epoch)
            t2 = time.perf_counter()
            conn.execute(f"INSERT INTO {two} VALUES (%s, %s)", [i, payload])
            t3 = time.perf_counter()
            bare.append(t1 - t0)
            claim.append(t2 - t1)
            bare2.append(t3 - t2)
    journal.close()
    out: dict[str, float] = {}
    for name, samples in (("bare", bare), ("bare2", bare2), ("claim", claim)):
        samples.sort()
        out[f"{name}_median"] = statistics.median(samples)
        out[f"{name}_p99"] = samples[int(len(samples) * 0.99)]
    out["ratio"] = out["claim_median"] / out["bare_median"]
    out["ratio2"] = out["claim_median"] / out["bare2_median"]
    return out


def duckdb_bare_insert(path: str, rounds: int = 200) -> float:
    """Median seconds of one committed INSERT of a 2 KB row in a DuckDB file."""
    import duckdb

    payload = os.urandom(2048)
    con = duckdb.connect(path)
    con.execute("CREATE TABLE IF NOT EXISTS bench_bare (id BIGINT PRIMARY KEY, b BLOB)")
    samples = []
    for i in range(rounds):
        t0 = time.perf_counter()
        con.execute("INSERT INTO bench_bare VALUES (?, ?)", [i, payload])
        samples.append(time.perf_counter() - t0)
    con.close()
    return statistics.median(samples)


def postgres_workers(url: str, schema: str, workers: int, steps: int) -> dict[str, float]:
    """Run ``workers`` processes of ``steps`` tool steps each; return throughput and latency."""
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    out: Any = ctx.Queue()
    tag = uuid.uuid4().hex[:6]
    procs = [
        ctx.Process(
            target=_pg_worker, args=(url, schema, f"pg{workers}-{tag}-{i}", steps, start, out)
        )
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    time.sleep(0.5)  # let every worker connect and migrate before the clock starts
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return _summary(results)


def _bare_worker(url: str, table: str, rows: int, start: Any, out: Any) -> None:
    import psycopg

    payload = os.urandom(2048)
    latencies: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        start.wait()
        began = time.perf_counter()
        for _ in range(rows):
            t0 = time.perf_counter()
            conn.execute(f"INSERT INTO {table} (b) VALUES (%s)", [payload])
            latencies.append(time.perf_counter() - t0)
        out.put((rows, began, time.perf_counter(), latencies))


def bare_insert_workers(url: str, schema: str, workers: int, rows: int) -> dict[str, float]:
    """``workers`` processes each doing ``rows`` autocommit INSERTs of a 2 KB row at once.

    The floor of the claim at the same concurrency (issue 26): the claim at 8
    workers is compared with INSERTs at 8 connections, not with one.
    Returns the same keys as :func:`postgres_workers` (``claim_*`` = one INSERT).
    """
    import psycopg
    from psycopg import sql

    table = sql.Identifier(schema, f"bench_bare_{uuid.uuid4().hex[:8]}").as_string(None)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, b BYTEA)")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    out: Any = ctx.Queue()
    procs = [
        ctx.Process(target=_bare_worker, args=(url, table, rows, start, out))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    time.sleep(0.5)  # every worker connected before the clock starts
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return _summary(results)


def duckdb_workers(path: str, workers: int, steps: int) -> dict[str, float]:
    """Run ``workers`` threads sharing one DuckDB journal (one writing process per file)."""
    from redrive.storage.duckdb import DuckDBJournal

    journal = DuckDBJournal(path)
    results: list[tuple[int, float, float, list[float]]] = []
    lock = threading.Lock()
    latencies: list[float] = []
    _hook_into(latencies)
    barrier = threading.Barrier(workers)
    tag = uuid.uuid4().hex[:6]

    def work(i: int) -> None:
        barrier.wait()
        began = time.perf_counter()
        done = _drive(journal, f"dk{workers}-{tag}-{i}", steps, [])
        with lock:
            results.append((done, began, time.perf_counter(), []))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.close()
    set_boundary_hook(None)
    return _summary(
        [(d, b, e, latencies if i == 0 else []) for i, (d, b, e, _) in enumerate(results)]
    )


def _summary(results: list[tuple[int, float, float, list[float]]]) -> dict[str, float]:
    steps = sum(r[0] for r in results)
    wall = max(r[2] for r in results) - min(r[1] for r in results)
    lat = sorted(x for r in results for x in r[3])
    return {
        "steps": steps,
        "steps_per_s": steps / wall,
        "claim_median": statistics.median(lat),
        "claim_p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
    }


def main() -> None:
    """Print the table (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--steps", type=int, default=400, help="tool steps per worker")
    parser.add_argument("--workers", default="1,2,8")
    args = parser.parse_args()
    import psycopg
    from psycopg import sql

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    counts = [int(x) for x in args.workers.split(",")]
    try:
        from redrive.storage.postgres import PostgresJournal

        PostgresJournal(args.url, schema=schema).close()
        bare = bare_insert(args.url, schema)
        with tempfile.TemporaryDirectory() as tmp:
            duck_bare = duckdb_bare_insert(os.path.join(tmp, "bare.duckdb"))
            rows = []
            for n in counts:
                pg = postgres_workers(args.url, schema, n, args.steps)
                dk = duckdb_workers(os.path.join(tmp, f"w{n}.duckdb"), n, args.steps)
                rows.append((n, pg, dk))
    finally:
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    print(
        f"bare INSERT round trip: Postgres {bare * 1e3:.3f} ms, DuckDB {duck_bare * 1e3:.3f} ms"
        f" (medians; ratios below are against the Postgres one, = 1.0)"
    )
    print(
        f"{args.steps} side-effecting tool steps per worker (claim + outcome = 2 durable "
        "writes each); Postgres workers are processes, DuckDB workers threads of one process"
    )
    print()
    print(
        "| workers | backend | steps/s | steps/s x bare INSERT | claim median | "
        "claim median / bare | claim p99 | claim p99 / bare |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, pg, dk in rows:
        for name, m in (("postgres", pg), ("duckdb", dk)):
            print(
                f"| {n} | {name} | {m['steps_per_s']:.0f} | {m['steps_per_s'] * bare:.3f} | "
                f"{m['claim_median'] * 1e3:.2f} ms | {m['claim_median'] / bare:.1f} | "
                f"{m['claim_p99'] * 1e3:.2f} ms | {m['claim_p99'] / bare:.1f} |"
            )


if __name__ == "__main__":
    main()
