"""Every code block of docs/operations.md runs on its own, on DuckDB and on Postgres."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_page_has_blocks() -> None:
    """The page is read (a moved page or a changed fence would skip every block silently)."""
    assert len(BLOCKS) == 4


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_block_runs_on_both_journals(
    block: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block runs in a fresh namespace with REDRIVE_PG_URL set: a block with journals uses
    a DuckDB file and a fresh Postgres schema (dropped after)."""
    import psycopg
    from psycopg import sql

    monkeypatch.setenv("REDRIVE_PG_URL", pg_url)
    namespace: dict[str, object] = {"__name__": "docs_operations"}
    try:
        exec(compile(block, str(PAGE), "exec"), namespace)
    finally:
        journals = namespace.get("journals")
        if isinstance(journals, list) and len(journals) == 2:
            schema = str(journals[1]).rpartition("?schema=")[2]
            with psycopg.connect(pg_url, autocommit=True) as conn:
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
                conn.execute(drop.format(sql.Identifier(schema)))
    if "journals" in block:
        assert namespace["journals"] and len(namespace["journals"]) == 2  # type: ignore[arg-type]
