"""One writable DuckDB journal per file per process, by file identity (issue 12 #6)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import redrive
from redrive.errors import JournalLockedError
from redrive.storage.duckdb import DuckDBJournal


@pytest.mark.parametrize("how", ["hard link", "symlink", "other spelling"])
def test_a_second_path_to_an_open_file_is_refused(tmp_path: Path, how: str) -> None:
    """Issue 12 #6: a second journal on the same file (any path to it) is refused."""
    path = tmp_path / "runs.duckdb"
    first = DuckDBJournal(str(path))
    if how == "hard link":
        other = tmp_path / "link.duckdb"
        os.link(path, other)
    elif how == "symlink":
        other = tmp_path / "sym.duckdb"
        other.symlink_to(path)
    else:
        (tmp_path / "sub").mkdir()
        other = tmp_path / "sub" / ".." / "runs.duckdb"
    with pytest.raises(JournalLockedError, match="already open for writing in this process"):
        DuckDBJournal(str(other))
    first.close()
    again = DuckDBJournal(str(other))  # free once the first is closed
    again.close()


def test_the_tool_body_runs_once_through_a_hard_link(tmp_path: Path) -> None:
    """The reviewer's case: the second journal never gets to claim and run the step."""
    path = tmp_path / "runs.duckdb"
    first = DuckDBJournal(str(path))
    os.link(path, tmp_path / "link.duckdb")
    calls: list[int] = []

    @redrive.tool
    def refund(n: int) -> int:
        calls.append(n)
        return n

    with redrive.run(first, "r") as run:
        run.finish(refund(1))
    with pytest.raises(JournalLockedError, match="hard link"):
        DuckDBJournal(str(tmp_path / "link.duckdb"))
    assert calls == [1]
    first.close()


def test_another_process_gets_the_lock_error(tmp_path: Path) -> None:
    """The OS lock reaches other processes, whatever path they use."""
    path = tmp_path / "runs.duckdb"
    first = DuckDBJournal(str(path))
    os.link(path, tmp_path / "link.duckdb")
    child = textwrap.dedent(f"""
        import redrive
        try:
            redrive.open_journal({str(tmp_path / "link.duckdb")!r})
        except redrive.JournalLockedError as e:
            print("locked")
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert done.stdout.split() == ["locked"], done.stderr
    first.close()


def test_a_journal_dropped_without_close_frees_the_file(tmp_path: Path) -> None:
    """A journal object collected without close() releases its lock (as before: by GC)."""
    import gc

    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path)
    journal._store.close()  # as a dropped object's connection is closed when collected
    del journal
    gc.collect()
    DuckDBJournal(path).close()
