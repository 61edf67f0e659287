"""Storage fixes: mid-log damage, one journal per file, hostile log records, Postgres URLs, sql."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import msgpack
import pytest
import xxhash

import redrive
from redrive import cli
from redrive.errors import JournalCorruptError, JournalLockedError
from redrive.storage import Journal, _close_shared, shared_journal
from redrive.storage import _framelog as framelog
from redrive.storage._framelog import MAGIC, FrameLog
from redrive.storage.duckdb import DuckDBJournal


def crash(journal: DuckDBJournal) -> None:
    """Drop a journal as a killed process would: no checkpoint, the file released."""
    journal._log.close()  # type: ignore[union-attr]
    journal._store.close()
    journal._release()


def logged_journal(tmp_path: Path, steps: int = 3) -> tuple[str, list[int]]:
    """Record a run whose writes stay in the log only; return the path and record offsets."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=10_000)

    @redrive.tool(read_only=True)
    def get_item(n: int) -> str:
        return f"item {n}"

    with redrive.run(journal, "r") as run:
        run.finish([get_item(n) for n in range(steps)])
    crash(journal)
    offsets = [offset for offset, _ in FrameLog(path + ".rdlog", read_only=True).entries()]
    return path, offsets


def set_length(log: str, offset: int, length: int) -> None:
    with open(log, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack(">I", length))


def record(body: bytes) -> bytes:
    return struct.pack(">I8s", len(body), xxhash.xxh3_64_digest(body)) + body


# -- 1. damage in the middle of the log ---------------------------------------------------


@pytest.mark.parametrize("damage", ["over the limit", "past the end"])
@pytest.mark.parametrize("read_only", [False, True])
def test_damaged_length_mid_log_is_corruption(tmp_path: Path, damage: str, read_only: bool) -> None:
    """A bad length with valid records after it raises, names the last good record, cuts nothing."""
    path, offsets = logged_journal(tmp_path)
    log = path + ".rdlog"
    length = 0x8000_0000 if damage == "over the limit" else os.path.getsize(log)
    set_length(log, offsets[1], length)
    before = Path(log).read_bytes()
    with pytest.raises(JournalCorruptError) as caught:
        DuckDBJournal(path, read_only=read_only)
    err = caught.value
    assert Path(log).read_bytes() == before
    assert err.fields["source"] == log and err.fields["offset"] == offsets[1]
    assert err.fields["record_index"] == 1 and err.fields["next_record_offset"] == offsets[2]
    assert err.run_id == "r" and err.fields["last_good_seq"] == 0
    assert "valid record follows" in str(err) and "not changed" in str(err)


def test_mid_log_damage_blocks_the_rerun_of_a_tool(tmp_path: Path) -> None:
    """The reviewer's case: no silent truncation, so a resumed run cannot repeat the tool."""
    path, offsets = logged_journal(tmp_path)
    log = path + ".rdlog"
    data = bytearray(Path(log).read_bytes())
    data[offsets[1]] ^= 0x80
    Path(log).write_bytes(bytes(data))
    for _ in range(2):
        with pytest.raises(JournalCorruptError):
            DuckDBJournal(path)
    assert Path(log).read_bytes() == bytes(data)


def test_read_only_log_never_cuts_a_torn_tail(tmp_path: Path) -> None:
    """A torn last record is skipped read-only and only cut when the log is writable."""
    log = str(tmp_path / "x.rdlog")
    writer = FrameLog(log)
    writer.append(["one"])
    writer.append(["two", "x" * 100])
    writer.close()
    size = os.path.getsize(log)
    with open(log, "r+b") as f:
        f.truncate(size - 10)
    assert list(FrameLog(log, read_only=True).records()) == [["one"]]
    assert os.path.getsize(log) == size - 10
    assert list(FrameLog(log).records()) == [["one"]]
    assert os.path.getsize(log) < size - 10


def test_checksum_damage_keeps_the_log_and_says_so(tmp_path: Path) -> None:
    """Checksum damage mid-log names the last good run and seq and says to keep the log."""
    path, offsets = logged_journal(tmp_path, steps=4)
    log = path + ".rdlog"
    data = bytearray(Path(log).read_bytes())
    data[offsets[2] + 20] ^= 1
    Path(log).write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match="checksum") as caught:
        DuckDBJournal(path)
    text = str(caught.value)
    assert "move the log away" not in text and "Keep a copy" in text
    assert "redrive --journal COPY verify" in text
    assert caught.value.run_id == "r" and caught.value.fields["last_good_seq"] is not None


