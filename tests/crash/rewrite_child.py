"""Child process for tests/crash/test_log_rewrite_crash.py: writes until killed mid-checkpoint.

Usage: ``python -m tests.crash.rewrite_child JOURNAL STAGE``. Opens the DuckDB
journal with a small checkpoint threshold and replaces
``redrive.storage._framelog._crash_point`` so the process SIGKILLs itself the
first time a checkpoint reaches ``STAGE`` (``checkpoint-ingested``,
``rewrite-opened``, ``rewrite-written``, ``rewrite-renamed``). It writes runs
that end and runs that stay unfinished, and prints one JSON line per
acknowledged write: ``{"run": id, "chains": [...], "status": ...}`` (the run's
acknowledged state after the write). With STAGE ``close`` the kill comes
in the checkpoint of ``close()`` (at ``rewrite-written``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import redrive.storage._framelog as framelog
from redrive.frames import GENESIS, Frame, Kind, make_frame
from redrive.storage import RunRecord, RunUpdate
from redrive.storage.duckdb import DuckDBJournal


def _frame(run_id: str, seq: int, prev: str) -> Frame:
    return make_frame(
        run_id=run_id,
        seq=seq,
        kind=Kind.RUN_START if seq == 0 else Kind.NOTE,
        name="run" if seq == 0 else "note",
        payload={"i": seq, "pad": "x" * 50},
        prev_chain=prev,
    )


def main(path: str, stage: str) -> None:
    armed = {"on": stage != "close"}
    target = "rewrite-written" if stage == "close" else stage

    def crash_point(at: str) -> None:
        if armed["on"] and at == target:
            os.kill(os.getpid(), signal.SIGKILL)

    framelog._crash_point = crash_point
    journal = DuckDBJournal(path, checkpoint_frames=8)
    chains: dict[str, list[str]] = {}

    def say(run_id: str, status: str) -> None:
        print(json.dumps({"run": run_id, "chains": chains[run_id], "status": status}), flush=True)

    for n in range(40):
        run_id = f"{'done' if n % 3 == 0 else 'live'}-{n}"
        first = _frame(run_id, 0, GENESIS)
        now = time.time()
        row = RunRecord(run_id=run_id, input_fp="f" * 32, created_at=now, updated_at=now)
        journal.create_run(row, first)
        chains[run_id] = [first.chain]
        say(run_id, "running")
        second = _frame(run_id, 1, first.chain)
        ended = run_id.startswith("done")
        update = RunUpdate(status="succeeded") if ended else None
        journal.append(run_id, [second], expected_seq=1, update=update)
        chains[run_id].append(second.chain)
        say(run_id, "succeeded" if ended else "running")
    armed["on"] = True
    journal.close()
    print(json.dumps({"closed": True}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
