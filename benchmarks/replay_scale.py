"""Replay cost per frame and peak memory at growing journal sizes (DuckDB, durable).

Usage: ``python -m benchmarks.replay_scale [--big] [STEPS ...]``
(default sizes: 1,000 and 20,000 steps, i.e. 2,002 and 40,002 frames; ``--big``
adds 500,000 steps, 1,000,002 frames).

Each size records a run of STEPS read-only tool steps (2 KB results, 2 frames a
step) into a fresh DuckDB journal in one process, then replays it in strict mode
in a **fresh process** that did not record (so the recording's own peak does not
hide the replay's). Runs of :data:`BULK_STEPS` steps or more are recorded into a
memory journal and copied into DuckDB in large batches (the record column then
says ``bulk``): recording 500,000 steps one durable step at a time would take
most of the benchmark's time. Prints µs per replayed frame and how much the
replaying process's peak RSS grew during the replay (``ru_maxrss`` after minus
before), then whether that growth is flat: every size within
:data:`FLAT_MB` of the smallest size's growth.
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


#: Runs this long or longer are built in bulk (see the module docstring).
BULK_STEPS = 100_000
#: Peak growth within this many MB of the smallest size's counts as flat.
FLAT_MB = 5.0


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


def bulk(path: str, steps: int) -> None:
    """Build the same run as :func:`record` without recording it step by step into DuckDB."""
    import attrs

    from redrive.storage import MemoryJournal, RunUpdate

    memory = MemoryJournal()
    with redrive.run(memory, "scale"):
        for n in range(steps):
            get_item(n)
    done = memory.get_run("scale")
    assert done is not None
    frames = memory.frames("scale")
    journal = DuckDBJournal(path)
    start = attrs.evolve(done, next_seq=0, last_chain="0" * 32, status="running", output=None)
    journal.create_run(start, next(frames))
    batch: list[Any] = []
    seq = 1
    for frame in frames:
        batch.append(frame)
        if len(batch) == 20_000:
            journal.append("scale", batch, expected_seq=seq)
            seq += len(batch)
            batch = []
    journal.append(
        "scale", batch, expected_seq=seq, update=RunUpdate(status=done.status, output=done.output)
    )
    journal.close()


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
    result: dict[str, float] = {"frames": 2 * steps + 2}
    if steps >= BULK_STEPS:
        _child("bulk", path, steps)
        result["record_us_per_step"] = float("nan")
    else:
        result["record_us_per_step"] = _child("record", path, steps)
    result.update(_child("replay", path, steps))
    for suffix in ("", ".rdlog", ".wal"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    return result


def main(argv: list[str]) -> None:
    """Print one line per size (or, as a child, one JSON result)."""
    if argv and argv[0] in ("--record", "--replay", "--bulk"):
        fn: Any = {"--record": record, "--replay": replay, "--bulk": bulk}[argv[0]]
        print(json.dumps(fn(argv[1], int(argv[2]))))
        return
    big = "--big" in argv
    sizes = [int(a) for a in argv if a != "--big"] or [1000, 20000]
    if big:
        sizes.append(500_000)
    growth: list[float] = []
    with tempfile.TemporaryDirectory() as directory:
        print(
            "| steps | frames | record µs/step | replay µs/frame "
            "| peak RSS growth of the replaying process (MB) |"
        )
        print("|---|---|---|---|---|")
        for steps in sizes:
            m = measure(steps, directory)
            rec = m["record_us_per_step"]
            growth.append(m["peak_growth_mb"])
            print(
                f"| {steps:,} | {m['frames']:,} | {'bulk' if rec != rec else f'{rec:.0f}'} | "
                f"{m['replay_us_per_frame']:.1f} | {m['peak_growth_mb']:.1f} |",
                flush=True,
            )
    print(flat_verdict(sizes, growth))


def flat_verdict(sizes: list[int], growth: list[float]) -> str:
    """Say whether peak growth stayed within :data:`FLAT_MB` of the smallest size's.

    Args:
        sizes: the run sizes measured, in steps.
        growth: the replaying process's peak RSS growth for each size, in MB.

    Returns:
        one line: ``memory: flat (...)`` or ``memory: not flat (...)``.
    """
    base = growth[sizes.index(min(sizes))]
    worst = max(g - base for g in growth)
    frames = f"{2 * min(sizes) + 2:,} to {2 * max(sizes) + 2:,} frames"
    verdict = "flat" if worst <= FLAT_MB else "not flat"
    return (
        f"memory: {verdict} (peak growth rises {worst:+.1f} MB from {frames}; "
        f"goal: within {FLAT_MB:.0f} MB)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
