"""A process that exits while a DuckDB checkpoint runs in the background lets it finish.

A daemon thread still inside DuckDB when the interpreter finalizes is killed
there, which can abort the process (seen in tests/crash/test_stream_crash.py's
third process when ended runs stayed in the log). The background checkpoint is
joined at exit and the background open is settled by an atexit hook, so no
DuckDB call is in flight when the interpreter finalizes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from redrive.storage.duckdb import DuckDBJournal

CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from redrive.frames import GENESIS, Kind, make_frame
    from redrive.storage import RunRecord, _duckdb_store
    from redrive.storage.duckdb import DuckDBJournal

    entered = threading.Event()
    real = _duckdb_store._Store.ingest_apart

    def slow(self, *args):
        entered.set()
        # a query that releases the GIL: the move is inside DuckDB when the main thread ends
        self._con.cursor().execute(
            "SELECT count(*) FROM range(200000000) t(i) WHERE i % 7 = 3"
        ).fetchall()
        return real(self, *args)

    _duckdb_store._Store.ingest_apart = slow
    journal = DuckDBJournal(sys.argv[1], checkpoint_frames=4)
    for r in range(5):
        first = make_frame(
            run_id=f"r{r}", seq=0, kind=Kind.RUN_START, name="run", payload={}, prev_chain=GENESIS
        )
        now = time.time()
        row = RunRecord(
            run_id=f"r{r}", input_fp="f" * 32, status="succeeded", created_at=now, updated_at=now
        )
        journal.create_run(row, first)
    assert entered.wait(60)
    print("exiting without close", flush=True)
    """
)


def test_a_threshold_move_in_flight_at_exit_completes(tmp_path: Path) -> None:
    """Exit without close() while the bulk move is inside DuckDB: it ends, then the process."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    path = str(tmp_path / "runs.duckdb")
    done = subprocess.run(
        [sys.executable, str(script), path], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exiting without close"
    journal = DuckDBJournal(path, read_only=True)
    try:
        # the move committed and the log was rewritten without what it moved (a move
        # killed at exit leaves all five in the log); every run reads back either way
        assert len(journal._overlay.runs) < 5
        assert sorted(r.run_id for r in journal.runs()) == [f"r{r}" for r in range(5)]
    finally:
        journal.close()
