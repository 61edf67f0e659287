"""The ``.rdlog`` tells a torn tail from mid-file damage by structure (issue 12 #4).

Every record carries a number and checks keyed by the log's salt; a header
with a good check is trusted. So a payload holding the bytes of valid log
records (of this log, or of a format-1 log) cannot make a torn tail look like
damage, nor damage look like a tail.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import msgpack
import xxhash
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.storage._framelog import MAGIC_V1, START, FrameLog, record_bytes
from redrive.storage.duckdb import DuckDBJournal


def crash(journal: DuckDBJournal) -> None:
    """Drop a journal as a killed process would: no checkpoint, the file released."""
    journal._log.close()  # type: ignore[union-attr]
    journal._store.close()
    journal._release()


def v1_record(body: bytes) -> bytes:
    return struct.pack(">I8s", len(body), xxhash.xxh3_64_digest(body)) + body


def tricky_journal(tmp_path: Path) -> tuple[str, bytes, list[int]]:
    """Record a run whose last tool result holds the bytes of valid log records.

    Returns the journal path, the log's bytes and the record offsets.
    """
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=10_000)

    @redrive.tool(read_only=True)
    def first() -> str:
        return "first"

    @redrive.tool(read_only=True)
    def read_log() -> bytes:
        # this log's own salted records so far (not its preallocated zero tail), plus a
        # format-1 record
        end = journal._log.size()  # type: ignore[union-attr]
        return Path(path + ".rdlog").read_bytes()[START:end] + v1_record(b"\x92\xa3run\x90" * 50)

    with redrive.run(journal, "r") as run:
        first()
        blob = read_log()
        run.finish(len(blob))
    crash(journal)
    data = Path(path + ".rdlog").read_bytes()
    offsets = [o for o, _ in FrameLog(path + ".rdlog", read_only=True).entries()]
    return path, data, offsets


def test_tail_torn_at_every_byte_reopens_and_keeps_finished_steps(tmp_path: Path) -> None:
    """Issue 12 #4: a tear anywhere in the records holding record bytes is a torn tail."""
    path, data, offsets = tricky_journal(tmp_path)
    log = path + ".rdlog"
    every = list(FrameLog(log, read_only=True).records())
    ends = [*offsets[1:], len(data)]
    holder = max(range(len(offsets)), key=lambda i: ends[i] - offsets[i])  # read_log's result
    for cut in range(offsets[holder], len(data)):
        Path(log).write_bytes(data[:cut])
        whole = sum(1 for end in ends if end <= cut)
        assert list(FrameLog(log).records()) == every[:whole], cut
        assert os.path.getsize(log) == [START, *ends][whole], cut
    # the journal itself reopens at sampled tears and keeps the finished first step
    for cut in (offsets[holder] + 3, offsets[holder] + 40, (offsets[holder] + len(data)) // 2):
        Path(log).write_bytes(data[:cut])
        reopened = DuckDBJournal(path)
        frames = list(reopened.frames("r"))
        assert any(f.name == "first" and f.kind == "tool_done" for f in frames)
        reopened.close()


def test_damaged_last_header_over_embedded_copies_is_a_torn_tail(tmp_path: Path) -> None:
    """A garbled header is followed only by copies of earlier records: still a torn tail."""
    path, data, offsets = tricky_journal(tmp_path)
    log = path + ".rdlog"
    every = list(FrameLog(log, read_only=True).records())
    ends = [*offsets[1:], len(data)]
    holder = max(range(len(offsets)), key=lambda i: ends[i] - offsets[i])
    damaged = bytearray(data[: ends[holder]])
    damaged[offsets[holder] + 5] ^= 0xFF  # the length field: the header check fails
    Path(log).write_bytes(bytes(damaged))
    assert list(FrameLog(log).records()) == every[:holder]
    assert os.path.getsize(log) == offsets[holder]


def test_zeroed_tail_is_torn_and_damage_before_a_record_is_not(tmp_path: Path) -> None:
    """Zeros where the last record was (a crash) are cut; the same damage before another is not."""
    path, data, offsets = tricky_journal(tmp_path)
    log = path + ".rdlog"
    every = list(FrameLog(log, read_only=True).records())
    Path(log).write_bytes(data[: offsets[-1]] + bytes(len(data) - offsets[-1]))
    assert list(FrameLog(log).records()) == every[:-1]
    middle = bytearray(data)
    middle[offsets[1] : offsets[1] + 28] = bytes(28)
    Path(log).write_bytes(bytes(middle))
    try:
        list(FrameLog(log).records())
    except redrive.JournalCorruptError as exc:
        assert exc.fields["next_record_offset"] == offsets[2]
    else:
        raise AssertionError("mid-file damage was taken for a torn tail")
    assert Path(log).read_bytes() == bytes(middle)


def test_format_1_logs_are_still_read_and_then_rewritten(tmp_path: Path) -> None:
    """A log of format 1 is read; the journal empties it and writes format 2 from then on."""
    path = str(tmp_path / "runs.duckdb")
    DuckDBJournal(path).close()
    run_row = ["r", "running", 1, "c" * 32, "f" * 32, None, 1.0, 1.0, None, None, None, 0, None]
    frame = ["r", 0, "run_start", "", "", b"\x80", "c" * 32, 1.0, 0]
    body = msgpack.packb(["frames", run_row, [frame]], use_bin_type=True)
    Path(path + ".rdlog").write_bytes(MAGIC_V1 + v1_record(body) + b"\x00\x00")  # torn tail
    journal = DuckDBJournal(path)
    assert Path(path + ".rdlog").read_bytes()[:8] == b"RDLOG\x00\x02\n"  # rewritten
    assert [f.seq for f in journal.frames("r")] == [0]
    crash(journal)
    again = DuckDBJournal(path)
    assert [f.seq for f in again.frames("r")] == [0]
    again.close()


@given(
    payloads=st.lists(st.binary(max_size=200), min_size=1, max_size=6),
    embed=st.lists(st.integers(0, 5), max_size=3),
    cut=st.floats(0, 1, exclude_max=True),
)
def test_any_tear_keeps_exactly_the_whole_records(
    payloads: list[bytes], embed: list[int], cut: float
) -> None:
    """Property: payloads holding copies of records (of this log and format 1), torn anywhere."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.rdlog")
        log = FrameLog(path)
        written: list[list[object]] = []
        for n, payload in enumerate(payloads):
            salt = Path(path).read_bytes()[8:START]
            extra = b"".join(
                Path(path).read_bytes()[START:] if e % 2 else v1_record(b"\x91\xa1x") for e in embed
            )
            extra += record_bytes(salt, n + 1, b"\x91\xa1y")  # even the next number
            record = ["t", payload + extra]
            log.append(record)
            written.append(record)
        log.close()
        data = Path(path).read_bytes()
        ends = [*[o for o, _ in FrameLog(path, read_only=True).entries()][1:], len(data)]
        at = START + int(cut * (len(data) - START))
        Path(path).write_bytes(data[:at])
        whole = sum(1 for e in ends if e <= at)
        assert list(FrameLog(path).records()) == written[:whole]
        assert os.path.getsize(path) == ([START, *ends])[whole]


def test_appending_after_a_torn_tail_is_read_back(tmp_path: Path) -> None:
    """Outside case amelielabs/amelie#17: a torn tail not cut before the next append hid
    every later record on the next recovery. Here the first append cuts it first."""
    path = str(tmp_path / "x.rdlog")
    log = FrameLog(path)
    log.append(["one"])
    log.append(["two", "x" * 100])
    log.close()
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 7)
    writer = FrameLog(path)  # no read before the append
    writer.append(["three"])
    writer.close()
    assert list(FrameLog(path).records()) == [["one"], ["three"]]
