"""The DuckDB journal's fsynced log: torn tails, damage, checkpoints and reopening."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import redrive
from redrive.errors import JournalCorruptError, JournalFormatError
from redrive.storage import verify_frames
from redrive.storage._framelog import START, FrameLog
from redrive.storage.duckdb import DuckDBJournal


def record_run(journal: DuckDBJournal, run_id: str, steps: int) -> None:
    @redrive.tool(read_only=True)
    def get_item(n: int) -> str:
        return f"item {n}"

    with redrive.run(journal, run_id) as run:
        run.finish([get_item(n) for n in range(steps)])


def crash(journal: DuckDBJournal) -> None:
    """Drop a journal as a killed process would: no checkpoint, the file released."""
    journal._settle()  # a background checkpoint in flight ends first
    journal._log.close()  # type: ignore[union-attr]
    journal._store.close()
    journal._release()


def test_log_holds_writes_until_checkpoint(tmp_path: Path) -> None:
    """Acknowledged writes live in the log, are readable at once, and survive a reopen."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=10_000)
    record_run(journal, "r", 5)
    assert os.path.getsize(path + ".rdlog") > START
    assert journal.get_run("r").status == "succeeded"  # type: ignore[union-attr]
    frames = list(journal.frames("r"))
    assert verify_frames(iter(frames), source="test") == 12
    crash(journal)
    reopened = DuckDBJournal(path)
    assert [f.chain for f in reopened.frames("r")] == [f.chain for f in frames]
    # opening reads the log and leaves it (no bulk move on the resume path); close keeps
    # a run that ended recently in the log; checkpoint() moves it
    assert os.path.getsize(path + ".rdlog") > START
    reopened.close()
    assert os.path.getsize(path + ".rdlog") > START
    again = DuckDBJournal(path)
    again.checkpoint()
    assert os.path.getsize(path + ".rdlog") == START
    assert [f.chain for f in again.frames("r")] == [f.chain for f in frames]
    again.close()


def test_checkpoint_threshold_moves_frames_into_duckdb(tmp_path: Path) -> None:
    """Past the threshold the frames move into DuckDB; reads span both seamlessly."""
    journal = DuckDBJournal(str(tmp_path / "runs.duckdb"), checkpoint_frames=7)
    record_run(journal, "a", 20)
    record_run(journal, "b", 3)
    assert verify_frames(journal.frames("a"), source="a") == 42
    assert [r.run_id for r in journal.runs()] == ["b", "a"]
    journal._settle()  # threshold checkpoints run in the background
    assert journal._store.page("a", 0, 100)  # some of "a" is in the tables
    journal.close()


def test_torn_tail_is_cut_off(tmp_path: Path) -> None:
    """A record cut short by a crash mid-write is dropped; earlier records stay."""
    path = str(tmp_path / "x.rdlog")
    log = FrameLog(path)
    log.append(["one"])
    log.append(["two", "x" * 100])
    log.close()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 10)
    reopened = FrameLog(path)
    assert list(reopened.records()) == [["one"]]
    reopened.append(["three"])
    assert list(reopened.records()) == [["one"], ["three"]]


def test_damage_before_the_tail_is_corruption(tmp_path: Path) -> None:
    """A bad checksum with records after it raises JournalCorruptError, not silence."""
    path = str(tmp_path / "x.rdlog")
    log = FrameLog(path)
    log.append(["one", "payload"])
    log.append(["two"])
    with open(path, "r+b") as f:
        f.seek(START + 30)  # inside the first record's body
        f.write(b"\xff")
    with pytest.raises(JournalCorruptError, match="checksum"):
        list(FrameLog(path).records())


def test_foreign_file_is_refused(tmp_path: Path) -> None:
    """A log file that is not ours is refused with JournalFormatError."""
    path = tmp_path / "x.rdlog"
    path.write_bytes(b"hello world, not a log")
    with pytest.raises(JournalFormatError, match="bad magic"):
        list(FrameLog(str(path)).records())


def test_redoing_a_checkpoint_is_harmless(tmp_path: Path) -> None:
    """A crash between DuckDB's commit and emptying the log re-applies records idempotently."""
    path = str(tmp_path / "runs.duckdb")
    journal = DuckDBJournal(path, checkpoint_frames=10_000)
    record_run(journal, "r", 3)
    log_bytes = Path(path + ".rdlog").read_bytes()
    journal.close()  # checkpoint: frames now in DuckDB, log emptied
    Path(path + ".rdlog").write_bytes(log_bytes)  # as if the log had not been emptied
    again = DuckDBJournal(path)
    assert verify_frames(again.frames("r"), source="r") == 8
    assert len(again.runs()) == 1
    again.close()


def test_failed_log_write_leaves_no_partial_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When fsync fails the append raises and the log is cut back to its previous end."""
    path = str(tmp_path / "x.rdlog")
    log = FrameLog(path)
    log.append(["kept"])
    before = log.size()

    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("redrive.storage._framelog._sync", broken)
    with pytest.raises(OSError, match="No space"):
        log.append(["lost"])
    assert log.size() == before
    monkeypatch.undo()
    assert list(log.records()) == [["kept"]]


def test_an_append_reads_no_header_and_a_new_header_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The salt is read once, not per durable write; reset and rewrite write a new one.

    The records appended after them carry the new salt: they read back.
    """
    path = str(tmp_path / "x.rdlog")
    log = FrameLog(path)
    log.append(["r", 0])
    reads: list[int] = []
    real = os.pread

    def counted(fd: int, n: int, offset: int) -> bytes:
        reads.append(offset)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", counted)
    for n in range(1, 5):
        log.append(["r", n])
    assert reads == []
    log.reset()
    log.append(["s", 0])
    assert list(FrameLog(path, read_only=True).records()) == [["s", 0]]
    log.rewrite([["t", 0]])
    log.append(["t", 1])
    assert list(FrameLog(path, read_only=True).records()) == [["t", 0], ["t", 1]]
    log.close()
