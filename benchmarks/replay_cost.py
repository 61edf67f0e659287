"""Replay against the cost of decoding, canonical encode against msgpack, resume against LangGraph.

Usage: ``python -m benchmarks.replay_cost [--quick] [--only replay,encode,resume,pytest]
[--resume 1000,10000]`` (prints a table and the goals of issue 26, items 2, 3 and 5;
``--only`` runs some figures, ``--resume`` picks the resume sizes).

Every ratio compares two figures measured interleaved, round by round, in the
same window (the machine is shared and noisy: read the ratios, not the times);
figures taken in this process are CPU seconds (:func:`time.process_time`):

* **replay per frame**: a finished run of N workload steps
  (:mod:`benchmarks.workload`: 2 KB model requests and tool results, 2 frames
  a step) in a DuckDB journal, checkpointed into its tables (where a run that
  long is read from), replayed in strict mode in process, per frame;
  against msgpack pack + unpack of the 2 KB model-request frame, per frame.
  Goal: within 5x.
* **canonical encode** of that frame (:func:`redrive.frames.encode`) against
  ``msgpack.packb`` of it. Goal: within 2x.
* **replayed pytest tests**: the added CPU per test of the pytest plugin
  replaying each test's journal, against the same suite with a stub model,
  both run by ``pytest.main`` in one process. Goal: 2 ms.
* **resume @N** in process: open the DuckDB journal, re-drive the N recorded
  steps of an interrupted run to its first live call (``benchmarks.peers``);
  against LangGraph with SqliteSaver loading its checkpoint and reaching the
  same live call. Goal: within 10x at 1,000 and 10,000 steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import msgpack

from . import workload as w
from .rows import fmt_spread

__all__ = [
    "canonical_encode",
    "goal_rows",
    "measure",
    "pytest_per_test",
    "replay_per_frame",
    "resume_vs_langgraph",
]

#: Goals of issue 26 (ratios).
REPLAY_GOAL = 5.0
ENCODE_GOAL = 2.0
RESUME_GOAL = 10.0
#: Issue 26 item 5: added cost per replayed pytest test, in ms.
PYTEST_GOAL_MS = 2.0
#: The repository root (where ``python -m benchmarks...`` runs).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _each(fn: Callable[[], object], count: int) -> float:
    """CPU seconds of this process per call of ``fn`` over ``count`` calls.

    CPU time, not wall time: on a shared machine another process's load
    stretches wall time, not the work a call does (both sides of a ratio are
    CPU-bound work in this process).
    """
    t0 = time.process_time()
    for _ in range(count):
        fn()
    return (time.process_time() - t0) / count


def canonical_encode(*, rounds: int = 9, count: int = 2000) -> dict[str, float]:
    """Median seconds of ``encode(frame)`` and ``msgpack.packb(frame)``, interleaved.

    Returns:
        ``encode_s``, ``pack_s`` (seconds per call) and ``ratio``.
    """
    from redrive.frames import encode

    frame = w.frame_2k()
    ours, floor = [], []
    for _ in range(rounds):
        ours.append(_each(lambda: encode(frame), count))
        floor.append(_each(lambda: msgpack.packb(frame), count))
    enc, pack = statistics.median(ours), statistics.median(floor)
    return {"encode_s": enc, "pack_s": pack, "ratio": enc / pack}


def replay_per_frame(steps: int = 1000, *, rounds: int = 5) -> dict[str, Any]:
    """Median seconds per replayed frame and per msgpack pack+unpack of a frame, interleaved.

    Args:
        steps: workload steps in the recorded run (frames: about twice as many).
        rounds: replays (each followed by as many pack+unpack as the run has frames).

    Returns:
        ``frames``, ``replay_frame_s``, ``msgpack_frame_s`` and ``ratio`` (medians);
        ``replay_samples`` and ``ratio_samples`` (per round).
    """
    import redrive
    from redrive.storage.duckdb import DuckDBJournal

    directory = tempfile.mkdtemp(prefix="redrive-replay-cost-")
    try:
        journal = DuckDBJournal(os.path.join(directory, "replay.duckdb"))
        with redrive.run(journal, "replay-cost", input={"n": steps}):
            w.redrive_loop(steps)
        # the recording crossed the journal's checkpoint threshold: its background
        # checkpoint (moving the run into DuckDB's tables) would otherwise run on during
        # the first timed replays and its CPU count as theirs; done here, every replay
        # reads the run from the tables, as a replay does once that checkpoint is over
        journal.checkpoint()
        frames = sum(1 for _ in journal.frames("replay-cost"))
        frame = w.frame_2k()

        def replay() -> None:
            with redrive.run(journal, "replay-cost", input={"n": steps}) as run:
                w.redrive_loop(steps)
            assert run.live_steps == 0, run

        ours, floor = [], []
        replay()  # warm: imports, caches
        for _ in range(rounds):
            ours.append(_each(replay, 1) / frames)
            floor.append(_each(lambda: msgpack.unpackb(msgpack.packb(frame)), frames))
        journal.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    rep, base = statistics.median(ours), statistics.median(floor)
    return {
        "frames": frames,
        "replay_frame_s": rep,
        "msgpack_frame_s": base,
        "ratio": rep / base,
        "replay_samples": ours,
        "ratio_samples": [a / b for a, b in zip(ours, floor, strict=True)],
    }


def _peer(system: str, what: str, n: int, directory: str) -> dict[str, Any]:
    """One ``benchmarks.peers`` measurement in a fresh process; its figures (none for interrupt).

    Raises:
        RuntimeError: the process left no figures (its last line of output says why).
    """
    from .peers import RESULT_FILE

    os.makedirs(directory, exist_ok=True)
    figures = os.path.join(directory, RESULT_FILE)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(figures)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers", system, what, str(n), directory],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=_ROOT,
        check=False,
    )
    if what == "interrupt":
        return {}
    if not os.path.exists(figures):
        last = (proc.stderr or proc.stdout or "no output").strip().splitlines()[-1:]
        raise RuntimeError(f"{system} {what} @{n}: exit {proc.returncode}: {last}")
    with open(figures) as fh:
        found: dict[str, Any] = json.load(fh)
    return found


def resume_vs_langgraph(
    sizes: tuple[int, ...], work: str, *, rounds: int = 3
) -> dict[int, dict[str, Any]]:
    """Median in-process resume seconds of redrive (DuckDB) and LangGraph, interleaved per round.

    Each system records an interrupted run of N steps once (``benchmarks.peers``
    ``interrupt``), then resumes it ``rounds`` times, the two systems taking turns
    (a resume stops at the first live call, so the run stays resumable).

    Returns:
        By N: ``redrive_s``, ``langgraph_s`` (medians), ``ratio``, ``redrive_samples`` and
        ``ratio_samples`` (per round); or ``error``.
    """
    out: dict[int, dict[str, Any]] = {}
    for n in sizes:
        dirs = {
            s: os.path.join(work, f"resume-cost-{s}-{n}") for s in ("redrive-duckdb", "langgraph")
        }
        try:
            for system, d in dirs.items():
                _peer(system, "interrupt", n, d)
            times: dict[str, list[float]] = {s: [] for s in dirs}
            for _ in range(rounds):
                for system, d in dirs.items():
                    times[system].append(_peer(system, "resume", n, d)["resume_s"])
            ours = statistics.median(times["redrive-duckdb"])
            peer = statistics.median(times["langgraph"])
            pairs = zip(times["redrive-duckdb"], times["langgraph"], strict=True)
            out[n] = {
                "redrive_s": ours,
                "langgraph_s": peer,
                "ratio": ours / peer,
                "redrive_samples": times["redrive-duckdb"],
                "ratio_samples": [a / b for a, b in pairs],
            }
        except Exception as exc:
            out[n] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for d in dirs.values():
                shutil.rmtree(d, ignore_errors=True)
    return out


def pytest_per_test(tests: int = 200, *, rounds: int = 5) -> dict[str, float]:
    """Added CPU seconds per replayed pytest test: the redrive suite minus the stub suite.

    The suites of :mod:`benchmarks.pytest_scale` (each test a 6-step agent loop;
    the redrive suite replays its ``.rdj`` journals with record mode ``none``),
    recorded once, then run ``rounds`` times each with ``pytest.main``, taking
    turns, in one fresh process (so the figure holds the plugin's per-test work,
    not a Python start-up); the fastest pass of each counts. CPU seconds move
    far less with the machine's load than wall seconds
    (:mod:`benchmarks.pytest_scale` reports whole processes, wall time).

    Returns:
        ``tests``, ``stub_s``, ``redrive_s`` (CPU seconds per suite) and ``added_cpu_s``
        (per test).
    """
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.replay_cost", "--pytest-child", str(tests), str(rounds)],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=_ROOT,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("CI", "REDRIVE_JOURNAL")},
    )
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout or "no output").strip().splitlines()[-1:]
        raise RuntimeError(f"pytest suites: exit {proc.returncode}: {last}")
    found: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def _pytest_child(tests: int, rounds: int) -> dict[str, float]:
    """:func:`pytest_per_test`'s work, in the child process."""
    import contextlib
    import io

    import pytest

    from . import pytest_scale as ps

    root = tempfile.mkdtemp(prefix="redrive-pytest-cost-")

    def cpu(directory: str, extra: list[str]) -> float:
        os.chdir(directory)
        t0 = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            code = pytest.main(["-q", "-p", "no:cacheprovider", "-x", *extra, directory])
        if code != 0:
            raise RuntimeError(f"pytest in {directory} exited {code}")
        return time.process_time() - t0

    try:
        suites = {
            "stub": (ps._suite(root, "stub", tests), []),
            "redrive": (ps._suite(root, "redrive", tests), ["--redrive-record-mode", "none"]),
        }
        cpu(suites["redrive"][0], ["--redrive-record-mode", "once"])  # record (untimed)
        best: dict[str, float] = {}
        for _ in range(rounds):
            for name, (directory, extra) in suites.items():
                took = cpu(directory, extra)
                best[name] = min(best.get(name, took), took)
    finally:
        os.chdir(_ROOT)
        shutil.rmtree(root, ignore_errors=True)
    return {
        "tests": tests,
        "stub_s": best["stub"],
        "redrive_s": best["redrive"],
        "added_cpu_s": (best["redrive"] - best["stub"]) / tests,
    }


