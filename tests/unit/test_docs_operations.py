"""Every code block of docs/operations.md runs, in order, on DuckDB and on Postgres."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_page_has_blocks() -> None:
    """The page is read (a moved page or a changed fence would skip every block silently)."""
    assert len(BLOCKS) == 5


def test_the_blocks_run_on_both_journals(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first block makes the two journals (a DuckDB file, a fresh Postgres schema, which
    is dropped after); each later block runs after it, in its namespace."""
    import psycopg
    from psycopg import sql

    monkeypatch.setenv("REDRIVE_PG_URL", pg_url)
    namespace: dict[str, object] = {"__name__": "docs_operations"}
    exec(compile(BLOCKS[0], str(PAGE), "exec"), namespace)
    journals = namespace["journals"]
    assert isinstance(journals, list) and len(journals) == 2
    try:
        for block in BLOCKS[1:]:
            exec(compile(block, str(PAGE), "exec"), dict(namespace))
    finally:
        schema = str(journals[1]).rpartition("?schema=")[2]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
