"""What a short-lived process pays: open + resume + close, open + replay + close (issue 26).

A serverless function, a cron job or a CLI opens the journal, resumes an
interrupted run (or re-drives a finished one, as a test or ``redrive check``
does) and closes it. One cycle runs in a fresh process with its imports done
before the clock starts (a worker pays them once; whole-process figures are
:mod:`benchmarks.run`'s "whole process" rows). The memory journal is the
baseline: it is filled in the same process, untimed, so its cycle is the
resume (or replay) and ``close()`` alone.

Run one cycle: ``python -m benchmarks.cycles SYSTEM KIND DIR`` with SYSTEM
``duckdb`` or ``memory``, KIND ``resume`` or ``replay``; prints JSON with
``open_s``, ``work_s``, ``close_s`` and ``total_s`` (seconds). ``prepare``
as KIND (DuckDB only) builds the two journals in DIR first.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from . import workload as w

#: Steps of the interrupted run and of the finished one.
STEPS = 10
RESUME_RUN = "cycle:resume"
REPLAY_RUN = "cycle:replay"


def _stop_at_live(request: dict[str, Any]) -> dict[str, Any]:
    if int(request["messages"][-1]["content"][6:15]) >= STEPS // 2:
        raise w.LiveCallReached(f"step {STEPS}: first live call")
    return w.model_stub(request)


def _resume(journal: Any) -> None:
    import redrive

    w.set_model(_stop_at_live)
    try:
        with redrive.run(journal, RESUME_RUN, input={"n": STEPS}):
            w.redrive_loop(STEPS + 2)
    except w.LiveCallReached:
        pass
    finally:
        w.set_model(w.model_stub)


def _replay(journal: Any) -> None:
    import redrive

    with redrive.run(journal, REPLAY_RUN, input={"n": STEPS}) as run:
        w.redrive_loop(STEPS)
    assert run.live_steps == 0 and run.replayed_steps == STEPS, run


def prepare(directory: str) -> None:
    """Write ``resume.duckdb`` (an interrupted run) and ``replay.duckdb`` (a finished one)."""
    import redrive

    for name, fill in (("resume", _resume), ("replay", _replay_record)):
        journal = redrive.open_journal(os.path.join(directory, f"{name}.duckdb"))
        fill(journal)
        journal.close()


def _replay_record(journal: Any) -> None:
    import redrive

    with redrive.run(journal, REPLAY_RUN, input={"n": STEPS}):
        w.redrive_loop(STEPS)


def cycle(system: str, kind: str, directory: str) -> dict[str, float]:
    """Run one cycle; return its split in seconds (see the module docstring)."""
    import redrive
    from redrive.storage import MemoryJournal

    work = _resume if kind == "resume" else _replay
    # both systems run the same untimed warm-up (the memory journal's is its state)
    memory = MemoryJournal()
    (_resume if kind == "resume" else _replay_record)(memory)
    if system == "memory":
        journal: Any = memory
        t0 = t1 = time.perf_counter()
    else:
        import redrive.storage.duckdb

        path = os.path.join(directory, f"{kind}.duckdb")
        t0 = time.perf_counter()
        journal = redrive.open_journal(path)
        t1 = time.perf_counter()
    work(journal)
    t2 = time.perf_counter()
    journal.close()
    t3 = time.perf_counter()
    return {"open_s": t1 - t0, "work_s": t2 - t1, "close_s": t3 - t2, "total_s": t3 - t0}


def main(argv: list[str]) -> None:
    """``python -m benchmarks.cycles SYSTEM KIND DIR``: print one cycle's figures as JSON."""
    system, kind, directory = argv
    if kind == "prepare":
        prepare(directory)
        print("{}")
    else:
        print(json.dumps(cycle(system, kind, directory)))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
