"""The ``redrive`` command line: thin over the library.

Output is a rich table in a terminal, tab-separated text when piped, and one
JSON document with ``--json`` (every command). Progress bars go to stderr, in
a terminal only.

Exit codes:

    0  success (a check passed, a verify found the chain intact, a diff found no difference)
    1  a negative result: a check failed, verify found corruption, diff found a divergence,
       or a replay error
    2  usage error or bad input: bad arguments, a malformed cassette (not YAML, or not the
       shape of a VCR cassette; ``CassetteError``), a cassette run id that already exists,
       a SQL query DuckDB rejects (``QueryError``) or one that is not read-only
       (``ReadOnlyError``)
    3  not found: no such run, file or journal
    4  the journal cannot be read: corrupt or not a journal at all (e.g. a file that is not a
       DuckDB database), of a newer format, locked by another process, or its database
       cannot be connected to

Errors are one line on stderr, ``redrive COMMAND: ErrorName: message``; with
``--json`` they are one JSON document ``{"error": ErrorName, "message": ...}``
on stdout instead.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .errors import (
    JournalCorruptError,
    JournalFormatError,
    JournalLockedError,
    ReplayError,
    UnknownRunError,
)
from .frames import Frame, Kind, decode

__all__ = [
    "EXIT_FAILED",
    "EXIT_JOURNAL",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "main",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_JOURNAL = 4

_STEP_KINDS = {
    Kind.MODEL_REQUEST.value: "model",
    Kind.TOOL_START.value: "tool",
    Kind.VALUE.value: "value",
}
_END_KINDS = (Kind.MODEL_RESPONSE.value, Kind.TOOL_DONE.value, Kind.TOOL_ERROR.value)


# -- output -----------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Turn decoded payload values into JSON-able data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, _dt.datetime | _dt.date | _dt.time | uuid.UUID):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


class _Out:
    """Where a command writes: rich in a terminal, plain when piped, JSON on request."""

    def __init__(self, as_json: bool) -> None:
        self.json = as_json
        self.tty = sys.stdout.isatty()

    def emit(self, data: Any) -> None:
        print(json.dumps(_plain(data), indent=2, sort_keys=True))

    def line(self, text: str, style: str = "") -> None:
        if self.tty:
            from rich.console import Console

            Console(highlight=False).print(text, style=style or None, markup=False)
        else:
            print(text)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if self.tty:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=title)
            for column in columns:
                table.add_column(column)
            for row in rows:
                table.add_row(*("" if v is None else str(v) for v in row))
            Console().print(table)
            return
        print("\t".join(columns))
        for row in rows:
            print("\t".join("" if v is None else str(v).replace("\t", " ") for v in row))

    @contextmanager
    def progress(self, what: str, total: int | None) -> Iterator[Callable[[int, int], None]]:
        """Yield ``update(done, total)``; draws a bar on a terminal's stderr only."""
        if self.json or not sys.stderr.isatty():
            yield lambda done, total: None
            return
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(what, total=total)

            def update(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            yield update


# -- sources ----------------------------------------------------------------------


def _journal_path(url: str) -> str | None:
    if url == ":memory:" or url.startswith(("postgresql://", "postgres://")):
        return None
    return url.removeprefix("duckdb://")


#: Journals opened by the running command, by URL (one object per file: a DuckDB file
#: cannot be opened for writing twice in one process); closed when the command ends.
_opened: dict[str, Any] = {}


class _CliError(Exception):
    """An error reported as ``name: message`` (one line) with its own exit code."""

    def __init__(self, name: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.name = name
        self.exit_code = exit_code


def _one_line(text: str) -> str:
    """A database or parser message on one line, without its source-position drawing."""
    lines = [line.strip() for line in str(text).splitlines()]
    kept = [
        line for line in lines if line and not line.startswith("LINE ") and set(line) - set("^ ")
    ]
    return " ".join(kept)


def _is_database_error(exc: BaseException) -> bool:
    """True for an error raised by the DuckDB or psycopg driver (imports neither)."""
    module = type(exc).__module__ or ""
    return module.split(".")[0] in ("duckdb", "_duckdb", "psycopg")


def _unreadable(url: str, exc: BaseException) -> JournalCorruptError:
    return JournalCorruptError(
        f"cannot open journal {url}: {_one_line(str(exc))}; check that --journal names a "
        "redrive journal (a DuckDB file, postgresql://... or an .rdj file)",
        source=url,
        reason="unreadable",
    )


def _open_journal(url: str, **options: Any) -> Any:
    """``open_journal(url)``; a database that cannot be opened raises JournalCorruptError."""
    from .storage import open_journal

    try:
        return open_journal(url, **options)
    except Exception as exc:
        if _is_database_error(exc):
            raise _unreadable(url, exc) from None
        raise


def _open(url: str, *, must_exist: bool = True) -> Any:
    path = _journal_path(url)
    if must_exist and path is not None and not os.path.exists(path):
        raise FileNotFoundError(
            f"no journal at {path}; pass --journal URL (or set REDRIVE_JOURNAL)"
        )
    journal = _opened.get(url)
    if journal is None or getattr(journal, "closed", False):
        journal = _opened[url] = _open_journal(url)
    return journal


def _close_opened() -> None:
    while _opened:
        _url, journal = _opened.popitem()
        if not getattr(journal, "closed", False):
            journal.close()


def _source(target: str, url: str) -> tuple[Any, str]:
    """Resolve ``target`` (an ``.rdj`` file or a run id in the journal) to ``(journal, run_id)``."""
    if target.endswith(".rdj") and os.path.exists(target):
        from .storage.rdj import RdjJournal

        rj = RdjJournal(target)
        return rj, rj.run_id
    journal = _open(url)
    if journal.get_run(target) is None:
        raise UnknownRunError(
            f"no run {target!r} in journal {url} (and no file {target!r}); list runs with "
            "`redrive runs`",
            run_id=target,
        )
    return journal, target


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _row(record: Any) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "status": record.status,
        "frames": record.next_seq,
        "entrypoint": record.entrypoint,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "error": record.error,
        "lease_owner": record.lease_owner,
        "lease_expires": record.lease_expires,
    }


# -- steps (shared by show and diff) ------------------------------------------------------


def _usage(payload: dict[str, Any]) -> dict[str, int] | None:
    for holder in (payload.get("view"), payload.get("response")):
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if isinstance(usage, dict):
            pick = {
                "input": usage.get("input_tokens", usage.get("prompt_tokens")),
                "output": usage.get("output_tokens", usage.get("completion_tokens")),
            }
            if all(isinstance(v, int) for v in pick.values()):
                return pick  # type: ignore[return-value]
    return None


def _started_at(data: dict[str, Any], default: float) -> float:
    """When a step began: a model request's ``started_at`` (its frames are written at the end)."""
    started = data.get("started_at")
    return float(started) if isinstance(started, int | float) else default


def _steps(frames: Iterator[Frame]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Pair each step's opening frame with its outcome; return ``(steps, run info)``."""
    steps: list[dict[str, Any]] = []
    by_seq: dict[int, dict[str, Any]] = {}
    info: dict[str, Any] = {}
    from .replay._delta import Expander

    expander = Expander()
    for frame in frames:
        data = decode(frame.payload)
        if not isinstance(data, dict):
            data = {}
        if frame.kind == Kind.MODEL_REQUEST.value:
            data = expander.request(frame, data)
        if frame.kind in _STEP_KINDS:
            step = {
                "seq": frame.seq,
                "kind": _STEP_KINDS[frame.kind],
                "name": frame.name,
                "key": frame.key,
                "args": data.get("args"),
                "at": _started_at(data, frame.at),
                "status": "done" if frame.kind == Kind.VALUE.value else "in flight",
                "duration_ms": 0.0 if frame.kind == Kind.VALUE.value else None,
                "tokens": None,
                "error": None,
            }
            if frame.kind == Kind.VALUE.value:
                step["result"] = data.get("value")
            steps.append(step)
            by_seq[frame.seq] = step
        elif frame.kind in _END_KINDS:
            ref = data.get("step")
            end_of = by_seq.get(ref) if isinstance(ref, int) else None
            if end_of is None:
                continue
            step = end_of
            step["duration_ms"] = round((frame.at - step["at"]) * 1000, 3)
            if frame.kind == Kind.TOOL_ERROR.value:
                err = data.get("error") or {}
                step["status"] = "error"
                step["error"] = f"{err.get('type')}: {err.get('message')}"
            else:
                step["status"] = "done"
                step["result"] = data.get("result", data.get("response"))
            if frame.kind == Kind.MODEL_RESPONSE.value:
                step["tokens"] = _usage(data)
        elif frame.kind == Kind.RUN_START.value:
            info["input"] = data.get("input")
            info["entrypoint"] = data.get("entrypoint")
            info["flags"] = data.get("flags")
            info["started_at"] = frame.at
        elif frame.kind == Kind.RUN_END.value:
            info["end"] = {k: data.get(k) for k in ("status", "output", "error")}
            info["ended_at"] = frame.at
    return steps, info


# -- commands ---------------------------------------------------------------------


def _cmd_runs(args: argparse.Namespace, out: _Out) -> int:
    journal = _open(args.journal)
    if args.stale is not None:
        rows = journal.stale_runs(older_than=args.stale)
    else:
        rows = journal.runs(status=args.status)
    if args.entrypoint:
        rows = [r for r in rows if r.entrypoint and args.entrypoint in r.entrypoint]
    if args.limit is not None:
        rows = rows[: args.limit]
    now = time.time()
    data = []
    with out.progress("counting steps", len(rows)) as update:
        for done, record in enumerate(rows, 1):
            item = _row(record)
            item["steps"] = sum(1 for f in journal.frames(record.run_id) if f.kind in _STEP_KINDS)
            item["age_s"] = round(now - record.updated_at, 3)
            data.append(item)
            update(done, len(rows))
    if out.json:
        out.emit({"journal": args.journal, "runs": data})
        return EXIT_OK
    out.table(
        f"runs in {args.journal}",
        ["run_id", "status", "steps", "frames", "age", "entrypoint"],
        [
            [d["run_id"], d["status"], d["steps"], d["frames"], _age(d["age_s"]), d["entrypoint"]]
            for d in data
        ],
    )
    return EXIT_OK


def _cmd_show(args: argparse.Namespace, out: _Out) -> int:
    journal, run_id = _source(args.run, args.journal)
    record = journal.get_run(run_id)
    steps, info = _steps(journal.frames(run_id))
    for step in steps:
        step.pop("at", None)
    if out.json:
        out.emit({"run": _row(record), "info": info, "steps": steps})
        return EXIT_OK
    from .replay._diff import short

    total = {"input": 0, "output": 0}
    for step in steps:
        if step["tokens"]:
            total["input"] += step["tokens"]["input"]
            total["output"] += step["tokens"]["output"]
    out.line(
        f"run {run_id}  status {record.status}  frames {record.next_seq}  "
        f"entrypoint {record.entrypoint or '-'}  tokens in/out {total['input']}/{total['output']}",
        style="bold",
    )
    if info.get("input") is not None:
        out.line(f"input: {short(info['input'])}")
    rows = []
    for step in steps:
        tokens = step["tokens"]
        rows.append(
            [
                step["seq"],
                step["kind"],
                step["name"],
                step["status"],
                "" if step["duration_ms"] is None else f"{step['duration_ms']:.1f}",
                f"{tokens['input']}/{tokens['output']}" if tokens else "",
                step["error"] or short(step["args"]),
            ]
        )
    out.table(
        f"timeline of {run_id}",
        ["seq", "step", "name", "status", "ms", "tokens", "arguments / error"],
        rows,
    )
    end = info.get("end")
    if end:
        out.line(
            f"ended {end['status']}"
            + (f": {end['error']}" if end.get("error") else f", output {short(end['output'])}")
        )
    else:
        out.line("no run_end: the run is unfinished (it may be resumed)")
    return EXIT_OK


def _cmd_export(args: argparse.Namespace, out: _Out) -> int:
    from .storage.rdj import export_run

    journal = _open(args.journal)
    record = journal.get_run(args.run)
    total = record.next_seq if record is not None else 0
    with out.progress(f"exporting {args.run}", total) as update:
        record = export_run(journal, args.run, args.output, progress=update)
    data = {
        "run_id": record.run_id,
        "path": args.output,
        "frames": record.next_seq,
        "bytes": os.path.getsize(args.output),
        "status": record.status,
    }
    if out.json:
        out.emit(data)
    else:
        out.line(
            f"exported run {record.run_id} ({record.next_seq} frames, {data['bytes']} "
            f"bytes) to {args.output}"
        )
    return EXIT_OK


def _cmd_import(args: argparse.Namespace, out: _Out) -> int:
    from .storage.rdj import import_run, read_header

    if not os.path.exists(args.file):
        raise FileNotFoundError(f"no such file: {args.file}")
    total = read_header(args.file).frames
    journal = _open(args.journal, must_exist=False)
    with out.progress(f"importing {args.file}", total) as update:
        record = import_run(args.file, journal, progress=update)
    if out.json:
        out.emit({"journal": args.journal, "run": _row(record)})
    else:
        out.line(
            f"imported run {record.run_id} ({record.next_seq} frames, {record.status}) "
            f"into {args.journal}"
        )
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace, out: _Out) -> int:
    from .storage import verify_frames

    results: list[dict[str, Any]] = []
    targets = list(args.targets)
    if not targets:
        targets = [r.run_id for r in _open(args.journal).runs()]
    for target in targets:
        item: dict[str, Any] = {"target": target}
        try:
            if target.endswith(".rdj") and os.path.exists(target):
                from .storage.rdj import RdjJournal

                rj = RdjJournal(target, verify=False)
                item["run_id"] = rj.run_id
                with out.progress(f"verifying {target}", rj.header.frames) as update:
                    item["frames"] = rj.verify(update)
            else:
                journal, run_id = _source(target, args.journal)
                record = journal.get_run(run_id)
                item["run_id"] = run_id
                count = verify_frames(journal.frames(run_id), source=journal.url)
                if count != record.next_seq:
                    raise JournalCorruptError(
                        f"{journal.url}: run {run_id!r} has {count} frames where its row says "
                        f"{record.next_seq}; last good seq {count - 1 if count else None}",
                        run_id=run_id,
                        last_good_seq=count - 1 if count else None,
                        source=journal.url,
                        reason="count",
                    )
                item["frames"] = count
            item["ok"] = True
        except JournalCorruptError as exc:
            item.update(
                ok=False,
                reason=exc.fields.get("reason"),
                message=str(exc),
                last_good_seq=exc.fields.get("last_good_seq"),
            )
        results.append(item)
    ok = all(r["ok"] for r in results)
    if out.json:
        out.emit({"ok": ok, "results": results})
    else:
        for r in results:
            if r["ok"]:
                out.line(f"ok       {r['target']}: {r['frames']} frames, chain intact", "green")
            else:
                out.line(f"CORRUPT  {r['target']}: {r['message']}", "red")
    return EXIT_OK if ok else EXIT_FAILED


def _cmd_diff(args: argparse.Namespace, out: _Out) -> int:
    from .replay import diff_values, format_diff

    sides = []
    for target in (args.a, args.b):
        journal, run_id = _source(target, args.journal)
        steps, info = _steps(journal.frames(run_id))
        sides.append((run_id, steps, info))
    (ra, sa, ia), (rb, sb, ib) = sides
    first: dict[str, Any] | None = None
    for index in range(max(len(sa), len(sb))):
        a = sa[index] if index < len(sa) else None
        b = sb[index] if index < len(sb) else None
        same = (
            a is not None
            and b is not None
            and (a["kind"], a["name"], a["key"]) == (b["kind"], b["name"], b["key"])
        )
        if not same:
            diff = diff_values(a["args"], b["args"]) if a and b and a["name"] == b["name"] else []
            first = {
                "index": index,
                "a": None if a is None else {k: a[k] for k in ("seq", "kind", "name")},
                "b": None if b is None else {k: b[k] for k in ("seq", "kind", "name")},
                "diff": [list(d) for d in diff],
            }
            break
    out_a = (ia.get("end") or {}).get("output")
    out_b = (ib.get("end") or {}).get("output")
    output_diff = [list(d) for d in diff_values(out_a, out_b, "$.output")]
    identical = first is None and not output_diff
    if out.json:
        out.emit(
            {
                "a": ra,
                "b": rb,
                "identical": identical,
                "first_divergent_step": first,
                "output_diff": output_diff,
            }
        )
        return EXIT_OK if identical else EXIT_FAILED
    if identical:
        out.line(f"{ra} and {rb}: the same {len(sa)} steps and the same output", "green")
        return EXIT_OK
    if first is not None:

        def label(side: dict[str, Any] | None) -> str:
            if side is None:
                return "(no step: the run ended)"
            return f"seq {side['seq']} {side['kind']} {side['name']}"

        out.line(f"first divergent step: #{first['index']}", "bold")
        out.line(f"  {ra}: {label(first['a'])}")
        out.line(f"  {rb}: {label(first['b'])}")
        if first["diff"]:
            out.line("  differences (a -> b):")
            out.line(format_diff([(d[0], d[1], d[2]) for d in first["diff"]]))
    else:
        out.line(f"the same {len(sa)} steps; the outputs differ:", "bold")
        out.line(format_diff([(d[0], d[1], d[2]) for d in output_diff]))
    return EXIT_FAILED


def _payload_json(payload: bytes | None) -> str | None:
    if payload is None:
        return None
    try:
        return json.dumps(_plain(decode(bytes(payload))), sort_keys=True)
    except ValueError:  # pragma: no cover - frames were checked when written
        return None


def _frames_json(frames: list[Frame]) -> list[tuple[Frame, str | None]]:
    """Return each frame of one run (in seq order) with its payload as JSON text.

    Model requests stored as prefix deltas are resolved to the full request.
    If the run's requests cannot be resolved (a damaged journal), each payload
    is decoded on its own instead.
    """
    from .replay._delta import expand_frames

    try:
        return [
            (frame, json.dumps(_plain(data), sort_keys=True))
            for frame, data in expand_frames(frames)
        ]
    except ValueError:
        return [(frame, _payload_json(frame.payload)) for frame in frames]


def _cmd_sql(args: argparse.Namespace, out: _Out) -> int:
    import duckdb

    con = duckdb.connect(":memory:")
    path = _journal_path(args.journal)
    try:
        statements = con.extract_statements(args.query)
    except duckdb.Error as exc:
        raise _CliError("QueryError", f"query failed: {_one_line(str(exc))}", EXIT_USAGE) from None
    if not statements:
        raise _CliError("QueryError", "no SQL statement given", EXIT_USAGE)
    for number, statement in enumerate(statements, 1):
        if statement.type != duckdb.StatementType.SELECT:
            kind = statement.type.name.replace("_STATEMENT", "")
            raise _CliError(
                "ReadOnlyError",
                f"statement {number} is {kind}: sql runs read-only queries only (SELECT, "
                "WITH, FROM, DESCRIBE, SHOW, SUMMARIZE); its tables are a copy of the "
                "journal, so changes would be lost. Change runs through the library instead",
                EXIT_USAGE,
            )
    if path is not None and not path.endswith(".rdj"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"no journal at {path}")
        journal = _open_journal(args.journal, read_only=True)
    else:
        journal = _open(args.journal)
    con.execute(
        "CREATE TABLE runs (run_id VARCHAR, status VARCHAR, next_seq BIGINT, last_chain "
        "VARCHAR, input_fp VARCHAR, entrypoint VARCHAR, created_at DOUBLE, updated_at DOUBLE,"
        " output BLOB, error VARCHAR, lease_owner VARCHAR, lease_epoch BIGINT, "
        "lease_expires DOUBLE)"
    )
    con.execute(
        "CREATE TABLE frames (run_id VARCHAR, seq BIGINT, kind VARCHAR, name VARCHAR, "
        "key VARCHAR, payload BLOB, chain VARCHAR, written_at DOUBLE, epoch BIGINT, "
        "data JSON)"
    )
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
    journal.close()
    try:
        cursor = con.execute(args.query)
    except duckdb.Error as exc:
        raise _CliError("QueryError", f"query failed: {_one_line(str(exc))}", EXIT_USAGE) from None
    columns = [d[0] for d in cursor.description or []]
    result: list[Any] = cursor.fetchall() if columns else []
    if out.json:
        out.emit(
            {"columns": columns, "rows": [dict(zip(columns, row, strict=True)) for row in result]}
        )
    else:
        out.table("query", columns, result)
    return EXIT_OK


def _cmd_import_cassette(args: argparse.Namespace, out: _Out) -> int:
    from .recorders.cassettes import import_cassette  # type: ignore[import-not-found,unused-ignore]

    if not os.path.exists(args.file):
        raise FileNotFoundError(f"no such file: {args.file}")
    from .recorders.cassettes import CassetteError

    journal = _open(args.journal, must_exist=False)
    try:
        made = import_cassette(args.file, journal, run_id=args.run_id)
    except CassetteError as exc:
        raise _CliError("CassetteError", _one_line(str(exc)), EXIT_USAGE) from None
    items = made if isinstance(made, list | tuple) else [made]
    run_ids = [getattr(m, "run_id", m) for m in items]
    if out.json:
        out.emit({"journal": args.journal, "runs": [str(r) for r in run_ids]})
    else:
        out.line(
            f"imported {args.file} into {args.journal} as run(s) "
            + ", ".join(str(r) for r in run_ids)
        )
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace, out: _Out) -> int:
    from .demo import main as demo_main  # type: ignore[attr-defined,unused-ignore]

    argv = list(args.rest)
    if getattr(args, "json", False):
        argv.append("--json")
    return int(demo_main(argv) or 0)