#: The figures of this module, by name (``--only`` picks some).
FIGURES = ("replay", "encode", "resume", "pytest")


def measure(
    quick: bool,
    work: str,
    only: tuple[str, ...] = FIGURES,
    resume_sizes: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Every figure of this module, or those ``only`` names.

    ``--quick``: resume @1,000 only, fewer rounds; ``resume_sizes`` overrides the
    resume sizes (``(10_000,)`` measures the slow row alone).
    """
    sizes = resume_sizes or ((1000,) if quick else (1000, 10_000))
    make: dict[str, Callable[[], Any]] = {
        "replay": lambda: replay_per_frame(1000, rounds=3 if quick else 5),
        "encode": canonical_encode,
        "resume": lambda: resume_vs_langgraph(sizes, work),
        "pytest": lambda: pytest_per_test(100 if quick else 300, rounds=3 if quick else 5),
    }
    return {name: make[name]() for name in FIGURES if name in only}


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.1f} ms"


Row = tuple[str, str, str, str, bool | None]


def _ratio_row(
    label: str,
    ours: float,
    ratio: float,
    floor: str,
    goal: float,
    unit: str,
    samples: dict[str, Any] | None = None,
) -> Row:
    """A row whose figure is a ratio to a floor or peer, met when within ``goal``.

    ``samples`` (the figure's dict) adds the p10-p90 spread of its rounds when it holds
    ``ratio_samples`` (per-round ratios, each of two figures measured in the same round).
    """
    figure = f"{_us(ours)} ({ratio:.1f}x)"
    rounds = (samples or {}).get("ratio_samples")
    if rounds and len(rounds) > 1:
        figure += f"; per round {fmt_spread(rounds, unit='x')}"
    return (label, figure, floor, f"<= {goal:.0f}x{unit}", ratio <= goal)


def goal_rows(data: dict[str, Any]) -> list[Row]:
    """The goal rows of issue 26 items 2, 3 and 5: (figure, redrive, floor or peer, goal, met)."""
    rows: list[Row] = []
    rep = data.get("replay")
    if rep:
        floor = f"msgpack pack+unpack of a 2 KB frame {_us(rep['msgpack_frame_s'])} (interleaved)"
        label = f"replay per frame, DuckDB, {rep['frames']:,} frames"
        rows.append(
            _ratio_row(label, rep["replay_frame_s"], rep["ratio"], floor, REPLAY_GOAL, "", rep)
        )
    else:
        rows.append(("replay per frame, DuckDB", "not run", "-", f"<= {REPLAY_GOAL:g}x", None))
    enc = data.get("encode")
    if not enc:
        goal = f"<= {ENCODE_GOAL:g}x msgpack pack"
        rows.append(("canonical encode of a 2 KB frame", "not run", "-", goal, None))
    if enc:
        label = "canonical encode of a 2 KB frame (interleaved)"
        floor = f"msgpack pack {_us(enc['pack_s'])}"
        unit = " msgpack pack"
        rows.append(_ratio_row(label, enc["encode_s"], enc["ratio"], floor, ENCODE_GOAL, unit))
    measured = {int(n) for n in data.get("resume", {})}
    for n in sorted({1000, 10000} - measured):
        label = f"resume @{n:,} steps in process, DuckDB vs LangGraph"
        why = "not run (--quick; --resume 1000,10000 adds it)" if n == 10000 and data else "not run"
        rows.append((label, why, "-", f"<= {RESUME_GOAL:g}x LangGraph", None))
    for n, r in sorted(data.get("resume", {}).items(), key=lambda kv: int(kv[0])):
        label = f"resume @{int(n):,} steps in process, DuckDB vs LangGraph (interleaved)"
        if "error" in r:
            rows.append((label, f"not run: {r['error'][:120]}", "-", "-", None))
            continue
        floor = f"LangGraph SqliteSaver {_us(r['langgraph_s'])}"
        unit = " LangGraph"
        rows.append(_ratio_row(label, r["redrive_s"], r["ratio"], floor, RESUME_GOAL, unit, r))
    pt = data.get("pytest")
    if pt:
        cpu_ms = pt["added_cpu_s"] * 1e3
        rows.append(
            (
                f"{pt['tests']:,} replayed pytest tests, added CPU per test (in process)",
                f"{cpu_ms:.2f} ms (suite {pt['redrive_s']:.2f} s CPU)",
                f"the suite with a stub model, no redrive: {pt['stub_s']:.2f} s CPU (interleaved)",
                f"<= {PYTEST_GOAL_MS:.0f} ms",
                cpu_ms <= PYTEST_GOAL_MS,
            )
        )
    return rows


def main(argv: list[str]) -> None:
    """Print the figures and the goal rows (``--pytest-child N ROUNDS``: one JSON line)."""
    if argv[:1] == ["--pytest-child"]:
        print(json.dumps(_pytest_child(int(argv[1]), int(argv[2]))))
        return
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay_cost")
    parser.add_argument("--quick", action="store_true", help="fewer rounds, resume @1,000 only")
    parser.add_argument(
        "--only", default=",".join(FIGURES), help=f"comma-separated figures of {FIGURES}"
    )
    parser.add_argument(
        "--resume", default="", metavar="N,N", help="resume sizes (e.g. 1000,10000; slow)"
    )
    args = parser.parse_args(argv)
    only = tuple(name for name in args.only.split(",") if name)
    unknown = set(only) - set(FIGURES)
    if unknown:
        parser.error(f"unknown figures {sorted(unknown)}; choose from {FIGURES}")
    sizes = tuple(int(n) for n in args.resume.split(",") if n) or None
    work = tempfile.mkdtemp(prefix="redrive-replay-cost-")
    try:
        data = measure(args.quick, work, only, sizes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| figure | redrive | floor or peer | goal | verdict |")
    print("|---|---|---|---|---|")
    for a, b, c, d, ok in goal_rows(data):
        verdict = "-" if ok is None else ("goal met" if ok else "goal not met")
        print(f"| {a} | {b} | {c} | {d} | {verdict} |")


if __name__ == "__main__":
    main(sys.argv[1:])
