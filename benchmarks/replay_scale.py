"""Replay cost per frame and memory at growing journal sizes (DuckDB, durable).

Usage: python -m benchmarks.replay_scale [STEPS ...]   (default: 5 1000 20000 100000)

Each size records a run of STEPS read-only tool steps (2 KB results, 2 frames
a step) into a fresh DuckDB journal, reopens it, and replays it in strict mode.
Prints µs per replayed frame and the growth of the process's peak RSS during
the replay: both should stay flat as the journal grows.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time

import redrive
from redrive.storage.duckdb import DuckDBJournal


@redrive.tool(read_only=True)
def get_item(n: int) -> str:
    """A tool whose result is 2 KB."""
    return "r" * 2000


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(steps: int, directory: str) -> tuple[float, float, float]:
    """Return (record µs/step, replay µs/frame, peak RSS growth MB during replay)."""
    path = os.path.join(directory, f"scale-{steps}.duckdb")
    journal = DuckDBJournal(path)
    started = time.perf_counter()
    with redrive.run(journal, "scale"):
        for n in range(steps):
            get_item(n)
    record = (time.perf_counter() - started) / steps * 1e6
    journal.close()
    journal = DuckDBJournal(path)
    base = _peak_mb()
    started = time.perf_counter()
    with redrive.run(journal, "scale"):
        for n in range(steps):
            get_item(n)
    replay = (time.perf_counter() - started) / (2 * steps + 2) * 1e6
    growth = _peak_mb() - base
    journal.close()
    return record, replay, growth


def main(argv: list[str]) -> None:
    """Print one line per size."""
    sizes = [int(a) for a in argv] or [5, 1000, 20000, 100000]
    with tempfile.TemporaryDirectory() as directory:
        print("| steps | frames | record µs/step | replay µs/frame | peak RSS growth (MB) |")
        print("|---|---|---|---|---|")
        for steps in sizes:
            record, replay, growth = measure(steps, directory)
            print(f"| {steps:,} | {2 * steps + 2:,} | {record:.0f} | {replay:.1f} | {growth:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
