"""Measurements taken in rounds, each system (or figure and its floor) once per round (issue 26).

A ratio compares figures sampled alternately in the same window, so load
drifting over the run hits both sides alike; every figure keeps its samples
so the report can print its spread (median and p10-p90).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spread(samples: Sequence[float]) -> dict[str, float]:
    """Median, p10 and p90 of ``samples`` (nearest rank); empty dict when there are none."""
    if not samples:
        return {}
    ordered = sorted(samples)
    last = len(ordered) - 1
    return {
        "median": statistics.median(ordered),
        "p10": ordered[round(0.1 * last)],
        "p90": ordered[round(0.9 * last)],
        "n": float(len(ordered)),
    }


def ratios(top: Sequence[float], bottom: Sequence[float]) -> dict[str, float]:
    """Spread of the per-round ratios ``top[i] / bottom[i]`` (same-round pairs)."""
    return spread([a / b for a, b in zip(top, bottom, strict=True) if b > 0])


def _json_child(args: list[str], timeout: float = 600) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, cwd=_ROOT, timeout=timeout
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}: {tail[0][:200]}")
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def cycles(work: str, rounds: int) -> dict[str, Any]:
    """Open + resume + close and open + replay + close, DuckDB and memory, alternating.

    Returns ``{kind: {system: {part: [seconds per round]}}}`` for kind
    ``resume``/``replay``, system ``duckdb``/``memory``, part ``open_s``,
    ``work_s``, ``close_s``, ``total_s`` (see :mod:`benchmarks.cycles`).
    """
    directory = os.path.join(work, "cycles")
    os.makedirs(directory, exist_ok=True)
    _json_child(["benchmarks.cycles", "duckdb", "prepare", directory])
    out: dict[str, Any] = {
        kind: {s: {} for s in ("duckdb", "memory")} for kind in ("resume", "replay")
    }
    for _ in range(rounds):
        for kind in ("resume", "replay"):
            for system in ("duckdb", "memory"):
                got = _json_child(["benchmarks.cycles", system, kind, directory])
                for part, value in got.items():
                    out[kind][system].setdefault(part, []).append(value)
    return out


def whole_process(
    call: Any, directories: dict[str, dict[int, str]], sizes: Sequence[int], rounds: int
) -> dict[str, Any]:
    """Whole-process resume: spawn, import, open, resume to the first live call, exit.

    ``call(system, "resume", n, directory)`` runs :mod:`benchmarks.peers` in a
    fresh process (the run was interrupted there before); its wall time from
    spawn to exit is what a restarted worker waits for; the in-process figure
    it reports (``resume_s``, and DBOS's ``startup_s``) is kept beside it.

    Returns ``{system: {n: {"wall_s": [...], "in_process_s": [...],
    "startup_s": [...]}}}`` (systems whose directory is missing are left out).
    """
    out: dict[str, Any] = {}
    for _ in range(rounds):
        for n in sizes:
            for system, by_size in directories.items():
                directory = by_size.get(n)
                if directory is None:
                    continue
                t0 = time.perf_counter()
                got = call(system, "resume", n, directory)
                wall = time.perf_counter() - t0
                row = out.setdefault(system, {}).setdefault(n, {})
                row.setdefault("wall_s", []).append(wall)
                row.setdefault("in_process_s", []).append(got["resume_s"])
                if "startup_s" in got:
                    row.setdefault("startup_s", []).append(got["startup_s"])
    return out


def messages(work: str, n: int, systems: Sequence[str]) -> dict[str, Any]:
    """Bytes on disk after N steps of an accumulated-messages state, per system."""
    out: dict[str, Any] = {"steps": n}
    for system in systems:
        try:
            out[system] = _json_child(
                ["benchmarks.messages", system, str(n), os.path.join(work, f"messages-{system}")],
                timeout=3600,
            )
        except Exception as exc:
            out[system] = {"error": f"{type(exc).__name__}: {exc}"}
    return out
