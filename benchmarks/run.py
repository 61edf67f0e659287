"""Run every benchmark and print one report: ``python -m benchmarks.run [--quick]``.

Each system's measurement runs in a fresh process (:mod:`benchmarks.peers`)
with the plain-call baseline timed in that same process. A system that cannot
be installed or run here is reported as such, with the reason.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from . import floor, interleaved, replay_cost
from . import rows as goal_rows
from .report import CANNOT, SYSTEMS, full_report, goal_table, goals

__all__ = ["full_report", "goal_table", "goals", "main", "measure_all"]


def _call(system: str, what: str, n: int, directory: str, timeout: float = 1800) -> dict[str, Any]:
    os.makedirs(directory, exist_ok=True)
    result_path = os.path.join(directory, "result.json")
    if os.path.exists(result_path):
        os.unlink(result_path)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers", system, what, str(n), directory],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    if os.path.exists(result_path):
        with open(result_path) as fh:
            data: dict[str, Any] = json.load(fh)
        return data
    if what == "interrupt" and proc.returncode == 0:
        return {}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    raise RuntimeError(f"{system} {what} N={n}: exit {proc.returncode}: {tail[0][:200]}")


def _available(system: str) -> str:
    """Return '' when the system can run here, else the reason it cannot."""
    if system == "redrive-postgres":
        try:
            import redrive.storage.postgres  # noqa: F401
        except ImportError as exc:
            return f"no Postgres journal in this checkout ({exc})"
        try:
            import psycopg

            url = os.environ.get("REDRIVE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
            psycopg.connect(url, connect_timeout=3).close()
        except Exception as exc:
            return f"PostgreSQL not reachable: {type(exc).__name__}"
        return ""
    module = {
        "dbos": "dbos",
        "langgraph": "langgraph.checkpoint.sqlite",
        "vcrpy": "vcr",
        "vcrpy-body": "vcr",
    }.get(system)
    if module is None:
        return ""
    try:
        __import__(module)
    except ImportError as exc:
        return f"not installed: {exc}"
    return ""


_fmt_time = goal_rows.fmt_time


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.1f}x"


def measure_all(
    quick: bool, work: str, resume_sizes: tuple[int, ...] | None = None
) -> dict[str, Any]:
    """Run every measurement; return the raw figures by system.

    ``resume_sizes`` overrides the sizes of the in-process resume against
    LangGraph (issue 26, item 3): ``(1000, 10000)`` adds the slow row to a
    quick run without the full run's other sizes.
    """
    n_record = 1000
    n_resume = (10, 1000) if quick else (10, 1000, 10000)
    n_replay = 1000
    n_large = 20_000 if quick else 500_000  # steps; frames are about twice as many
    n_messages = 200 if quick else 1000
    rounds = 5 if quick else 11  # interleaved rounds of the cycles and whole processes
    out: dict[str, Any] = {
        "sizes": {
            "record": n_record,
            "resume": n_resume,
            "replay": n_replay,
            "large": n_large,
            "messages": n_messages,
            "rounds": rounds,
        },
        "load": {"start": os.getloadavg()},
    }
    resume_dirs: dict[str, dict[int, str]] = {}
    for system in SYSTEMS:
        row: dict[str, Any] = {"cannot": CANNOT[system]}
        out[system] = row
        reason = _available(system)
        if reason:
            row["error"] = reason
            continue
        d = os.path.join(work, system)
        try:
            row["record"] = _call(system, "record", n_record, os.path.join(d, "record"))
            if not system.startswith("vcrpy"):
                row["resume"] = {}
                for n in n_resume:
                    sub = os.path.join(d, f"resume-{n}")
                    _call(system, "interrupt", n, sub)
                    got = _call(system, "resume", n, sub)
                    row["resume"][n] = got["resume_s"]
                    if "startup_s" in got:  # DBOS: start-up apart from the recovery
                        row.setdefault("startup", {})[n] = got["startup_s"]
                    if system in ("redrive-duckdb", "langgraph", "dbos"):
                        resume_dirs.setdefault(system, {})[n] = sub
            if system.startswith(("redrive", "vcrpy")):
                row["replay"] = _call(system, "replay", n_replay, os.path.join(d, "replay"))
            if system == "redrive-duckdb":
                for n in (n_replay, n_large):
                    sub = os.path.join(d, f"large-{n}")
                    _call(system, "prepare", n, sub)
                    row[f"peak-{n}"] = _call(system, "peak", n, sub)
                    shutil.rmtree(sub, ignore_errors=True)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        print(f"  measured {system}", file=sys.stderr, flush=True)
    out["floor"] = floor.machine_floor(work)
    out["writes"] = floor.durable_writes()
    out["growth"] = floor.growth()
    print("  measured the floor", file=sys.stderr, flush=True)
    sizes_whole = [n for n in n_resume if n <= 1000]
    later: list[tuple[str, Callable[[], Any]]] = [
        ("cycles", lambda: interleaved.cycles(work, rounds)),
        (
            "whole",
            lambda: interleaved.whole_process(_call, resume_dirs, sizes_whole, rounds),
        ),
        ("messages", lambda: interleaved.messages(work, n_messages, ("redrive", "langgraph"))),
        ("steps", lambda: floor.step_costs(work)),
        ("pytest_scale", lambda: _pytest_scale(200 if quick else 1000)),
        ("check_jobs", lambda: _check_jobs(200 if quick else 1000, work)),
        ("postgres", lambda: _postgres(quick)),
        (
            "replay_cost",
            lambda: replay_cost.measure(quick, work, resume_sizes=resume_sizes),
        ),  # issue 26 items 2, 3, 5
    ]
    for name, fn in later:
        try:
            out[name] = fn()
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"  measured {name}", file=sys.stderr, flush=True)
    out["load"]["end"] = os.getloadavg()
    return out


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pytest_scale(tests: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.pytest_scale", "--tests", str(tests)],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr or proc.stdout).strip().splitlines()[-1][:300])
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def _check_jobs(runs: int, work: str) -> dict[str, Any]:
    """Seconds of ``redrive check`` over ``runs`` saved runs: ``--jobs 1`` against ``--jobs 0``
    (which measures and picks its workers) and ``--jobs`` one per core, three alternating
    rounds, medians; ``chosen``: the processes ``--jobs 0`` picked in each round (its
    ``--json`` report's ``workers``; 1 is this process alone)."""
    import statistics
    import time

    directory = os.path.join(work, "check-runs")
    os.makedirs(directory, exist_ok=True)
    saved = sorted(
        os.path.join(_ROOT, "fixtures", "runs", "pass", f)
        for f in os.listdir(os.path.join(_ROOT, "fixtures", "runs", "pass"))
        if f.endswith(".rdj")
    )
    for i in range(runs):
        shutil.copy(saved[i % len(saved)], os.path.join(directory, f"run-{i:05d}.rdj"))
    cores = os.cpu_count() or 1
    out: dict[str, Any] = {
        "runs": runs,
        "cores": cores,
        "one": [],
        "auto": [],
        "all": [],
        "chosen": [],
    }
    for jobs in (1, 0, cores) * 3:  # alternating rounds: all see the same load
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "redrive.cli",
                "--json",
                "check",
                "--jobs",
                str(jobs),
                "-I",
                _ROOT,
                directory,
            ],
            capture_output=True,
            text=True,
            cwd=_ROOT,
            timeout=3600,
        )
        took = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError((proc.stderr or proc.stdout).strip().splitlines()[-1][:300])
        out["one" if jobs == 1 else "auto" if jobs == 0 else "all"].append(took)
        if jobs == 0:
            out["chosen"].append(int(json.loads(proc.stdout)["workers"]))
    out["one_s"], out["cores_s"], out["all_s"] = (
        statistics.median(out[k]) for k in ("one", "auto", "all")
    )
    shutil.rmtree(directory, ignore_errors=True)
    return out


