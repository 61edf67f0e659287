"""The ``.rdlog`` preallocated zero tail (issue 26 item 6).

A writer writes each record over zeros it wrote earlier, so an ``fdatasync``
changes no file size. A reader takes zeros to the end of the file as the end
of the log; a record torn inside the tail is a torn tail; a log without a
tail (older writers, closed logs) reads as before.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.storage import _framelog as framelog
from redrive.storage._duckdb_open import _log_holds_records
from redrive.storage._framelog import MAGIC, START, FrameLog, record_bytes
from redrive.storage._logformat import TAIL_MAX, TAIL_MIN, tail_chunk
from redrive.storage.duckdb import DuckDBJournal


def killed(log: FrameLog) -> None:
    """Drop a writable log as a killed process would: the zero tail stays."""
    assert log._fd is not None
    os.close(log._fd)
    log._fd = None


def written(path: str, count: int) -> tuple[bytes, list[int]]:
    """Append ``count`` records to a new log at ``path``; return its bytes and record ends."""
    log = FrameLog(path)
    ends = []
    for n in range(count):
        log.append(["r", n, "x" * (n * 97 % 700)])
        ends.append(log.size())
    killed(log)
    return Path(path).read_bytes(), ends


def test_records_are_written_over_a_zero_tail_that_grows_in_chunks(tmp_path: Path) -> None:
    """The file is bigger than its records and an append inside the tail keeps its size."""
    path = str(tmp_path / "x.rdlog")
    log = FrameLog(path)
    log.append(["r", 0])
    grown = os.path.getsize(path)
    assert grown >= START + TAIL_MIN and grown % 4096 == 0 and log.size() < grown
    for n in range(1, 20):
        log.append(["r", n])
    assert os.path.getsize(path) == grown
    assert Path(path).read_bytes()[log.size() :] == bytes(grown - log.size())
    assert list(FrameLog(path, read_only=True).records()) == [["r", n] for n in range(20)]
    log.close()  # trims the tail
    assert os.path.getsize(path) == log.size()
    assert list(FrameLog(path, read_only=True).records()) == [["r", n] for n in range(20)]


def test_tail_chunks_are_bounded_and_end_on_a_page() -> None:
    """Growth is the log's size, within 64 KB and 1 MB, so the file ends on 4 KB."""
    for end in (START + 40, 5000, 70_000, 300_000, 5_000_000):
        grow = tail_chunk(end)
        assert (end + grow) % 4096 == 0
        assert TAIL_MIN <= grow < TAIL_MAX + 4096


