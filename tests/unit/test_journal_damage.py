"""The DuckDB journal's frame log under damage: torn tails, damaged lengths and
checksums mid-log, oversized and hostile records all give JournalCorruptError, never a crash."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgpack
import pytest

import redrive
from redrive.errors import JournalCorruptError
from redrive.storage import _framelog as framelog
from redrive.storage._framelog import MAGIC, START, FrameLog, record_bytes
from redrive.storage._logrecord import record_run
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
        f.seek(offset + 4)  # the length follows the 4-byte marker
        f.write(struct.pack(">I", length))


SALT = b"saltsalt"


def record(body: bytes, number: int = 0) -> bytes:
    return record_bytes(SALT, number, body)


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
    writer.close()  # trims the preallocated zero tail, which is read in scan chunks
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
    assert log.size() == START


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
    """A checksummed but malformed record raises JournalCorruptError naming file and offset:
    for the journal when the record names no run, else for its run alone (issue 24 #6)."""
    path = str(tmp_path / "j.duckdb")
    good = msgpack.packb(["frames", _RUN, [_FRAME]], use_bin_type=True)
    bad = msgpack.packb(HOSTILE[name], use_bin_type=True)
    Path(path + ".rdlog").write_bytes(MAGIC + SALT + record(good) + record(bad, 1))
    if record_run(HOSTILE[name]) is None:
        with pytest.raises(JournalCorruptError) as caught:
            DuckDBJournal(path)
    else:
        journal = DuckDBJournal(path)
        try:
            with pytest.raises(JournalCorruptError) as caught:
                journal.get_run("r")
        finally:
            journal.close()
    err = caught.value
    offset = START + len(record(good))
    assert err.fields["source"] == path + ".rdlog" and err.fields["offset"] == offset
    assert err.fields["record_index"] == 1 and f"byte {offset}" in str(err)
    assert err.run_id == "r" and err.fields["last_good_seq"] == 0


def test_ext_types_in_log_records_are_corruption() -> None:
    """Ext values (overflowing timedeltas, 2000-deep prefix refs) raise, in a child process."""
    child = textwrap.dedent("""
        import os, struct, tempfile, msgpack, xxhash, redrive
        from redrive.storage._framelog import MAGIC, record_bytes
        def rec(b): return b"saltsalt" + record_bytes(b"saltsalt", 0, b)
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
                assert e.fields["reason"] == "decode" and e.fields["offset"] == 16, e.fields
                print("corrupt")
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["corrupt", "corrupt"]
