"""``redrive sql``: read-only DuckDB SQL over a copy of a journal's runs and frames."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..errors import JournalCorruptError
from ..frames import Frame, decode
from ..replay import StepReader
from ..storage import Journal, parse_journal_url
from ._common import EXIT_OK, EXIT_USAGE, CliError, Subparsers, one_line
from ._journals import open_url, opened
from ._output import Out, plain

__all__ = ["register"]

_RUNS = (
    "CREATE TABLE runs (run_id VARCHAR, status VARCHAR, next_seq BIGINT, last_chain "
    "VARCHAR, input_fp VARCHAR, entrypoint VARCHAR, created_at DOUBLE, updated_at DOUBLE,"
    " output BLOB, error VARCHAR, lease_owner VARCHAR, lease_epoch BIGINT, "
    "lease_expires DOUBLE)"
)
_FRAMES = (
    "CREATE TABLE frames (run_id VARCHAR, seq BIGINT, kind VARCHAR, name VARCHAR, "
    "key VARCHAR, payload BLOB, chain VARCHAR, written_at DOUBLE, epoch BIGINT, "
    "data JSON)"
)


def _payload_json(payload: bytes | None) -> str | None:
    if payload is None:
        return None
    try:
        return json.dumps(plain(decode(bytes(payload))), sort_keys=True)
    except ValueError:  # pragma: no cover - frames were checked when written
        return None


def _frames_json(frames: list[Frame]) -> list[tuple[Frame, str | None]]:
    """Return each frame of one run (in seq order) with its payload as JSON text.

    Model requests stored as prefix deltas are resolved to the full request
    (as :class:`redrive.replay.StepReader` reads them). If the run cannot be
    read as steps (a damaged journal), each payload is decoded on its own instead.
    """
    reader = StepReader(verify=False)
    try:
        out: list[tuple[Frame, str | None]] = []
        for frame in frames:
            step = reader.feed(frame)
            data = step.data if step is not None else frame.data()
            out.append((frame, json.dumps(plain(data), sort_keys=True)))
        return out
    except (JournalCorruptError, ValueError):
        return [(frame, _payload_json(frame.payload)) for frame in frames]


def _check_read_only(con: Any, query: str) -> None:
    """Refuse a query that is empty, does not parse, or holds a statement that is not a SELECT.

    Raises:
        CliError: ``QueryError`` (no statement, or DuckDB cannot parse it) or
            ``ReadOnlyError`` (a statement that would change data), exit 2.
    """
    import duckdb

    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise CliError("QueryError", f"query failed: {one_line(str(exc))}", EXIT_USAGE) from None
    if not statements:
        raise CliError("QueryError", "no SQL statement given", EXIT_USAGE)
    for number, statement in enumerate(statements, 1):
        if statement.type != duckdb.StatementType.SELECT:
            kind = statement.type.name.replace("_STATEMENT", "")
            raise CliError(
                "ReadOnlyError",
                f"statement {number} is {kind}: sql runs read-only queries only (SELECT, "
                "WITH, FROM, DESCRIBE, SHOW, SUMMARIZE); its tables are a copy of the "
                "journal, so changes would be lost. Change runs through the library instead",
                EXIT_USAGE,
            )


def _load(con: Any, journal: Journal, out: Out) -> None:
    """Copy every run row and frame of ``journal`` into the tables ``runs`` and ``frames``."""
    con.execute(_RUNS)
    con.execute(_FRAMES)
    records = journal.runs()
    with out.progress("loading frames", len(records)) as update:
        for done, r in enumerate(records, 1):
            con.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    r.run_id,
                    r.status,
                    r.next_seq,
                    r.last_chain,
                    r.input_fp,
                    r.entrypoint,
                    r.created_at,
                    r.updated_at,
                    r.output,
                    r.error,
                    r.lease_owner,
                    r.lease_epoch,
                    r.lease_expires,
                ],
            )
            rows = [
                [f.run_id, f.seq, f.kind, f.name, f.key, f.payload, f.chain, f.at, f.epoch, data]
                for f, data in _frames_json(list(journal.frames(r.run_id)))
            ]
            if rows:
                con.executemany("INSERT INTO frames VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            update(done, len(records))


def _sql(args: argparse.Namespace, out: Out) -> int:
    import duckdb

    con = duckdb.connect(":memory:")
    _check_read_only(con, args.query)
    parsed = parse_journal_url(args.journal)
    if parsed.scheme == "duckdb":  # opened read-only: sql never writes
        if parsed.path is None or not os.path.exists(parsed.path):
            raise FileNotFoundError(f"no journal at {parsed.path}")
        journal = open_url(args.journal, read_only=True)
    else:
        journal = opened(args.journal)
    _load(con, journal, out)
    journal.close()
    try:
        cursor = con.execute(args.query)
    except duckdb.Error as exc:
        raise CliError("QueryError", f"query failed: {one_line(str(exc))}", EXIT_USAGE) from None
    columns = [d[0] for d in cursor.description or []]
    result: list[Any] = cursor.fetchall() if columns else []
    if out.json:
        out.emit(
            {"columns": columns, "rows": [dict(zip(columns, row, strict=True)) for row in result]}
        )
    else:
        out.table("query", columns, result)
    return EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``sql`` command to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "sql",
        parents=[common],
        help="read-only DuckDB SQL (SELECT, WITH, DESCRIBE...) over a copy of the journal: "
        "tables runs and frames (frames.data is the payload as JSON)",
    )
    p.add_argument("query")
    p.set_defaults(func=_sql)
