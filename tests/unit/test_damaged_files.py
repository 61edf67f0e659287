"""Redrive's own errors only, on a damaged or foreign DuckDB file (issue 24 #5): every entry
point (open_journal, runs(), a replay, close(), the CLI) raises a redrive error, and `verify`
always ends with a verdict line, its advice right for the damage found."""

from __future__ import annotations

import contextvars
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive.errors import ReplayError

_TEMPLATE: dict[str, bytes] = {}


@redrive.tool(read_only=True)
def _lookup(n: int) -> int:
    return n * 2


def _journal_files(folder: Path, *, log: bool) -> str:
    """A DuckDB journal with a finished run in its tables and, with ``log``, an unfinished
    run held in its .rdlog; closed. Built once, then copied."""
    path = folder / "j.duckdb"
    if not _TEMPLATE:
        journal = redrive.open_journal(str(path))
        with redrive.run(journal, "done") as run:
            run.finish([_lookup(n) for n in range(3)])
        journal.checkpoint()  # type: ignore[attr-defined]

        def abandoned() -> None:  # as a SIGKILL leaves it; in a context of its own, so the
            redrive.run(journal, "open").__enter__()  # run is current for no later test
            _lookup(1)

        contextvars.Context().run(abandoned)
        journal.close()
        _TEMPLATE.update(db=path.read_bytes(), log=Path(f"{path}.rdlog").read_bytes())
    path.write_bytes(_TEMPLATE["db"])
    if log:
        Path(f"{path}.rdlog").write_bytes(_TEMPLATE["log"])
    return str(path)


def _every_entry_point(path: str) -> list[BaseException | None]:
    """Open, list, read, replay, close; each step's exception (None when it worked)."""
    found: list[BaseException | None] = []
    journal: Any = None

    def attempt(step: Callable[[], object]) -> None:
        try:
            step()
            found.append(None)
        except Exception as exc:
            found.append(exc)

    def opening() -> None:
        nonlocal journal
        journal = redrive.open_journal(path)

    attempt(opening)
    if journal is None:
        return found
    attempt(journal.runs)
    attempt(lambda: list(journal.frames("done")))

    def replay() -> None:
        with redrive.run(journal, "done") as run:
            assert _lookup(0) == 0
            run.finish([0, 2, 4])

    attempt(replay)
    attempt(journal.close)
    return found


def _verdict(capsys: pytest.CaptureFixture[str], path: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["--journal", path, "verify"])
    captured = capsys.readouterr()
    return code, captured.out


def _assert_only_redrive_errors(found: list[BaseException | None]) -> None:
    for exc in found:
        assert exc is None or isinstance(exc, ReplayError), repr(exc)


@pytest.mark.parametrize("log", [False, True])
def test_a_truncated_file_gives_redrive_errors_and_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], log: bool
) -> None:
    """#5: on main `_duckdb.IOException` came out of open_journal (no .rdlog), runs(),
    replay and close(); verify printed no verdict."""
    path = _journal_files(tmp_path, log=log)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    found = _every_entry_point(path)
    _assert_only_redrive_errors(found)
    assert any(exc is not None for exc in found)
    code, out = _verdict(capsys, path)
    assert code == cli.EXIT_FAILED and "CORRUPT" in out.splitlines()[-1]
    assert "damaged" in out and "Free disk space" not in out


def test_after_a_run_resumed_from_the_log_verify_gives_a_verdict_not_disk_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#5: a run held in the log resumes on a truncated file; then verify used to exit 1
    with no verdict, advising to free disk space."""
    path = _journal_files(tmp_path, log=True)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    journal = redrive.open_journal(path)
    errors = []
    try:
        with redrive.run(journal, "open") as run:  # wholly held in the log
            run.finish(_lookup(1))
    except ReplayError as exc:  # a write waits for the tables' open, which fails
        errors.append(exc)
    with pytest.raises(ReplayError) as caught:
        journal.close()
    errors.append(caught.value)
    assert all("Free disk space" not in str(e) and "damaged" in str(e) for e in errors)
    code, out = _verdict(capsys, path)
    assert code == cli.EXIT_FAILED and out.splitlines()[-1].startswith("CORRUPT")
    assert "disk space" not in out.replace("Freeing disk space does not help", "")


def _foreign(kind: str, path: Path) -> None:
    if kind == "random bytes":
        path.write_bytes(os.urandom(70_000))
    elif kind == "sqlite":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (x)")
        con.commit()
        con.close()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    elif kind == "duckdb header only":
        path.write_bytes(_TEMPLATE["db"][:4096])


@pytest.mark.parametrize(
    "kind", ["random bytes", "sqlite", "empty", "directory", "duckdb header only"]
)
def test_foreign_files_give_redrive_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A file that is not a journal: open_journal and the CLI say so in redrive's terms."""
    _journal_files(tmp_path, log=False)  # builds the template
    path = tmp_path / "foreign.duckdb"
    _foreign(kind, path)
    _assert_only_redrive_errors(_every_entry_point(str(path)))
    code, out = _verdict(capsys, str(path))
    assert code in (cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_NOT_FOUND)
    if code == cli.EXIT_FAILED:
        assert out.splitlines()[-1].startswith("CORRUPT")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    cut=st.one_of(st.none(), st.floats(0.0, 0.999)),
    flips=st.lists(st.tuples(st.floats(0.0, 0.999), st.integers(1, 255)), max_size=4),
    log=st.booleans(),
)
# a flipped bit in a data block: DuckDB raises its failed checksum as its base Error class
@example(cut=None, flips=[(0.25, 1)], log=False)
def test_any_truncation_or_byte_flip_gives_redrive_errors_and_a_verdict(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    cut: float | None,
    flips: list[tuple[float, int]],
    log: bool,
) -> None:
    """Property: a real DuckDB journal cut at any point or with bytes flipped: every entry
    point raises only redrive errors, and verify ends with a verdict line (exit 0 or 1)."""
    path = _journal_files(tmp_path_factory.mktemp("flip"), log=log)
    data = bytearray(Path(path).read_bytes())
    for where, mask in flips:
        data[int(where * len(data))] ^= mask
    if cut is not None:
        data = data[: int(cut * len(data))]
    Path(path).write_bytes(bytes(data))
    _assert_only_redrive_errors(_every_entry_point(path))
    code, out = _verdict(capsys, path)
    assert code in (cli.EXIT_OK, cli.EXIT_FAILED), out
    last = out.splitlines()[-1]
    assert last.startswith(("ok", "CORRUPT")), out