def _postgres(quick: bool) -> dict[str, Any]:
    """Claim vs bare INSERT in one process, and claim p50/p99 with 1, 2, 8, 32 workers."""
    reason = _available("redrive-postgres")
    if reason:
        return {"error": reason}
    import uuid

    import psycopg
    from psycopg import sql

    from redrive.storage.postgres import PostgresJournal

    from . import postgres_workers as pw

    url = os.environ.get("REDRIVE_BENCH_PG", pw.DEFAULT_URL)
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {}
    try:
        PostgresJournal(url, schema=schema).close()
        out["claim"] = pw.claim_vs_bare(url, schema)
        steps = 40 if quick else 200
        out["workers"] = {n: pw.postgres_workers(url, schema, n, steps) for n in (1, 2, 8, 32)}
        # the claim at n workers against bare INSERTs at n connections, alternating rounds
        out["concurrent"] = {}
        for n in (2, 8):
            row: dict[str, list[float]] = {"claim": [], "bare": []}
            for _ in range(3):
                row["claim"].append(pw.postgres_workers(url, schema, n, steps)["claim_median"])
                row["bare"].append(pw.bare_insert_workers(url, schema, n, steps)["claim_median"])
            out["concurrent"][n] = row
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return out


def resume_sizes(text: str) -> tuple[int, ...] | None:
    """Parse ``--resume``: ``"1000,10000"`` -> ``(1000, 10000)``; ``""`` -> ``None``.

    Raises ``ValueError`` (worded for the command line) on anything but
    positive step counts separated by commas.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--resume takes step counts separated by commas, got {text!r}")
    return tuple(int(p) for p in parts) or None


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and print the report; returns the exit code."""
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    parser.add_argument("--json", metavar="PATH", help="also write the raw figures here")
    parser.add_argument(
        "--page", metavar="PATH", help="also write the performance page (docs/performance.md)"
    )
    parser.add_argument(
        "--resume",
        default="",
        metavar="N,N",
        help="sizes of the in-process resume against LangGraph (e.g. 1000,10000; "
        "a quick run measures 1000 only)",
    )
    args = parser.parse_args(argv)
    try:
        sizes = resume_sizes(args.resume)
    except ValueError as exc:
        parser.error(str(exc))
    work = tempfile.mkdtemp(prefix="redrive-bench-")
    try:
        data = measure_all(args.quick, work, sizes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data["date"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    data["machine"] = (
        f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()})"
    )
    data["quick"] = args.quick
    if args.json:  # first: the figures survive a formatting error
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=2, default=str)
    print(full_report(data))
    if args.page:
        from . import page

        with open(args.page, "w") as fh:
            fh.write(page.render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
