"""``redrive sql``: read-only DuckDB SQL over a journal's runs and frames, in place.

A DuckDB journal is queried where it lies: its file is attached ``READ_ONLY``
to a fresh in-memory DuckDB, and the views ``runs`` and ``frames`` read its
tables plus the few records its ``.rdlog`` still holds (not yet checkpointed).
Nothing is copied, so ``select count(*) from frames`` reads no payload at all.
Other journals (Postgres, ``.rdj``) are streamed, a batch of rows at a time, into a
scratch DuckDB database on disk (:mod:`._sqlspool`): memory stays bounded whatever
their size, and a 100,002-frame ``.rdj`` loads in seconds, not minutes.

``frames.data`` is each payload as JSON (model requests stored as prefix
deltas resolved to the full request, as :class:`redrive.replay.StepReader`
reads them). Payloads are msgpack, which DuckDB cannot decode, so a query
that names ``data`` (or selects ``*``) has the payloads decoded first, run by
run, into an in-memory table of JSON text; any other query decodes nothing.

Before the query runs the connection is locked down: DuckDB's external access
is disabled (``enable_external_access = false``: no ``read_csv('/etc/...')``,
no ``ATTACH``, no HTTP), extensions are neither installed nor loaded
automatically, and the configuration is locked (``lock_configuration``), so a
query reads the journal and nothing else. See DuckDB's "Securing DuckDB" guide
(https://duckdb.org/docs/stable/operations_manual/securing_duckdb/overview).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import JournalCorruptError
from ..frames import Frame, decode
from ..replay import StepReader
from ..storage import Journal, RunRecord, parse_journal_url
from ._common import EXIT_OK, EXIT_USAGE, CliError, Subparsers, one_line
from ._journals import open_url, opened
from ._output import Out, plain
from ._sqlspool import TableSpool, scratch

__all__ = ["register"]

_RUN_COLUMNS = (
    "run_id VARCHAR, status VARCHAR, next_seq BIGINT, last_chain VARCHAR, input_fp VARCHAR, "
    "entrypoint VARCHAR, created_at DOUBLE, updated_at DOUBLE, output BLOB, error VARCHAR, "
    "lease_owner VARCHAR, lease_epoch BIGINT, lease_expires DOUBLE"
)
_RUN_NAMES = ", ".join(column.split()[0] for column in _RUN_COLUMNS.split(", "))
_FRAME_COLUMNS = (
    "run_id VARCHAR, seq BIGINT, kind VARCHAR, name VARCHAR, key VARCHAR, payload BLOB, "
    "chain VARCHAR, written_at DOUBLE, epoch BIGINT"
)
_FRAME_NAMES = ", ".join(column.split()[0] for column in _FRAME_COLUMNS.split(", "))
#: A query that may read ``frames.data``: it names ``data`` or selects ``*`` (``count(*)``
#: does not count). Erring towards yes only costs the decoding.
_READS_DATA = re.compile(r"\bdata\b|(?<!\()\s*\*", re.IGNORECASE)


def _run_values(r: RunRecord) -> list[Any]:
    return [
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
    ]


def _frame_values(f: Frame) -> list[Any]:
    return [f.run_id, f.seq, f.kind, f.name, f.key, f.payload, f.chain, f.at, f.epoch]


def _payload_json(payload: bytes | None) -> str | None:
    if payload is None:
        return None
    try:
        return json.dumps(plain(decode(bytes(payload))), sort_keys=True)
    except ValueError:  # pragma: no cover - frames were checked when written
        return None


def _frames_json(frames: Iterable[Frame]) -> Iterator[tuple[Frame, str | None]]:
    """Yield each frame of one run (in seq order) with its payload as JSON text, streamed.

    Model requests stored as prefix deltas are resolved to the full request
    (as :class:`redrive.replay.StepReader` reads them). From a frame the
    reader cannot read as a step on (a damaged journal), each payload is
    decoded on its own instead. Only the reader's state is held, never the run.
    """
    reader: StepReader | None = StepReader(verify=False)
    for frame in frames:
        if reader is not None:
            try:
                step = reader.feed(frame)
                data = step.data if step is not None else frame.data()
                yield frame, json.dumps(plain(data), sort_keys=True)
                continue
            except (JournalCorruptError, ValueError):
                reader = None
        yield frame, _payload_json(frame.payload)


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
                "WITH, FROM, DESCRIBE, SHOW, SUMMARIZE) over the journal opened read-only. "
                "Change runs through the library or the operator commands (cancel, decide, "
                "resolve, prune) instead",
                EXIT_USAGE,
            )


def _lock_down(con: Any) -> None:
    """Disable external access (files, network, ATTACH) and lock the configuration."""
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _types(columns: str) -> tuple[str, ...]:
    return tuple(column.split()[1] for column in columns.split(", "))


def _frame_data(frame: Frame, data: str | None) -> list[Any]:
    return [frame.run_id, frame.seq, data]


def _spool_data(con: Any, directory: str, journal: Journal, out: Out) -> None:
    """Fill the table ``frame_data`` with every frame's payload as JSON, run by run, streamed."""
    records = journal.runs()
    with (
        TableSpool(con, "frame_data", ("VARCHAR", "BIGINT", "JSON"), directory) as spool,
        out.progress("decoding payloads", len(records)) as update,
    ):
        for done, record in enumerate(records, 1):
            for frame, data in _frames_json(journal.frames(record.run_id)):
                spool.add(_frame_data(frame, data))
            update(done, len(records))


