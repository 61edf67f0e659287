"""Import is all-or-nothing and repeatable; exports leave no temporary files (issue 12 #3, #16).

A child process imports an ``.rdj`` file and is SIGKILLed at a random point;
the target journal then holds no run a worker could take for a real one
(nothing in ``interrupted_runs()``, a lease keeps workers off), and importing
the file again succeeds and gives the whole run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import redrive
from redrive.storage import MemoryJournal
from redrive.storage._base import IMPORT_OWNER
from redrive.storage.duckdb import DuckDBJournal
from redrive.storage.postgres import PostgresJournal

STEPS = 2500


def exported(tmp_path: Path) -> tuple[Path, list[str]]:
    """Export a run of 2 * STEPS + 2 frames; return the file and its chains."""
    source = MemoryJournal()

    @redrive.tool(read_only=True)
    def get_item(n: int) -> str:
        return f"item {n}"

    with redrive.run(source, "big") as run:
        run.finish([get_item(n) for n in range(STEPS)])
    target = tmp_path / "big.rdj"
    redrive.export_run(source, "big", target)
    return target, [f.chain for f in source.frames("big")]


def kill_import(url: str, rdj: Path, after: int, schema: str | None) -> None:
    """Import ``rdj`` into ``url`` in a child and SIGKILL it after ``after`` progress calls."""
    child = textwrap.dedent(f"""
        import sys, redrive
        from redrive.storage.postgres import PostgresJournal
        url, schema = {url!r}, {schema!r}
        journal = PostgresJournal(url, schema=schema) if schema else redrive.open_journal(url)
        def progress(done, total):
            print(done, flush=True)
            if done >= {after * 1000}:
                sys.stdin.readline()  # wait here to be killed
        redrive.import_run({str(rdj)!r}, journal, progress=progress)
        print("done", flush=True)
        sys.stdin.readline()
    """)
    with subprocess.Popen(
        [sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "done" or int(line) >= after * 1000:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def check_target(journal: redrive.storage.Journal, rdj: Path, chains: list[str]) -> None:
    """No half-copied run in the open; re-import gives the whole run."""
    assert journal.interrupted_runs() == []
    found = journal.get_run("big")
    assert found is None or found.lease_owner == IMPORT_OWNER or found.next_seq == len(chains)
    imported = redrive.import_run(rdj, journal)
    assert imported.status == "succeeded" and imported.lease_owner is None
    assert [f.chain for f in journal.frames("big")] == chains
    assert redrive.import_run(rdj, journal).next_seq == len(chains)  # again: a no-op


@pytest.mark.parametrize("seed", range(3))
def test_killed_import_into_duckdb_is_repeatable(tmp_path: Path, seed: int) -> None:
    """Issue 12 #3 on DuckDB: SIGKILL at a random batch, then re-import."""
    rdj, chains = exported(tmp_path)
    path = str(tmp_path / "target.duckdb")
    DuckDBJournal(path).close()
    kill_import(path, rdj, random.Random(seed).randint(1, 5), None)
    journal = DuckDBJournal(path)
    check_target(journal, rdj, chains)
    journal.close()


@pytest.mark.postgres
@pytest.mark.parametrize("seed", range(2))
def test_killed_import_into_postgres_is_repeatable(
    tmp_path: Path, pg_url: str, pg_schema: str, seed: int
) -> None:
    """Issue 12 #3 on Postgres: SIGKILL at a random batch, then re-import."""
    rdj, chains = exported(tmp_path)
    PostgresJournal(pg_url, schema=pg_schema).close()
    kill_import(pg_url, rdj, random.Random(seed).randint(1, 5), pg_schema)
    journal = PostgresJournal(pg_url, schema=pg_schema)
    check_target(journal, rdj, chains)
    journal.close()


def test_a_half_imported_run_keeps_workers_off(tmp_path: Path) -> None:
    """Until the import ends no worker can resume the run (its writes are refused)."""
    rdj, _ = exported(tmp_path)
    path = str(tmp_path / "target.duckdb")
    DuckDBJournal(path).close()
    kill_import(path, rdj, 2, None)
    journal = DuckDBJournal(path)
    assert journal.get_run("big").lease_owner == IMPORT_OWNER  # type: ignore[union-attr]
    with pytest.raises(redrive.RunBusyError), redrive.run(journal, "big"):
        pass
    journal.close()


def test_killed_export_leaves_no_temporary_file(tmp_path: Path) -> None:
    """Issue 12 #16: an export killed mid-write leaves no .rdj-*.tmp; the next export works."""
    rdj, chains = exported(tmp_path)
    folder = tmp_path / "out"
    folder.mkdir()
    child = textwrap.dedent(f"""
        import sys, redrive
        journal = redrive.open_journal({str(rdj)!r})
        def progress(done, total):
            print(done, flush=True)
            sys.stdin.readline()
        redrive.export_run(journal, "big", {str(folder / "big.rdj")!r}, progress=progress)
    """)
    with subprocess.Popen(
        [sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    redrive.export_run(redrive.open_journal(str(rdj)), "big", folder / "big.rdj")
    assert sorted(os.listdir(folder)) == ["big.rdj"]
    assert [f.chain for f in redrive.open_journal(str(folder / "big.rdj")).frames("big")] == chains
