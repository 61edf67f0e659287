"""Opening journals: one writable DuckDB journal per file per process, shared journals,
read-only opens under a writer, Postgres URLs that cannot be opened."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import redrive
from redrive import cli
from redrive.errors import JournalLockedError
from redrive.storage import Journal, _close_shared, shared_journal
from redrive.storage.duckdb import DuckDBJournal


def test_second_journal_on_the_same_file_is_refused(tmp_path: Path) -> None:
    """A second writable journal on one file (however spelled) raises until the first closes."""
    path = str(tmp_path / "runs.duckdb")
    first = DuckDBJournal(path)
    for spelling in (path, str(tmp_path / "." / "runs.duckdb")):
        with pytest.raises(JournalLockedError, match="already open for writing in this process"):
            redrive.open_journal(spelling)
    effects: list[int] = []

    @redrive.tool(restart_safe=False)
    def charge_card(amount: int) -> dict[str, bool]:
        effects.append(amount)
        return {"ok": True}

    with redrive.run(first, "job:1"):
        charge_card(100)
    first.close()
    second = DuckDBJournal(path)
    with redrive.run(second, "job:1") as run:
        charge_card(100)
    assert effects == [100] and run.resumed
    second.close()
    second.close()  # idempotent


def test_shared_journal_is_one_object_per_file(tmp_path: Path) -> None:
    """shared_journal returns one journal per file for every thread, reopened after a close."""
    path = str(tmp_path / "runs.duckdb")
    got: list[Journal] = []
    threads = [threading.Thread(target=lambda: got.append(shared_journal(path))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal = got[0]
    assert all(j is journal for j in got)
    assert shared_journal(str(tmp_path / "." / "runs.duckdb")) is journal
    with redrive.run(shared_journal(path), "s:1") as run:
        run.finish("done")
    journal.close()
    again = shared_journal(path)
    assert again is not journal and again.get_run("s:1").status == "succeeded"  # type: ignore[union-attr]
    _close_shared()
    assert again.closed  # type: ignore[attr-defined]


def test_read_only_open_under_a_writer_says_what_works(tmp_path: Path) -> None:
    """Read-only open of a file another process writes says stop/copy/Postgres, not read-only."""
    path = str(tmp_path / "runs.duckdb")
    child = textwrap.dedent(f"""
        import sys
        from redrive.storage.duckdb import DuckDBJournal
        j = DuckDBJournal({path!r})
        print("ready", flush=True)
        sys.stdin.read()
        j.close()
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with pytest.raises(JournalLockedError) as caught:
            redrive.open_journal(path, read_only=True)
        text = str(caught.value)
        assert "not even read-only" in text and "Stop that worker" in text
        assert "Postgres" in text and "open the file read-only" not in text
    finally:
        proc.communicate("")
    assert proc.returncode == 0


def test_unreachable_postgres_fails_at_once_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A refused connection raises ConnectionError naming the URL without its password; exit 4."""
    url = "postgresql://postgres:s3cret@127.0.0.1:1/nodb"
    with pytest.raises(ConnectionError) as caught:
        redrive.open_journal(url)
    text = str(caught.value)
    assert "s3cret" not in text and "postgresql://postgres:***@127.0.0.1:1/nodb" in text
    assert "\n" not in text
    code = cli.main(["--journal", url, "runs"])
    _out, err = capsys.readouterr()
    assert code == cli.EXIT_JOURNAL and len(err.strip().splitlines()) == 1
    assert "s3cret" not in err and "ConnectionError" in err


@pytest.mark.postgres
def test_missing_postgres_database_says_so(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A database that does not exist fails on open with the server's message; exit 4."""
    url = pg_url.rsplit("/", 1)[0] + "/redrive_no_such_db"
    with pytest.raises(ConnectionError, match="does not exist"):
        redrive.open_journal(url)
    assert cli.main(["--journal", url, "runs"]) == cli.EXIT_JOURNAL
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_journal_in_a_missing_directory_says_so(tmp_path: Path, read_only: bool) -> None:
    """A path under a directory that does not exist is FileNotFoundError, not a damaged file.

    (It was JournalCorruptError: "the database file is damaged ... restore it from a
    backup", for a file that was never there.) Nothing is created.
    """
    path = tmp_path / "no-such-dir" / "runs.duckdb"
    with pytest.raises(FileNotFoundError, match=r"directory .*no-such-dir does not exist") as got:
        DuckDBJournal(str(path), read_only=read_only)
    assert "damaged" not in str(got.value) and got.value.filename == str(path)
    assert not (tmp_path / "no-such-dir").exists()


def test_a_missing_journal_opened_read_only_says_so(tmp_path: Path) -> None:
    """Reading a journal file that does not exist is FileNotFoundError naming it; none is made."""
    path = tmp_path / "runs.duckdb"
    with pytest.raises(FileNotFoundError, match=r"journal .*runs\.duckdb does not exist") as got:
        DuckDBJournal(str(path), read_only=True)
    assert "damaged" not in str(got.value)
    assert list(tmp_path.iterdir()) == []