def _cmd_check(args: argparse.Namespace, out: _Out) -> int:
    from ._check import CheckReport, CheckResult, collect_sources, iter_checks, write_junit

    try:
        sources = collect_sources(args.paths)
    except ValueError as exc:
        raise _CliError("UsageError", str(exc), EXIT_USAGE) from None
    results: list[CheckResult] = []
    with out.progress("checking runs", len(sources)) as update:
        for result in iter_checks(
            sources,
            fail_fast=args.fail_fast,
            import_paths=[*(os.path.abspath(d) for d in args.import_path), os.getcwd()],
        ):
            results.append(result)
            update(len(results), len(sources))
    report = CheckReport(tuple(results))
    if args.junit_xml:
        write_junit(report, args.junit_xml)
    if out.json:
        out.emit(
            {
                "ok": report.ok,
                "summary": report.summary(),
                "results": [
                    {
                        "source": r.source,
                        "run_id": r.run_id,
                        "outcome": r.outcome,
                        "seq": r.seq,
                        "message": r.message,
                        "replayed_steps": r.replayed_steps,
                    }
                    for r in results
                ],
            }
        )
    else:
        for r in results:
            if r.passed:
                out.line(
                    f"PASS  {r.source} ({r.run_id}, {r.replayed_steps} steps replayed)", "green"
                )
            else:
                out.line(f"FAIL  {r.source} ({r.run_id}): {r.outcome}", "red")
                out.line("      " + r.message.replace("\n", "\n      "))
        out.line(
            report.summary()
            + (" (stopped at the first failure)" if args.fail_fast and report.failed else ""),
            "bold",
        )
    if not results:
        return EXIT_NOT_FOUND
    return EXIT_OK if report.ok else EXIT_FAILED


