"""Replay cost per frame and peak memory at growing journal sizes (DuckDB, durable).

Usage: ``python -m benchmarks.replay_scale [--big] [STEPS ...]``
(default sizes: 1,000 and 20,000 steps, i.e. 2,002 and 40,002 frames; ``--big``
adds 500,000 steps, 1,000,002 frames).

Each size records a run of STEPS read-only tool steps (2 KB results, 2 frames a
step) into a fresh DuckDB journal in one process, then replays it in strict mode
in a **fresh process** that did not record (so the recording's own peak does not
hide the replay's). Prints µs per replayed frame and how much the replaying
process's peak RSS grew during the replay (``ru_maxrss`` after minus before):
both should stay flat as the journal grows.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import redrive
from redrive.storage.duckdb import DuckDBJournal


@redrive.tool(read_only=True)
def get_item(n: int) -> str:
    """A tool whose result is 2 KB."""
    return "r" * 2000


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def record(path: str, steps: int) -> float:
    """Record the run; return µs per step."""
    journal = DuckDBJournal(path)
    started = time.perf_counter()
    with redrive.run(journal, "scale"):
        for n in range(steps):
            get_item(n)
    took = (time.perf_counter() - started) / steps * 1e6
    journal.close()
    return took


def replay(path: str, steps: int) -> dict[str, float]:
    """Replay the run (in this process, which must not have recorded it)."""
    journal = DuckDBJournal(path)
    base = _peak_mb()
    started = time.perf_counter()
    with redrive.run(journal, "scale") as run:
        for n in range(steps):
            get_item(n)
    took = time.perf_counter() - started
    growth = _peak_mb() - base
    assert run.live_steps == 0, run
    journal.close()
    return {"replay_us_per_frame": took / (2 * steps + 2) * 1e6, "peak_growth_mb": growth}


def _child(what: str, path: str, steps: int) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.replay_scale", f"--{what}", path, str(steps)],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(steps: int, directory: str) -> dict[str, float]:
    """Record in one child process, replay in a fresh one; return the figures."""
    path = os.path.join(directory, f"scale-{steps}.duckdb")
    result = {"record_us_per_step": _child("record", path, steps), "frames": 2 * steps + 2}
    result.update(_child("replay", path, steps))
    for suffix in ("", ".rdlog", ".wal"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    return result


def main(argv: list[str]) -> None:
    """Print one line per size (or, as a child, one JSON result)."""
    if argv and argv[0] in ("--record", "--replay"):
        fn = record if argv[0] == "--record" else replay
        print(json.dumps(fn(argv[1], int(argv[2]))))
        return
    big = "--big" in argv
    sizes = [int(a) for a in argv if a != "--big"] or [1000, 20000]
    if big:
        sizes.append(500_000)
    with tempfile.TemporaryDirectory() as directory:
        print("| steps | frames | record µs/step | replay µs/frame | peak RSS growth (MB) |")
        print("|---|---|---|---|---|")
        for steps in sizes:
            m = measure(steps, directory)
            print(
                f"| {steps:,} | {m['frames']:,} | {m['record_us_per_step']:.0f} | "
                f"{m['replay_us_per_frame']:.1f} | {m['peak_growth_mb']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
