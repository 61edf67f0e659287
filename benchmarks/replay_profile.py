"""Where a replayed frame's cost goes: callgrind instructions or a cProfile of the replay row.

Usage::

    python -m benchmarks.replay_profile callgrind [--steps 200] [--source tables|log]
    python -m benchmarks.replay_profile profile [--steps 200] [--replays 20]   # cProfile
    python -m benchmarks.replay_profile wall [--steps 1000] [--rounds 9]   # CPU ratio

The run replayed is the one of :func:`benchmarks.replay_cost.replay_per_frame` (the
"replay per frame" row of ``scripts/bench``): a finished run of N workload steps in a
DuckDB journal, replayed in strict mode in process. ``callgrind`` runs this module
twice under ``valgrind --tool=callgrind``, recording the run and replaying it once warm
and then 1 or 3 more times, and divides the difference of the two totals by the frames
of the 2 extra replays (what is left is the replay alone: no start-up, no recording). The
msgpack floor (pack + unpack of the 2 KB model-request frame) is counted the same way.
Instruction counts are steady on a shared machine; wall and CPU times are not.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import msgpack

from . import workload as w

RUN_ID = "replay-cost"


def _recorded(
    directory: str, steps: int, source: str = "tables"
) -> tuple[object, Callable[[], None], int]:
    """Record the bench run; return its journal, one strict replay, and its frame count.

    ``source``: ``"tables"`` moves the run into DuckDB's tables before it is replayed
    (where the bench's 2,002-frame run is read from once its background checkpoint
    is done); ``"log"`` leaves it held in the journal's log (a small, recent run).
    """
    import redrive
    from redrive.storage.duckdb import DuckDBJournal

    journal = DuckDBJournal(os.path.join(directory, "replay.duckdb"))
    with redrive.run(journal, RUN_ID, input={"n": steps}):
        w.redrive_loop(steps)
    if source == "tables":
        journal.checkpoint()
    frames = sum(1 for _ in journal.frames(RUN_ID))

    def replay() -> None:
        with redrive.run(journal, RUN_ID, input={"n": steps}) as run:
            w.redrive_loop(steps)
        assert run.live_steps == 0, run

    return journal, replay, frames


def _child(what: str, steps: int, times: int, source: str) -> None:
    """Under callgrind: record, warm once, then do ``what`` ``times`` times."""
    directory = tempfile.mkdtemp(prefix="redrive-replay-profile-")
    try:
        _journal, replay, frames = _recorded(directory, steps, source)
        replay()
        frame = w.frame_2k()
        for _ in range(times):
            if what == "replay":
                replay()
            else:
                for _ in range(frames):
                    msgpack.unpackb(msgpack.packb(frame))
        print(f"frames={frames}", file=sys.stderr)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _instructions(what: str, steps: int, times: int, source: str) -> tuple[int, int]:
    """Total instructions (Ir) of a child doing ``what`` ``times`` times, and its frames."""
    out = tempfile.mktemp(prefix="redrive-callgrind-")
    cmd = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "benchmarks.replay_profile",
        "--child",
        what,
        str(steps),
        str(times),
        source,
    ]
    # one hash seed: set and dict layouts, so the counts, are the same from run to run
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    try:
        total = re.search(r"Collected : (\d+)", proc.stderr)
        frames = re.search(r"frames=(\d+)", proc.stderr)
        if proc.returncode != 0 or not total or not frames:
            raise RuntimeError(f"callgrind child failed ({proc.returncode}): {proc.stderr[-800:]}")
        return int(total.group(1)), int(frames.group(1))
    finally:
        if os.path.exists(out):
            os.unlink(out)


def callgrind(
    steps: int, source: str, figures: tuple[str, ...] = ("replay", "msgpack")
) -> dict[str, float]:
    """Instructions per replayed frame and per msgpack pack+unpack (differences of 2 runs)."""
    result: dict[str, float] = {}
    for what in figures:
        low, frames = _instructions(what, steps, 1, source)
        high, _ = _instructions(what, steps, 3, source)
        result[f"{what}_ir_per_frame"] = (high - low) / (2 * frames)
        result["frames"] = frames
    if len(figures) == 2:
        result["ratio"] = result["replay_ir_per_frame"] / result["msgpack_ir_per_frame"]
    return result


def profile(steps: int, replays: int, sort: str, limit: int, source: str) -> None:
    """Print a cProfile of ``replays`` strict replays (after one warm replay)."""
    directory = tempfile.mkdtemp(prefix="redrive-replay-profile-")
    try:
        _journal, replay, frames = _recorded(directory, steps, source)
        replay()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(replays):
            replay()
        prof.disable()
        stats = pstats.Stats(prof)
        calls = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
        print(f"frames {frames}, replays {replays}: {calls / (frames * replays):.1f} calls a frame")
        stats.sort_stats(sort).print_stats(limit)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def wall(steps: int, rounds: int, source: str) -> dict[str, float]:
    """CPU seconds per replayed frame against msgpack pack+unpack, interleaved round by round."""
    directory = tempfile.mkdtemp(prefix="redrive-replay-profile-")
    try:
        _journal, replay, frames = _recorded(directory, steps, source)
        frame = w.frame_2k()
        replay()
        ours, floor = [], []
        for _ in range(rounds):
            t0 = time.process_time()
            replay()
            ours.append((time.process_time() - t0) / frames)
            t0 = time.process_time()
            for _ in range(frames):
                msgpack.unpackb(msgpack.packb(frame))
            floor.append((time.process_time() - t0) / frames)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    ratios = [a / b for a, b in zip(ours, floor, strict=True)]
    return {
        "frames": frames,
        "replay_us": statistics.median(ours) * 1e6,
        "msgpack_us": statistics.median(floor) * 1e6,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def main(argv: list[str]) -> None:
    """Run the sub-command ``argv`` names (see the module docstring)."""
    if argv[:1] == ["--child"]:
        _child(argv[1], int(argv[2]), int(argv[3]), argv[4])
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay_profile")
    parser.add_argument("what", choices=("callgrind", "profile", "wall"))
    parser.add_argument("--steps", type=int, default=0, help="workload steps (200; wall 1000)")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--source", choices=("tables", "log"), default="tables")
    parser.add_argument(
        "--only", choices=("replay", "msgpack"), default=None, help="callgrind: one figure"
    )
    parser.add_argument("--limit", type=int, default=40)
    args = parser.parse_args(argv)
    if args.what == "callgrind":
        figures = (args.only,) if args.only else ("replay", "msgpack")
        print(callgrind(args.steps or 200, args.source, figures))
    elif args.what == "profile":
        profile(args.steps or 200, args.replays, args.sort, args.limit, args.source)
    else:
        print(wall(args.steps or 1000, args.rounds, args.source))


if __name__ == "__main__":
    main(sys.argv[1:])
