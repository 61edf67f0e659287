"""parse_journal_url: the one parser of journal URLs, used by open_journal and shared_journal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from redrive.storage import JournalURL, parse_journal_url, shared_journal


@pytest.mark.parametrize(
    ("url", "scheme", "path"),
    [
        (":memory:", "memory", None),
        ("postgresql://u@h/db", "postgres", None),
        ("postgres://u@h/db", "postgres", None),
        ("incident.rdj", "rdj", "incident.rdj"),
        ("duckdb:///tmp/runs.duckdb", "duckdb", "/tmp/runs.duckdb"),
        ("runs.duckdb", "duckdb", "runs.duckdb"),
        ("data/any-name", "duckdb", "data/any-name"),
    ],
)
def test_each_scheme(url: str, scheme: str, path: str | None) -> None:
    """Each URL form gives its scheme and, for files, its path."""
    parsed = parse_journal_url(url)
    assert parsed == JournalURL(url=url, scheme=scheme, path=path)  # type: ignore[arg-type]
    assert parsed.is_file is (path is not None)


def test_key_is_the_real_path_of_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two spellings of one file share a key (and so one shared journal); URLs are their own."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link").symlink_to(tmp_path)
    spellings = ["j.duckdb", f"duckdb://{tmp_path}/j.duckdb", "link/j.duckdb"]
    keys = {parse_journal_url(url).key for url in spellings}
    assert keys == {os.path.realpath(tmp_path / "j.duckdb")}
    assert parse_journal_url("postgres://h/db").key == "postgres://h/db"
    first, second = (shared_journal(url) for url in spellings[:2])
    assert first is second
    first.close()
