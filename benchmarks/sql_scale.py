"""``redrive sql`` over an ``.rdj`` export against the same query over its DuckDB journal.

Usage: ``python -m benchmarks.sql_scale [STEPS]`` (default 50,000 read-only tool
steps, 100,002 frames: the size of issue 24 #7, where the ``.rdj`` took 316 s and
the DuckDB journal 1 s).

The run is built in a memory journal and copied into DuckDB in bulk, then
exported to ``.rdj``. Each query (a ``count(*)`` that reads no payload, and one
that reads ``frames.data``) runs as a whole ``redrive sql`` process, timed
alternately on the two sources, three times each; the table prints the median
seconds, the spread (max - min) and the ratio ``.rdj`` / DuckDB from the same
window, plus each process's peak RSS (``ru_maxrss`` of the child).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import redrive
from redrive.storage._copy import copy_run
from redrive.storage.duckdb import DuckDBJournal
from redrive.storage.memory import MemoryJournal

QUERIES = {
    "count": "SELECT count(*) FROM frames",
    "data": "SELECT count(*) FROM frames WHERE data->>'$.args.n' IS NOT NULL",
}


def _build(steps: int, directory: str) -> tuple[str, str]:
    @redrive.tool(read_only=True)
    def get_item(n: int) -> str:
        return "r" * 200

    memory = MemoryJournal()
    with redrive.run(memory, "big") as run:
        for n in range(steps):
            get_item(n)
        run.finish("ok")
    path = os.path.join(directory, "runs.duckdb")
    journal = DuckDBJournal(path)
    copy_run(memory, "big", journal)
    rdj = os.path.join(directory, "big.rdj")
    redrive.export_run(journal, "big", rdj)
    journal.close()
    return path, rdj


#: Runs ``redrive sql`` and prints the process's peak RSS in KiB as its last line.
_CHILD = (
    "import contextlib, io, resource, sys\n"
    "from redrive import cli\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    code = cli.main(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    "raise SystemExit(code)\n"
)


def _timed(journal: str, query: str) -> tuple[float, float]:
    """Return (seconds, peak MB) of one whole ``redrive sql`` process."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, "--journal", journal, "sql", query],
        check=True,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    return seconds, int(done.stdout.split()[-1]) / 1024


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    steps = int(args[0]) if args else 50_000
    with tempfile.TemporaryDirectory() as directory:
        duck, rdj = _build(steps, directory)
        print(f"sql over {2 * steps + 2:,} frames: .rdj against its DuckDB journal")
        print("query   source   median s   spread s   peak MB   ratio")
        for name, query in QUERIES.items():
            times: dict[str, list[float]] = {"duckdb": [], "rdj": []}
            peaks: dict[str, float] = {}
            for _ in range(3):  # interleaved: both sources see the same load
                for source, journal in (("duckdb", duck), ("rdj", rdj)):
                    seconds, peak = _timed(journal, query)
                    times[source].append(seconds)
                    peaks[source] = peak
            base = statistics.median(times["duckdb"])
            for source, values in times.items():
                median = statistics.median(values)
                print(
                    f"{name:<7} {source:<8} {median:>8.2f}   {max(values) - min(values):>8.2f}"
                    f"   {peaks[source]:>7.0f}   {median / base:>5.1f}x"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