def test_reads_are_bounded_by_the_largest_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a log never asks for more bytes at once than a record (or a scan chunk)."""
    log = str(tmp_path / "x.rdlog")
    writer = FrameLog(log)
    for n in range(200):
        writer.append(["r", n, "y" * 1000])
    size = writer.size()
    reads: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, f: Any) -> None:
            self.f = f

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def read(self, n: int = -1) -> bytes:
            reads.append(n)
            data: bytes = self.f.read(n)
            return data

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

    monkeypatch.setattr(framelog, "open", lambda p, m: Counting(real_open(p, m)), raising=False)
    assert len(list(FrameLog(log, read_only=True).records())) == 200
    assert reads and all(0 <= n <= 1100 for n in reads) and size > 200_000
    with open(log, "ab") as f:  # a torn tail: the scan after it reads bounded chunks too
        f.write(struct.pack(">I", 5000) + b"z" * 3000)
    reads.clear()
    assert len(list(FrameLog(log, read_only=True).records())) == 200
    assert max(reads) <= framelog._SCAN_CHUNK + 64


@pytest.mark.parametrize("bad", [5, [], ["Run"], [1, 2], ["t", *range(15)]])
def test_append_refuses_records_without_a_type_tag(tmp_path: Path, bad: Any) -> None:
    """Records must be short lists led by a lowercase tag (what the damage scan looks for)."""
    log = FrameLog(str(tmp_path / "x.rdlog"))
    with pytest.raises(ValueError, match="type tag"):
        log.append(bad)
    assert log.size() == len(MAGIC)


# -- 2. one writable journal per file per process ----------------------------------------


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


# -- 3. hostile records with good checksums ---------------------------------------------

_RUN = ["r", "running", 1, "c" * 32, "f" * 32, None, 1.0, 1.0, None, None, None, 0, None]
_FRAME = ["r", 0, "run_start", "", "", b"\x80", "c" * 32, 1.0, 0]

HOSTILE = {
    "an int": 5,
    "unknown type": ["compact", []],
    "short run row": ["frames", ["r"], []],
    "decision with a foreign field": ["decision", {"nope": 1}],
    "seq is text": ["frames", _RUN, [[*_FRAME[:1], "0", *_FRAME[2:]]]],
    "payload is a list": ["frames", _RUN, [[*_FRAME[:5], [1], *_FRAME[6:]]]],
    "bool as an epoch": ["run", [*_RUN[:11], True, None]],
    "unknown status": ["run", [_RUN[0], "zombie", *_RUN[2:]]],
    "seq gap": ["frames", [*_RUN[:2], 3, *_RUN[3:]], [[*_FRAME[:1], 2, *_FRAME[2:]]]],
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_records_are_corruption(tmp_path: Path, name: str) -> None:
    """A checksummed but malformed record raises JournalCorruptError naming file and offset."""
    path = str(tmp_path / "j.duckdb")
    good = msgpack.packb(["frames", _RUN, [_FRAME]], use_bin_type=True)
    bad = msgpack.packb(HOSTILE[name], use_bin_type=True)
    Path(path + ".rdlog").write_bytes(MAGIC + record(good) + record(bad))
    with pytest.raises(JournalCorruptError) as caught:
        DuckDBJournal(path)
    err = caught.value
    offset = len(MAGIC) + len(record(good))
    assert err.fields["source"] == path + ".rdlog" and err.fields["offset"] == offset
    assert err.fields["record_index"] == 1 and f"byte {offset}" in str(err)
    assert err.run_id == "r" and err.fields["last_good_seq"] == 0


def test_ext_types_in_log_records_are_corruption() -> None:
    """Ext values (overflowing timedeltas, 2000-deep prefix refs) raise, in a child process."""
    child = textwrap.dedent("""
        import os, struct, tempfile, msgpack, xxhash, redrive
        from redrive.storage._framelog import MAGIC
        def rec(b): return struct.pack(">I8s", len(b), xxhash.xxh3_64_digest(b)) + b
        deep = msgpack.packb([0, []])
        for _ in range(2000):
            inner = msgpack.packb([0, [msgpack.ExtType(9, deep)]], use_bin_type=True)
            deep = msgpack.packb(msgpack.ExtType(9, inner))
        for body in (msgpack.packb(msgpack.ExtType(8, msgpack.packb([10**12, 0, 0]))), deep):
            path = os.path.join(tempfile.mkdtemp(), "j.duckdb")
            open(path + ".rdlog", "wb").write(MAGIC + rec(body))
            try:
                redrive.open_journal(path)
            except redrive.JournalCorruptError as e:
                assert e.fields["reason"] == "decode" and e.fields["offset"] == 8, e.fields
                print("corrupt")
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["corrupt", "corrupt"]


# -- 4. Postgres URLs that cannot be opened -----------------------------------------------


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


# -- 5. redrive sql: frames.data is the full payload --------------------------------------


def test_sql_data_resolves_prefix_deltas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """frames.data of model requests stored as deltas is the full request as JSON."""
    path = str(tmp_path / "runs.duckdb")

    @redrive.model
    def chat(messages: list[dict[str, str]]) -> str:
        return f"reply {len(messages)}"

    journal = DuckDBJournal(path)
    with redrive.run(journal, "c") as run:
        messages = [{"role": "system", "content": "be brief"}]
        for i in range(4):
            messages.append({"role": "user", "content": f"question {i}"})
            messages.append({"role": "assistant", "content": chat(messages)})
        run.finish("ok")
    journal.close()
    code = cli.main(
        [
            "--journal",
            path,
            "--json",
            "sql",
            "SELECT data FROM frames WHERE kind = 'model_request' ORDER BY seq",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "PrefixRef" not in out
    rows = json.loads(out)["rows"]
    lengths = [len(json.loads(r["data"])["args"]["messages"]) for r in rows]
    assert lengths == [2, 4, 6, 8]
