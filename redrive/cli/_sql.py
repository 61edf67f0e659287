"""``redrive sql``: read-only DuckDB SQL over a journal's runs and frames, in place.

A DuckDB journal is queried where it lies: its file is attached ``READ_ONLY``
to a fresh in-memory DuckDB, and the views ``runs`` and ``frames`` read its
tables plus the few records its ``.rdlog`` still holds (not yet checkpointed).
Nothing is copied, so ``select count(*) from frames`` reads no payload at all.
Other journals (Postgres, ``.rdj``) are copied into in-memory tables first.

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
from collections.abc import Iterable
from typing import Any

from ..errors import JournalCorruptError
from ..frames import Frame, decode
from ..replay import StepReader
from ..storage import Journal, RunRecord, parse_journal_url
from ._common import EXIT_OK, EXIT_USAGE, CliError, Subparsers, one_line
from ._journals import open_url, opened
from ._output import Out, plain

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


def _frames_json(frames: Iterable[Frame]) -> list[tuple[Frame, str | None]]:
    """Return each frame of one run (in seq order) with its payload as JSON text.

    Model requests stored as prefix deltas are resolved to the full request
    (as :class:`redrive.replay.StepReader` reads them). If the run cannot be
    read as steps (a damaged journal), each payload is decoded on its own instead.
    """
    frames = list(frames)
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
                "WITH, FROM, DESCRIBE, SHOW, SUMMARIZE) over the journal opened read-only. "
                "Change runs through the library or the operator commands (cancel, decide, "
                "resolve, prune) instead",
                EXIT_USAGE,
            )


def _connect() -> Any:
    """A fresh in-memory DuckDB that installs and loads no extension by itself."""
    import duckdb

    return duckdb.connect(
        ":memory:",
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False},
    )


def _lock_down(con: Any) -> None:
    """Disable external access (files, network, ATTACH) and lock the configuration."""
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _attach(con: Any, path: str, journal: Any, *, with_data: bool, out: Out) -> None:
    """Serve the DuckDB journal file at ``path`` in place: views over its tables and its log.

    With ``with_data``, ``frames.data`` is filled by decoding every payload
    (:func:`_frames_json`), else it is NULL (the query does not read it).
    """
    con.execute("ATTACH ? AS journal (READ_ONLY)", [path])
    pending_runs, pending_frames = journal.not_checkpointed()
    con.execute(f"CREATE TEMP TABLE pending_runs ({_RUN_COLUMNS})")
    con.execute(f"CREATE TEMP TABLE pending_frames ({_FRAME_COLUMNS})")
    if pending_runs:
        marks = ", ".join("?" * len(_RUN_NAMES.split(", ")))
        con.executemany(
            f"INSERT INTO pending_runs VALUES ({marks})", [_run_values(r) for r in pending_runs]
        )
    if pending_frames:
        marks = ", ".join("?" * len(_FRAME_NAMES.split(", ")))
        con.executemany(
            f"INSERT INTO pending_frames VALUES ({marks})",
            [_frame_values(f) for f in pending_frames],
        )
    con.execute(
        f"CREATE TEMP VIEW runs AS SELECT {_RUN_NAMES} FROM journal.redrive_runs "
        "WHERE run_id NOT IN (SELECT run_id FROM pending_runs) "
        f"UNION ALL SELECT {_RUN_NAMES} FROM pending_runs"
    )
    con.execute("CREATE TEMP TABLE frame_data (run_id VARCHAR, seq BIGINT, data JSON)")
    if with_data:
        records = journal.runs()
        with out.progress("decoding payloads", len(records)) as update:
            for done, record in enumerate(records, 1):
                rows = [
                    [frame.run_id, frame.seq, data]
                    for frame, data in _frames_json(journal.frames(record.run_id))
                ]
                if rows:
                    con.executemany("INSERT INTO frame_data VALUES (?, ?, ?)", rows)
                update(done, len(records))
    names = ", ".join(f"f.{name}" for name in _FRAME_NAMES.split(", "))
    con.execute(
        f"CREATE TEMP VIEW frames AS SELECT {names}, d.data FROM ("
        f"SELECT {_FRAME_NAMES} FROM journal.redrive_frames "
        f"UNION ALL SELECT {_FRAME_NAMES} FROM pending_frames) AS f "
        "LEFT JOIN frame_data AS d ON d.run_id = f.run_id AND d.seq = f.seq"
    )


def _load(con: Any, journal: Journal, out: Out) -> None:
    """Copy every run row and frame of ``journal`` into the tables ``runs`` and ``frames``."""
    con.execute(f"CREATE TEMP TABLE runs ({_RUN_COLUMNS})")
    con.execute(f"CREATE TEMP TABLE frames ({_FRAME_COLUMNS}, data JSON)")
    records = journal.runs()
    with out.progress("loading frames", len(records)) as update:
        for done, r in enumerate(records, 1):
            con.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", _run_values(r))
            rows = [[*_frame_values(f), data] for f, data in _frames_json(journal.frames(r.run_id))]
            if rows:
                con.executemany("INSERT INTO frames VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            update(done, len(records))


def _sql(args: argparse.Namespace, out: Out) -> int:
    import duckdb

    con = _connect()
    try:
        _check_read_only(con, args.query)
        parsed = parse_journal_url(args.journal)
        if parsed.scheme == "duckdb" and parsed.path is not None:  # in place, read-only
            if not os.path.exists(parsed.path):
                raise FileNotFoundError(f"no journal at {parsed.path}")
            journal = open_url(args.journal, read_only=True)
            try:
                with_data = bool(_READS_DATA.search(args.query))
                _attach(con, parsed.path, journal, with_data=with_data, out=out)
                _lock_down(con)
                return _run_query(con, args, out)
            finally:
                journal.close()
        journal = opened(args.journal)
        _load(con, journal, out)
        _lock_down(con)
        return _run_query(con, args, out)
    except duckdb.Error as exc:
        raise CliError("QueryError", f"query failed: {one_line(str(exc))}", EXIT_USAGE) from None
    finally:
        con.close()


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
    )
    p.add_argument("query")
    p.set_defaults(func=_sql)
