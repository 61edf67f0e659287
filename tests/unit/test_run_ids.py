"""Run ids: one rule (non-empty, no NUL, valid Unicode, at most 1,024 UTF-8 bytes) on every backend.

Issue 12 #13: NUL was accepted by DuckDB and refused by Postgres with a raw
``DataError``; an 8,000-character id gave a raw ``ProgramLimitExceeded``; a lone
surrogate a raw ``InvalidInputException`` / ``UnicodeEncodeError``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive._runid import MAX_RUN_ID_BYTES, check_run_id
from redrive.storage import Journal, MemoryJournal
from redrive.storage.rdj import export_run, import_run

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("duckdb", id="duckdb"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]

BAD_IDS = [
    pytest.param("a\x00b", "NUL", id="nul"),
    pytest.param("x" * 8000, "over the limit", id="8000-chars"),
    pytest.param("é" * (MAX_RUN_ID_BYTES // 2 + 1), "over the limit", id="multibyte-too-long"),
    pytest.param("\U0001f600" * 257, "1028 bytes", id="emoji-257-chars-1028-bytes"),
    pytest.param("a\ud800b", "lone surrogate", id="lone-surrogate"),
    pytest.param("", "non-empty", id="empty"),
]


@pytest.fixture(params=BACKENDS)
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """A fresh journal of each backend."""
    if request.param == "memory":
        j: Journal = MemoryJournal()
    elif request.param == "duckdb":
        j = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    else:
        from redrive.storage.postgres import PostgresJournal

        url = request.getfixturevalue("pg_url")
        j = PostgresJournal(url, schema=request.getfixturevalue("pg_schema"), max_size=2)
    yield j
    j.close()


@pytest.mark.parametrize(("run_id", "says"), BAD_IDS)
def test_bad_run_id_is_a_clear_value_error_at_run(journal: Journal, run_id: str, says: str) -> None:
    """redrive.run() refuses a bad id with a ValueError naming the rule, before any write."""
    with pytest.raises(ValueError, match=says):
        redrive.run(journal, run_id)
    assert journal.runs() == []


def test_bad_run_id_is_refused_at_import(journal: Journal, tmp_path: Path) -> None:
    """Copying a run under a bad id (import, fork) raises ValueError and writes nothing."""
    from redrive.storage import copy_run

    source = MemoryJournal()
    with redrive.run(source, "good") as run:
        run.finish("ok")
    path = tmp_path / "good.rdj"
    export_run(source, "good", str(path))
    for bad in ("a\x00b", "y" * 5000, "z\udfff"):
        with pytest.raises(ValueError, match="the copy's run id"):
            copy_run(source, "good", journal, new_id=bad)
    assert journal.runs() == []
    assert import_run(str(path), journal).run_id == "good"


_ids = itertools.count()


@given(text=st.text(st.characters(codec=None), min_size=0, max_size=40))
def test_every_backend_accepts_and_refuses_the_same_ids(text: str) -> None:
    """A random id is accepted by redrive.run on memory and DuckDB alike (and round-trips), or
    refused with the same ValueError by both and by check_run_id."""
    run_id = f"{next(_ids)}:{text}"
    try:
        check_run_id(run_id)
        expected: str | None = None
    except ValueError as exc:
        expected = str(exc)
    from redrive.storage.duckdb import DuckDBJournal

    for journal in (MemoryJournal(), DuckDBJournal(":memory:")):
        try:
            if expected is not None:
                with pytest.raises(ValueError) as info:
                    redrive.run(journal, run_id)
                assert str(info.value) == expected
                continue
            with redrive.run(journal, run_id) as run:
                run.finish(text if "\x00" not in text else None)
            (record,) = journal.runs()
            assert record.run_id == run_id
        finally:
            journal.close()


def test_long_ids_up_to_the_limit_work_on_every_backend(journal: Journal) -> None:
    """An id of exactly MAX_RUN_ID_BYTES UTF-8 bytes (multi-byte too) records and reads."""
    # temporalio/temporal#5454 and #2695: a limit counted in characters by the check and in
    # bytes by the database let ids through that the database refused; here both are bytes
    for run_id in (
        "a" * MAX_RUN_ID_BYTES,
        "é" * (MAX_RUN_ID_BYTES // 2),
        "\U0001f600" * (MAX_RUN_ID_BYTES // 4),
        "[/]\n\t" * 10,
    ):
        with redrive.run(journal, run_id) as run:
            run.finish(len(run_id))
        record = journal.get_run(run_id)
        assert record is not None and record.status == "succeeded"


def test_cli_import_of_a_file_with_a_bad_run_id_is_refused(tmp_path: Path) -> None:
    """An .rdj file whose run id holds NUL (written by an older redrive) is refused at import
    as a damaged file (the reader's validator: verify says CORRUPT too), naming the NUL, and
    nothing is written."""
    import contextlib
    import io

    import attrs

    from redrive import cli
    from tests.hostile import write_rdj

    source = MemoryJournal()
    with redrive.run(source, "good") as run:
        run.finish(1)
    record = source.get_run("good")
    assert record is not None
    frames = [attrs.evolve(f, run_id="bad\x00id") for f in source.frames("good")]
    path = write_rdj(tmp_path / "bad.rdj", attrs.evolve(record, run_id="bad\x00id"), frames)
    url = str(tmp_path / "runs.duckdb")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["--journal", url, "import", str(path)])
        assert cli.main(["verify", path]) == cli.EXIT_FAILED
    assert code == cli.EXIT_JOURNAL, err.getvalue()
    assert "JournalCorruptError" in err.getvalue() and "NUL" in err.getvalue()
    journal = redrive.open_journal(url)
    assert journal.runs() == []
    journal.close()
