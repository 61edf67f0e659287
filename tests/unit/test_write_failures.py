"""Smaller failures of issue 24 #8: the message after a failed write of a tool's result,
replayed exceptions' ``__notes__``, and a failed log rewrite's temporary file."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive.errors import JournalWriteError
from redrive.frames import Frame
from redrive.storage import MemoryJournal
from redrive.storage import _framelog as framelog
from redrive.storage._framelog import FrameLog
from tests.conftest import Drive, Loop


def test_a_failed_write_of_a_tools_result_says_its_body_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On main the error said "a tool whose claim this was did not run" though it ran."""
    journal = MemoryJournal()
    ran: list[int] = []

    @redrive.tool(restart_safe=False)
    def charge(n: int) -> int:
        ran.append(n)
        return n

    real = journal.append

    def full(run_id: str, frames: list[Frame], **kw: Any) -> Any:
        if any(f.kind == "tool_done" for f in frames):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(run_id, frames, **kw)

    monkeypatch.setattr(journal, "append", full)
    with pytest.raises(JournalWriteError) as caught, redrive.run(journal, "r"):
        charge(5)
    text = str(caught.value)
    assert ran == [5]
    assert "did not run" not in text and "'charge' ran" in text and "redrive resolve" in text


class _Noted(Exception):
    pass


def test_a_replayed_exception_keeps_its_notes(drive: Drive) -> None:
    """On main the replayed exception had no ``__notes__`` (PEP 678)."""
    journal = MemoryJournal()
    calls: list[int] = []

    def lookup(n: int) -> int:
        calls.append(n)
        exc = _Noted(f"no item {n}")
        exc.add_note("the catalogue was being rebuilt")
        raise exc

    tool = drive.tool(lookup, read_only=True)

    seen: list[list[str]] = []

    def loop(run: redrive.Run) -> Loop:
        try:
            yield tool(3)
        except _Noted as exc:
            seen.append(list(getattr(exc, "__notes__", [])))
        return run.finish(None)

    drive.run(journal, "r", loop)
    drive.run(journal, "r", loop)
    assert calls == [3]  # the second run replayed it
    assert seen == [["the catalogue was being rebuilt"]] * 2


def test_a_failed_log_rewrite_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On main a rewrite whose fsync failed (disk full) left ``.rdlog.rewrite.tmp`` behind."""
    path = str(tmp_path / "j.duckdb.rdlog")
    log = FrameLog(path)
    log.append(["run", 1])
    before = Path(path).read_bytes()

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(framelog.os, "fsync", no_space)
    with pytest.raises(OSError):
        log.rewrite([["run", 2]])
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["j.duckdb.rdlog"]
    assert Path(path).read_bytes() == before
    log.close()
