"""Damage stays with the run it touches (issue 24 #6): a bad record, row or imported run
makes that run unreadable and listed as damaged, never the journal; the other runs open,
resume (both faces) and list as before; `export --intact` and `drop` deal with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redrive import cli
from redrive.cli._damaged import damage_of
from redrive.errors import JournalCorruptError
from redrive.replay import iter_steps
from redrive.storage import Journal
from redrive.storage._framelog import FrameLog
from redrive.storage.duckdb import DuckDBJournal
from redrive.storage.postgres import PostgresJournal
from tests.conftest import Drive, Loop

RUNS = ("a", "b", "c")


class Desk:
    """Three runs that each sent one message and were killed before the second."""

    def __init__(self, drive: Drive) -> None:
        self.drive = drive
        self.sent: list[tuple[str, int]] = []

        def send(run_id: str, n: int) -> int:
            self.sent.append((run_id, n))
            return n

        self.send = drive.tool(send, restart_safe=False)

    def loop(self, run_id: str) -> Any:
        def body(run: Any) -> Loop:
            first = yield self.send(run_id, 1)
            second = yield self.send(run_id, 2)
            return run.finish(first + second)

        return body

    def crash_all(self, journal: Journal) -> None:
        for run_id in RUNS:
            self.drive.crash(journal, run_id, "tool_recorded", "send", self.loop(run_id))

    def resume_others(self, journal: Journal) -> None:
        """b and c resume: each sends its second message once, never its first again."""
        self.sent.clear()
        for run_id in ("b", "c"):
            assert self.drive.run(journal, run_id, self.loop(run_id)).value == 3
        assert self.sent == [("b", 2), ("c", 2)]
        with pytest.raises(JournalCorruptError) as caught:
            self.drive.run(journal, "a", self.loop("a"))
        assert caught.value.run_id == "a"
        assert self.sent == [("b", 2), ("c", 2)]  # nothing of run a ran


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _listed_damaged(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, text = _cli(capsys, "--journal", url, "runs")
    assert code == cli.EXIT_OK
    assert "damaged" in text and "--intact" in text and "redrive drop a" in text
    code, text = _cli(capsys, "--journal", url, "verify")
    assert code == cli.EXIT_FAILED and text.count("CORRUPT") == 1 and text.count("ok ") == 2


def _bad_log_record(path: str) -> None:
    """Append, as another process would, a checksummed record of run a: its last frame
    again with an epoch no BIGINT column holds."""
    log = FrameLog(path + ".rdlog")
    last = [r for r in log.records() if r[0] == "frames" and r[1][0] == "a"][-1]
    frame = list(last[2][-1])
    frame[8] = 2**64 - 1
    log.append(["frames", last[1], [frame]])
    log.close()


def test_a_bad_log_record_damages_its_run_only(
    drive: Drive, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#6: on main the whole journal refused to open (JournalCorruptError on open)."""
    path = str(tmp_path / "j.duckdb")
    desk = Desk(drive)
    journal = DuckDBJournal(path)
    desk.crash_all(journal)
    journal.close()
    _bad_log_record(path)
    journal = DuckDBJournal(path)
    assert sorted(r.run_id for r in journal.runs()) == list(RUNS)
    desk.resume_others(journal)
    journal.close()  # the checkpoint keeps run a damaged (a `damaged` record in the log)
    _listed_damaged_after_resume(capsys, path)
    code, text = _cli(
        capsys, "--journal", path, "export", "a", "--intact", "-o", str(tmp_path / "a.rdj")
    )
    assert code == cli.EXIT_OK and "intact" in text
    code, _ = _cli(capsys, "--journal", path, "drop", "b")
    assert code == cli.EXIT_FAILED  # a readable run is not dropped
    code, _ = _cli(capsys, "--journal", path, "drop", "a")
    assert code == cli.EXIT_OK
    code, text = _cli(capsys, "--journal", path, "verify")
    assert code == cli.EXIT_OK and "CORRUPT" not in text
    code, text = _cli(capsys, "--journal", path, "import", str(tmp_path / "a.rdj"))
    assert code == cli.EXIT_OK, text
    journal = DuckDBJournal(path)
    row = journal.get_run("a")
    assert row is not None and row.status == "running" and row.next_seq >= 2
    journal.close()