def _attach(
    con: Any, directory: str, path: str, journal: Any, *, with_data: bool, out: Out
) -> None:
    """Serve the DuckDB journal file at ``path`` in place: views over its tables and its log.

    With ``with_data``, ``frames.data`` is filled by decoding every payload
    (:func:`_frames_json`), else it is NULL (the query does not read it).
    """
    con.execute("ATTACH ? AS journal (READ_ONLY)", [path])
    pending_runs, pending_frames = journal.not_checkpointed()
    con.execute(f"CREATE TABLE pending_runs ({_RUN_COLUMNS})")
    con.execute(f"CREATE TABLE pending_frames ({_FRAME_COLUMNS})")
    with TableSpool(con, "pending_runs", _types(_RUN_COLUMNS), directory) as spool:
        for record in pending_runs:
            spool.add(_run_values(record))
    with TableSpool(con, "pending_frames", _types(_FRAME_COLUMNS), directory) as spool:
        for frame in pending_frames:
            spool.add(_frame_values(frame))
    con.execute(
        f"CREATE VIEW runs AS SELECT {_RUN_NAMES} FROM journal.redrive_runs "
        "WHERE run_id NOT IN (SELECT run_id FROM pending_runs) "
        f"UNION ALL SELECT {_RUN_NAMES} FROM pending_runs"
    )
    con.execute("CREATE TABLE frame_data (run_id VARCHAR, seq BIGINT, data JSON)")
    if with_data:
        _spool_data(con, directory, journal, out)
    names = ", ".join(f"f.{name}" for name in _FRAME_NAMES.split(", "))
    con.execute(
        f"CREATE VIEW frames AS SELECT {names}, d.data FROM ("
        f"SELECT {_FRAME_NAMES} FROM journal.redrive_frames AS t WHERE NOT EXISTS ("
        "SELECT 1 FROM pending_frames AS p WHERE p.run_id = t.run_id AND p.seq = t.seq) "
        f"UNION ALL SELECT {_FRAME_NAMES} FROM pending_frames) AS f "
        "LEFT JOIN frame_data AS d ON d.run_id = f.run_id AND d.seq = f.seq"
    )


def _load(con: Any, directory: str, journal: Journal, *, with_data: bool, out: Out) -> None:
    """Stream every run row and frame of ``journal`` into the tables ``runs`` and ``frames``.

    Rows go through :class:`TableSpool` a batch at a time into the scratch
    database, so memory stays bounded whatever the size of the journal; payloads
    are decoded into ``frames.data`` only ``with_data`` (the query reads it).
    """
    con.execute(f"CREATE TABLE runs ({_RUN_COLUMNS})")
    con.execute(f"CREATE TABLE frames ({_FRAME_COLUMNS}, data JSON)")
    records = journal.runs()
    with (
        TableSpool(con, "runs", _types(_RUN_COLUMNS), directory) as run_rows,
        TableSpool(con, "frames", (*_types(_FRAME_COLUMNS), "JSON"), directory) as frame_rows,
        out.progress("loading frames", len(records)) as update,
    ):
        for done, r in enumerate(records, 1):
            run_rows.add(_run_values(r))
            frames: Iterable[tuple[Frame, str | None]] = (
                _frames_json(journal.frames(r.run_id))
                if with_data
                else ((frame, None) for frame in journal.frames(r.run_id))
            )
            for frame, data in frames:
                frame_rows.add([*_frame_values(frame), data])
            update(done, len(records))


def _sql(args: argparse.Namespace, out: Out) -> int:
    import duckdb

    with scratch() as (con, directory):
        try:
            _check_read_only(con, args.query)
            with_data = bool(_READS_DATA.search(args.query))
            parsed = parse_journal_url(args.journal)
            if parsed.scheme == "duckdb" and parsed.path is not None:  # in place, read-only
                if not os.path.exists(parsed.path):
                    raise FileNotFoundError(f"no journal at {parsed.path}")
                journal = open_url(args.journal, read_only=True)
                try:
                    _attach(con, directory, parsed.path, journal, with_data=with_data, out=out)
                    _lock_down(con)
                    return _run_query(con, args, out)
                finally:
                    journal.close()
            journal = opened(args.journal)
            _load(con, directory, journal, with_data=with_data, out=out)
            _lock_down(con)
            return _run_query(con, args, out)
        except duckdb.Error as exc:
            raise CliError(
                "QueryError", f"query failed: {one_line(str(exc))}", EXIT_USAGE
            ) from None


def _run_query(con: Any, args: argparse.Namespace, out: Out) -> int:
    cursor = con.execute(args.query)
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
        help="read-only DuckDB SQL (SELECT, WITH, DESCRIBE...) over the journal, in place: "
        "views runs and frames (frames.data is the payload as JSON); no file or network access",
        description="Run one read-only SQL statement (SELECT, WITH, DESCRIBE...) in DuckDB over "
        "the journal as it is, through two views: runs (one row a run) and frames (one row a "
        "frame, data as JSON). Nothing is written; files and the network are out of reach.",
    )
    p.add_argument("query", metavar="QUERY", help="one read-only SQL statement")
    p.set_defaults(func=_sql)