# -- parser -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="redrive",
        description="Inspect, move, verify and check redrive journals.",
        epilog="exit codes: 0 ok; 1 check/verify/diff negative or replay error; 2 usage; "
        "3 not found; 4 journal unreadable (corrupt, newer format, locked, cannot connect)",
    )
    parser.add_argument(
        "--journal",
        default=os.environ.get("REDRIVE_JOURNAL", "runs.duckdb"),
        help="journal URL: a DuckDB file (default runs.duckdb, or $REDRIVE_JOURNAL), "
        "postgresql://..., or an .rdj file (read-only)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("runs", parents=[common], help="list runs with status, steps and age")
    p.add_argument("--status", choices=["running", "suspended", "succeeded", "failed", "cancelled"])
    p.add_argument(
        "--stale",
        type=float,
        nargs="?",
        const=0.0,
        default=None,
        metavar="SECONDS",
        help="only running runs whose lease expired (at least SECONDS ago)",
    )
    p.add_argument("--entrypoint", help="only runs whose entrypoint contains this text")
    p.add_argument("--limit", type=int)
    p.set_defaults(func=_cmd_runs)

    p = sub.add_parser("show", parents=[common], help="a run's timeline of steps")
    p.add_argument("run", help="run id in --journal, or an .rdj file")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("export", parents=[common], help="write a run to an .rdj file")
    p.add_argument("run")
    p.add_argument("-o", "--output", required=True, metavar="FILE.rdj")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("import", parents=[common], help="copy an .rdj file's run into --journal")
    p.add_argument("file", metavar="FILE.rdj")
    p.set_defaults(func=_cmd_import)

    p = sub.add_parser("verify", parents=[common], help="check chain integrity")
    p.add_argument(
        "targets",
        nargs="*",
        metavar="FILE|RUN",
        help=".rdj files or run ids (default: every run in --journal)",
    )
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("diff", parents=[common], help="first divergent step of two runs")
    p.add_argument("a", metavar="A", help="run id or .rdj file")
    p.add_argument("b", metavar="B", help="run id or .rdj file")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser(
        "sql",
        parents=[common],
        help="read-only DuckDB SQL (SELECT, WITH, DESCRIBE...) over a copy of the journal: "
        "tables runs and frames (frames.data is the payload as JSON)",
    )
    p.add_argument("query")
    p.set_defaults(func=_cmd_sql)

    p = sub.add_parser(
        "import-cassette",
        parents=[common],
        help="import a vcrpy YAML/JSON cassette of model traffic as a run",
    )
    p.add_argument("file")
    p.add_argument("--run-id")
    p.set_defaults(func=_cmd_import_cassette)

    p = sub.add_parser("demo", parents=[common], help="the crash-resume demo", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "check",
        parents=[common],
        help="re-drive saved runs against the current code (strict, replay only)",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help=".rdj files or directories")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    p.add_argument("--junit-xml", metavar="FILE", help="write a JUnit XML report")
    p.add_argument(
        "-I",
        "--import-path",
        action="append",
        default=[],
        metavar="DIR",
        help="also import entrypoints from DIR (repeatable; the current directory "
        "is always searched)",
    )
    p.set_defaults(func=_cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``redrive`` command line; return the exit code (see the module docstring)."""
    parser = _parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "demo":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    if args.command == "demo":
        args.rest = [*extra, *args.rest]
    out = _Out(bool(args.json))
    code = EXIT_FAILED

    def fail(exc: BaseException, exit_code: int) -> int:
        name = exc.name if isinstance(exc, _CliError) else type(exc).__name__
        if out.json:
            fields = exc.to_fields() if isinstance(exc, ReplayError) else {}
            out.emit({"error": name, "message": str(exc), **fields})
        else:
            print(f"redrive {args.command}: {name}: {exc}", file=sys.stderr)
        return exit_code

    try:
        try:
            code = int(args.func(args, out))
        finally:
            _close_opened()
    except (UnknownRunError, FileNotFoundError) as exc:
        return fail(exc, EXIT_NOT_FOUND)
    except (JournalCorruptError, JournalFormatError, JournalLockedError) as exc:
        return fail(exc, EXIT_JOURNAL)
    except _CliError as exc:
        return fail(exc, exc.exit_code)
    except (ReplayError, PermissionError) as exc:
        return fail(exc, EXIT_FAILED)
    except BrokenPipeError:  # pragma: no cover - `redrive runs | head`
        return EXIT_OK
    except ConnectionError as exc:  # a journal database that cannot be reached
        return fail(exc, EXIT_JOURNAL)
    except Exception as exc:
        if _is_database_error(exc):  # the journal's database failed while being read
            return fail(_unreadable(args.journal, exc), EXIT_JOURNAL)
        raise
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