def test_a_writer_reopening_a_killed_log_keeps_its_tail_and_goes_on(tmp_path: Path) -> None:
    """A zero tail is the end of the log: reopening cuts nothing and appends into it."""
    path = str(tmp_path / "x.rdlog")
    data, _ends = written(path, 5)
    size = len(data)
    again = FrameLog(path)
    assert list(again.records()) == [r for r in FrameLog(path, read_only=True).records()]
    assert os.path.getsize(path) == size  # nothing cut
    again.append(["r", 5])
    assert os.path.getsize(path) == size
    assert [r[1] for r in FrameLog(path, read_only=True).records()] == [0, 1, 2, 3, 4, 5]
    again.close()


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(1, 12),
    keep=st.data(),
)
def test_a_torn_last_record_in_the_tail_reads_back_exactly_the_durable_ones(
    count: int, keep: st.DataObject
) -> None:
    """Property: any tear of the last record (by bytes or by 512-byte sectors) loses only it.

    The log is written into its preallocated tail; the bytes of the last
    record are replaced by zeros outside a random prefix or a random set of
    sectors (what a crash mid-write leaves there). Reading, read-only or
    writable, gives exactly the records before it; a writer then appends after
    them and nothing else.
    """
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.rdlog")
        data, ends = written(path, count)
        every = list(FrameLog(path, read_only=True).records())
        start, end = ([START, *ends])[count - 1], ends[-1]
        torn = bytearray(data)
        if keep.draw(st.booleans(), label="by sectors"):
            sectors = range(start // 512, (end - 1) // 512 + 1)
            kept = keep.draw(st.sets(st.sampled_from(list(sectors))), label="sectors kept")
            for sector in sectors:
                if sector not in kept:
                    lo, hi = max(start, sector * 512), min(end, sector * 512 + 512)
                    torn[lo:hi] = bytes(hi - lo)
            if torn == bytearray(data):
                return  # every sector of the record made it: not torn
        else:
            cut = keep.draw(st.integers(start, end - 1), label="bytes kept")
            torn[cut:end] = bytes(end - cut)
        Path(path).write_bytes(bytes(torn))
        assert list(FrameLog(path, read_only=True).records()) == every[:-1]
        writer = FrameLog(path)
        assert list(writer.records()) == every[:-1]
        writer.append(["after"])
        writer.close()
        assert list(FrameLog(path, read_only=True).records()) == [*every[:-1], ["after"]]


def test_a_crash_mid_extension_leaves_a_shorter_tail_that_reads_the_same(tmp_path: Path) -> None:
    """The record that grows the tail, with only part of its zeros on disk, is read whole."""
    path = str(tmp_path / "x.rdlog")
    data, ends = written(path, 3)
    for size in (ends[-1], ends[-1] + 1, ends[-1] + 27, ends[-1] + 4000):
        Path(path).write_bytes(data[:size])
        assert len(list(FrameLog(path).records())) == 3
        assert os.path.getsize(path) == size  # zeros are not cut


def test_damage_before_a_zero_tail_is_still_told_from_a_tear(tmp_path: Path) -> None:
    """A zeroed header with a good record after it is mid-file damage, tail or no tail."""
    path = str(tmp_path / "x.rdlog")
    data, ends = written(path, 4)
    damaged = bytearray(data)
    damaged[ends[0] : ends[0] + 28] = bytes(28)
    Path(path).write_bytes(bytes(damaged))
    with pytest.raises(redrive.JournalCorruptError) as caught:
        list(FrameLog(path).records())
    assert caught.value.fields["next_record_offset"] == ends[1]
    assert Path(path).read_bytes() == bytes(damaged)  # the file was not changed


def test_a_log_without_a_tail_from_an_older_writer_is_read_and_extended(tmp_path: Path) -> None:
    """A format-2 log written by appending (no zeros) reads as before; a writer adds a tail."""
    path = str(tmp_path / "x.rdlog")
    salt = b"s" * 8
    records = [["r", n] for n in range(3)]
    Path(path).write_bytes(
        MAGIC
        + salt
        + b"".join(record_bytes(salt, n, framelog.encode(r)) for n, r in enumerate(records))
    )
    log = FrameLog(path)
    assert list(log.records()) == records
    log.append(["r", 3])
    assert os.path.getsize(path) > log.size()
    killed(log)
    assert list(FrameLog(path, read_only=True).records()) == [*records, ["r", 3]]


def test_a_journal_left_with_a_zero_tail_reopens_and_closes_without_it(tmp_path: Path) -> None:
    """A killed DuckDB journal's log ends in zeros; reopening reads its runs, close trims it."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path)

    @redrive.tool(name="charge", restart_safe=False)
    def charge(n: int) -> int:
        return n

    with redrive.run(journal, "r"):
        charge(1)
        charge(2)
    assert journal._log is not None
    size = journal._log.size()
    killed(journal._log)
    journal._store.close()
    journal._release()
    assert os.path.getsize(path + ".rdlog") > size
    again = DuckDBJournal(path)
    done = [f for f in again.frames("r") if f.kind == "tool_done"]
    assert len(done) == 2
    again.close()
    log = FrameLog(path + ".rdlog")
    list(log.records())
    assert log.size() == os.path.getsize(path + ".rdlog")  # no zeros after the records
    log.close()


def test_only_zeros_after_the_header_are_no_records(tmp_path: Path) -> None:
    """The journal opens its tables at once for a log that is a header and zeros."""
    path = str(tmp_path / "x.rdlog")
    Path(path).write_bytes(MAGIC + b"s" * 8 + bytes(TAIL_MIN))
    assert not _log_holds_records(path)
    written(path, 1)
    assert _log_holds_records(path)


def test_a_failed_tail_extension_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full while growing the tail: the append raises, the log is as it was."""
    path = str(tmp_path / "x.rdlog")
    log = FrameLog(path)
    log.append(["kept"])
    while os.path.getsize(path) - log.size() > 3000:  # fill the first chunk
        log.append(["filler", "y" * 1000])
    before = list(FrameLog(path, read_only=True).records())
    real = os.pwrite

    def full(fd: int, data: bytes, offset: int) -> int:
        if len(data) >= TAIL_MIN:
            raise OSError(28, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(framelog.os, "pwrite", full)
    with pytest.raises(OSError, match="No space"):
        log.append(["lost", "z" * 4000])
    monkeypatch.undo()
    assert os.path.getsize(path) == log.size()
    assert list(FrameLog(path, read_only=True).records()) == before
    log.append(["after"])
    assert list(FrameLog(path, read_only=True).records()) == [*before, ["after"]]
    log.close()


@pytest.mark.parametrize(("zeros", "holds"), [(0, False), (64, True), (70_000, True)])
def test_the_journal_tells_a_zero_tail_from_records_after_zeros(
    tmp_path: Path, zeros: int, holds: bool
) -> None:
    """Only zeros from the header to the end mean no records, however far they reach."""
    from redrive.storage._duckdb_open import _log_holds_records
    from redrive.storage._framelog import MAGIC, START

    path = tmp_path / "j.duckdb.rdlog"
    tail = bytes(zeros) + (b"\x01" if holds else b"")
    path.write_bytes(MAGIC + b"\x07" * (START - len(MAGIC)) + tail + bytes(4096))
    assert _log_holds_records(str(path)) is holds
