"""The tables of the SQL journals: their columns, DDL and numbered migrations, and rows as records.

Shared by :mod:`._sql` (which re-exports these names) and its backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..frames import Frame
from ._base import RunRecord

RUN_COLUMNS = (
    "run_id",
    "status",
    "next_seq",
    "last_chain",
    "input_fp",
    "entrypoint",
    "created_at",
    "updated_at",
    "output",
    "error",
    "lease_owner",
    "lease_epoch",
    "lease_expires",
)
FRAME_COLUMNS = ("run_id", "seq", "kind", "name", "key", "payload", "chain", "written_at", "epoch")
#: Frame attribute of each column.
FRAME_ATTRS = ("run_id", "seq", "kind", "name", "key", "payload", "chain", "at", "epoch")
PAGE = 1000


class Cursor(Protocol):
    """The DB-API subset the base uses."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> Any: ...


#: The newest schema version this redrive knows (the numbered migrations below).
SCHEMA_VERSION = 2


def _schema_of(meta: dict[str, str]) -> int:
    """Return the schema version recorded in ``meta`` (0: empty, 1: before versioning)."""
    if "schema" in meta:
        try:
            return int(meta["schema"])
        except ValueError:
            return SCHEMA_VERSION + 1  # unreadable: refuse it as "too new"
    return 1 if "format" in meta else 0


def migrations(blob: str, double: str) -> dict[int, list[str]]:
    """Return the DDL of each schema version, by version number, for a dialect.

    Version ``n`` holds the statements that take a journal from ``n - 1`` to
    ``n``. Statements are idempotent (``IF NOT EXISTS``), so version 1 also
    adopts a journal written before schemas were numbered.
    """
    return {
        1: schema(blob, double),
        2: [
            "CREATE INDEX IF NOT EXISTS redrive_runs_status "
            "ON redrive_runs (status, lease_expires)",
        ],
    }


def schema(blob: str, double: str) -> list[str]:
    """Return the DDL of schema version 1 for a dialect's blob and double types."""
    return [
        "CREATE TABLE IF NOT EXISTS redrive_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)",
        f"""CREATE TABLE IF NOT EXISTS redrive_runs (
            run_id VARCHAR PRIMARY KEY,
            status VARCHAR NOT NULL,
            next_seq BIGINT NOT NULL,
            last_chain VARCHAR NOT NULL,
            input_fp VARCHAR NOT NULL,
            entrypoint VARCHAR,
            created_at {double} NOT NULL,
            updated_at {double} NOT NULL,
            output {blob},
            error VARCHAR,
            lease_owner VARCHAR,
            lease_epoch BIGINT NOT NULL DEFAULT 0,
            lease_expires {double}
        )""",
        f"""CREATE TABLE IF NOT EXISTS redrive_frames (
            run_id VARCHAR NOT NULL,
            seq BIGINT NOT NULL,
            kind VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            key VARCHAR NOT NULL,
            payload {blob} NOT NULL,
            chain VARCHAR NOT NULL,
            written_at {double} NOT NULL,
            epoch BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (run_id, seq)
        )""",
        f"""CREATE TABLE IF NOT EXISTS redrive_decisions (
            run_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            approved BOOLEAN NOT NULL,
            decided_by VARCHAR NOT NULL,
            decided_at {double} NOT NULL,
            note VARCHAR NOT NULL,
            PRIMARY KEY (run_id, name)
        )""",
    ]


def _record(row: Sequence[Any]) -> RunRecord:
    values = dict(zip(RUN_COLUMNS, row, strict=True))
    if values["output"] is not None:
        values["output"] = bytes(values["output"])
    return RunRecord(**values)


def _frame(row: Sequence[Any]) -> Frame:
    # one per frame read: unpacked in FRAME_ATTRS' order (a row of another length is a
    # ValueError, as zip(strict=True) gave), without building a dict of keywords
    run_id, seq, kind, name, key, payload, chain, at, epoch = row
    return Frame(
        run_id=run_id,
        seq=seq,
        kind=kind,
        name=name,
        key=key,
        payload=bytes(payload),
        chain=chain,
        at=at,
        epoch=epoch,
    )