def _listed_damaged_after_resume(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, text = _cli(capsys, "--journal", url, "runs")
    assert code == cli.EXIT_OK and "damaged" in text and "redrive drop a" in text
    code, text = _cli(capsys, "--journal", url, "verify")
    assert code == cli.EXIT_FAILED and text.count("CORRUPT") == 1, text


def _bad_rows(cur: Any, mark: str = "?") -> None:
    sql = f"UPDATE redrive_frames SET payload = {mark} WHERE run_id = 'a' AND seq = 1"
    cur.execute(sql, [b"\xc1"])


def test_a_bad_duckdb_row_damages_its_run_only(
    drive: Drive, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row of run a's frames altered in the tables: b and c resume, a is listed damaged."""
    path = str(tmp_path / "j.duckdb")
    desk = Desk(drive)
    journal = DuckDBJournal(path)
    desk.crash_all(journal)
    journal.checkpoint()  # everything into the tables
    journal.close()
    with duckdb.connect(path) as con:
        _bad_rows(con)
    journal = DuckDBJournal(path)
    desk.resume_others(journal)
    journal.close()
    _listed_damaged_after_resume(capsys, path)
    code, _ = _cli(capsys, "--journal", path, "drop", "a")
    assert code == cli.EXIT_OK
    assert _cli(capsys, "--journal", path, "verify")[0] == cli.EXIT_OK


@pytest.mark.parametrize(
    "change",
    [
        "status = 'bogus'",
        "next_seq = -5",
        "last_chain = 'zz'",
        "created_at = 'NaN'::DOUBLE",
        "lease_epoch = -1",
    ],
)
def test_a_malformed_run_row_damages_its_run_only(
    drive: Drive, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    """Run a's own row (not its frames) altered in the table: `verify` said CORRUPT while
    `runs` listed it by its status, `show` printed it and a resume went ahead (outside test
    of issue 24; `status = 'bogus'` raised a bare ValueError). Now every reader refuses that
    run alike, and only that run."""
    import json

    path = str(tmp_path / "j.duckdb")
    desk = Desk(drive)
    journal = DuckDBJournal(path)
    desk.crash_all(journal)
    journal.checkpoint()
    journal.close()
    with duckdb.connect(path) as con:
        con.execute(f"UPDATE redrive_runs SET {change} WHERE run_id = 'a'")
    journal = DuckDBJournal(path)
    desk.resume_others(journal)
    journal.close()
    _listed_damaged_after_resume(capsys, path)
    code, text = _cli(capsys, "--journal", path, "--json", "runs")
    rows = {row["run_id"]: row for row in json.loads(text)["runs"]}
    assert rows["a"]["status"] == "damaged" and "row is malformed" in rows["a"]["damaged"]
    assert rows["b"]["status"] == rows["c"]["status"] == "succeeded"
    code, text = _cli(capsys, "--journal", path, "show", "a")
    assert code == cli.EXIT_JOURNAL and "row is malformed" in text
    assert _cli(capsys, "--journal", path, "drop", "a")[0] == cli.EXIT_OK
    assert _cli(capsys, "--journal", path, "verify")[0] == cli.EXIT_OK


def test_a_bad_postgres_row_damages_its_run_only(drive: Drive, pg_url: str, pg_schema: str) -> None:
    """The same on Postgres: the altered row's run alone is unreadable."""
    import psycopg

    desk = Desk(drive)
    journal = PostgresJournal(pg_url, schema=pg_schema)
    desk.crash_all(journal)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{pg_schema}"')
        _bad_rows(conn.cursor(), "%s")
        conn.execute("UPDATE redrive_runs SET lease_expires = 0")  # the killed workers' leases
    desk.resume_others(journal)
    assert damage_of(journal, "a") is not None
    assert damage_of(journal, "b") is None and damage_of(journal, "c") is None
    assert [r.run_id for r in journal.runs()].count("a") == 1  # still listed
    journal.close()


INTS = st.integers(-(2**63), 2**64 - 1)
LOG_MUTATIONS = st.one_of(
    st.tuples(
        st.just("frame"),
        st.integers(1, 8),
        st.one_of(INTS, st.text(max_size=3), st.binary(max_size=3), st.none(), st.floats()),
    ),
    st.tuples(
        st.just("row"),
        st.integers(1, 12),
        st.one_of(INTS, st.text(max_size=3), st.none(), st.sampled_from(["succeeded", "zombie"])),
    ),
)
_BASE: dict[str, bytes] = {}


def _base_files(folder: Path) -> str:
    """Three runs killed after their first message, in the log only (made once, copied)."""
    path = folder / "j.duckdb"
    if not _BASE:
        journal = DuckDBJournal(str(path))
        Desk(Drive("sync")).crash_all(journal)
        journal.close()
        _BASE.update(db=path.read_bytes(), log=Path(f"{path}.rdlog").read_bytes())
    else:
        path.write_bytes(_BASE["db"])
        Path(f"{path}.rdlog").write_bytes(_BASE["log"])
    return str(path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutation=LOG_MUTATIONS)
def test_any_record_appended_for_one_run_leaves_the_others_whole(
    tmp_path_factory: pytest.TempPathFactory, mutation: tuple[str, int, Any]
) -> None:
    """Property: a checksummed record of run a with one field changed, appended to the log:
    the journal opens, b and c read and verify as before; a reads exactly when it verifies."""
    path = _base_files(tmp_path_factory.mktemp("log"))
    log = FrameLog(path + ".rdlog")
    last = [r for r in log.records() if r[0] == "frames" and r[1][0] == "a"][-1]
    what, index, value = mutation
    row, frame = list(last[1]), list(last[2][-1])
    (frame if what == "frame" else row)[index] = value
    log.append(["frames", row, [frame]])
    log.close()
    journal = DuckDBJournal(path)
    try:
        assert damage_of(journal, "b") is None and damage_of(journal, "c") is None
        verdict = damage_of(journal, "a") is None
        try:
            assert journal.get_run("a") is not None
            for _step in iter_steps(journal.frames("a"), "a"):
                pass
            reads = True
        except JournalCorruptError:
            reads = False
        assert verdict == reads
    finally:
        journal.close()
