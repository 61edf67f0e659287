"""A Postgres schema per test module of the queue tests (their workers outlive one test)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def queue_schema(pg_url: str) -> Iterator[str]:
    """A fresh schema for one module's journal (and procrastinate's tables); dropped after."""
    import psycopg
    from psycopg import sql

    name = f"q_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
