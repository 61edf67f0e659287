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
from typing import Any

from . import floor

SYSTEMS = [
    "redrive-duckdb",
    "redrive-memory",
    "redrive-postgres",
    "dbos",
    "langgraph",
    "vcrpy",
    "vcrpy-body",
]
CANNOT = {
    "redrive-duckdb": "",
    "redrive-memory": "not durable (tests, replay)",
    "redrive-postgres": "",
    "dbos": "no full replay of a finished run (returns its stored output); no model/tool "
    "argument drift check; no export file",
    "langgraph": "no step replay (resumes from the last checkpoint; time travel re-executes "
    "nodes live); records state, not model requests",
    "vcrpy": "HTTP only: no tool journal, no crash-resume (cassette written at exit), "
    "no in-flight guard",
    "vcrpy-body": "as vcrpy; body matching scans the cassette per request",
}


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


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.1f}x"


def measure_all(quick: bool, work: str) -> dict[str, Any]:
    """Run every measurement; return the raw figures by system."""
    n_record = 1000
    n_resume = (10, 1000) if quick else (10, 1000, 10000)
    n_replay = 1000
    n_large = 20_000 if quick else 500_000  # steps; frames are about twice as many
    out: dict[str, Any] = {
        "sizes": {"record": n_record, "resume": n_resume, "replay": n_replay, "large": n_large}
    }
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
                    row["resume"][n] = _call(system, "resume", n, sub)["resume_s"]
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
    return out


def report(data: dict[str, Any]) -> str:
    """Format the figures as Markdown tables (ratios to the baseline and to redrive)."""
    lines: list[str] = []
    sizes = data["sizes"]
    ref = data.get("redrive-duckdb", {})

    def per_step(row: dict[str, Any]) -> tuple[float | None, float | None]:
        rec = row.get("record")
        if not rec:
            return None, None
        n = sizes["record"]
        return (rec["record_s"] - rec["plain_s"]) / n, rec["plain_s"] / n

    ref_over, _ = per_step(ref)
    resume_ns = sizes["resume"]
    head = ["system", "record overhead/step", "x plain", "x redrive"]
    head += [f"resume @{n}" for n in resume_ns]
    head += ["replay steps/s", "replay x plain", "bytes/step", "peak MB (replay)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for system in SYSTEMS:
        row = data.get(system, {})
        if "error" in row and "record" not in row:
            lines.append(f"| {system} | not run: {row['error']} |" + " |" * (len(head) - 2))
            continue
        over, plain = per_step(row)
        cells = [
            system,
            _fmt_time(over),
            _ratio((over or 0) + (plain or 0), plain),
            _ratio(over, ref_over),
        ]
        for n in resume_ns:
            cells.append(_fmt_time(row.get("resume", {}).get(n)) if "resume" in row else "cannot")
        rep = row.get("replay")
        if rep:
            rate = sizes["replay"] / rep["replay_s"]
            cells += [f"{rate:,.0f}", _ratio(rep["replay_s"], rep["plain_s"])]
        elif system == "dbos" and row.get("resume"):
            big = max(row["resume"])
            cells += [f"{big / row['resume'][big]:,.0f} (via recovery)", "-"]
        else:
            cells += ["cannot", "-"]
        rec = row.get("record", {})
        size = rec.get("file_bytes", rec.get("bytes"))
        cells.append(f"{size / sizes['record']:,.0f}" if size else "-")
        cells.append(f"{rep['peak_kb'] / 1024:.1f}" if rep and "peak_kb" in rep else "-")
        lines.append("| " + " | ".join(cells) + " |")
        if row.get("error"):
            lines.append(f"| ↳ {system} partly failed: {row['error']} |" + " |" * (len(head) - 2))
    lines.append("")
    lines.append(
        "What each cannot do: " + "; ".join(f"**{s}**: {c}" for s, c in CANNOT.items() if c)
    )
    fl = data["floor"]
    lines.append("")
    lines.append("Machine floor (medians):")
    lines.append(
        f"- append 2 KB + fsync: {_fmt_time(fl['fsync_2k'])}; "
        f"1,000 appends + one fsync, per frame: {_fmt_time(fl['group_fsync_per_frame'])}"
    )
    lines.append(
        f"- msgpack pack+unpack of a {fl['frame_bytes']:.0f} B frame: "
        f"{_fmt_time(fl['msgpack_2k'])}; redrive canonical encode+decode: "
        f"{_fmt_time(fl['canonical_2k'])}; xxh3-128: {_fmt_time(fl['xxh3_2k'])}"
    )
    wr = data["writes"]
    lines.append(
        f"- durable writes per side-effecting tool step: {wr['tool_step']:.2f}; "
        f"per model step: {wr['model_step_group']:.2f} (group commit), "
        f"{wr['model_step_each']:.2f} (model_commit='each')"
    )
    rec = ref.get("record")
    if rec:
        pair = (rec["record_s"] - rec["plain_s"]) / (sizes["record"] / 2)
        lines.append(
            f"- redrive DuckDB, one model step + one tool step: {_fmt_time(pair)} = "
            f"{pair / (2 * fl['fsync_2k']):.1f}x the two fsyncs it must do "
            f"({_fmt_time(2 * fl['fsync_2k'])})"
        )
    for n in (sizes["replay"], sizes["large"]):
        peak = ref.get(f"peak-{n}")
        if peak:
            lines.append(
                f"- redrive DuckDB replay of {peak['frames']:,} frames: "
                f"{_fmt_time(peak['replay_s'] / peak['frames'])} per frame, "
                f"peak memory growth {peak['peak_kb'] / 1024:.1f} MB"
            )
    gr = data["growth"]
    lines.append(
        "- journal bytes/step (logical): fixed 2 KB requests "
        + ", ".join(f"N={n}: {v:,.0f}" for n, v in gr["fixed"].items())
        + "; whole conversation re-sent each request "
        + ", ".join(f"N={n}: {v:,.0f}" for n, v in gr["conversation"].items())
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and print the report; returns the exit code."""
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    parser.add_argument("--json", metavar="PATH", help="also write the raw figures here")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="redrive-bench-")
    try:
        data = measure_all(args.quick, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stamp = datetime.date.today().isoformat()
    print(
        f"redrive benchmarks, {stamp}, {platform.node()} ({platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}), "
        f"{'quick' if args.quick else 'full'} size; N steps = N/2 model + N/2 tool calls; "
        f"record N={data['sizes']['record']}, replay N={data['sizes']['replay']}\n"
    )
    print(report(data))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
