"""``redrive sql`` over ``.rdj`` and Postgres: streamed a batch at a time (issue 24 #7).

A 100,002-frame ``.rdj`` took 316 s (125 s CPU) where the same query on a
DuckDB journal took 1 s: every frame was decoded even for ``count(*)``, each
run was held in memory whole, and the rows went into DuckDB one
``executemany`` binding at a time. Now rows are spooled a batch at a time
(:class:`redrive.cli._sqlspool.TableSpool`) into a scratch database on disk,
payloads are decoded only when the query reads ``data``, and every source
answers a query exactly as the DuckDB journal it came from does.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive.cli import _sql, _sqlspool
from redrive.storage.duckdb import DuckDBJournal

#: Every column of both views, payload as JSON included; ordered so the rows compare.
QUERIES = (
    "SELECT run_id, seq, kind, name, key, payload, chain, written_at, epoch, data "
    "FROM frames ORDER BY run_id, seq",
    # not updated_at: an import into Postgres sets it to the time of the import (issue 25 #8)
    "SELECT run_id, status, next_seq, last_chain, input_fp, entrypoint, created_at, "
    "output, error FROM runs ORDER BY run_id",
    "SELECT count(*) AS n, count(data) AS d FROM frames",
    "SELECT kind, count(*) AS n FROM frames GROUP BY kind ORDER BY kind",
)


def _cli_json(*argv: str) -> tuple[int, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["--json", *argv])
    return code, json.loads(out.getvalue())


RUN = 'long, "run"\nid'


def _record(path: str, steps: int) -> None:
    """One run of ``steps`` model and tool steps, texts holding commas, quotes, newlines."""

    @redrive.tool
    def note(i: int, text: str) -> dict[str, Any]:
        return {"i": i, "text": text, "bytes": text.encode()}

    @redrive.model
    def chat(messages: list[dict[str, str]]) -> str:
        return f'reply, "{len(messages)}"\n\u00e9\u2028'

    journal = DuckDBJournal(path)
    with redrive.run(journal, RUN) as run:
        messages = [{"role": "system", "content": "be brief"}]
        for i in range(steps):
            messages.append({"role": "user", "content": f'q{i},"\n'})
            messages.append({"role": "assistant", "content": chat(messages)})
            note(i, f"line {i}\n, 'x' \"y\"")
        run.finish({"done": steps, "pi": math.pi})
    journal.close()


@contextlib.contextmanager
def _postgres_copy(pg_url: str, rdj: list[Path]) -> Iterator[str]:
    import psycopg

    from redrive.storage.postgres import PostgresJournal

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = urllib.parse.urlsplit(pg_url)._replace(path=f"/{name}").geturl()
    try:
        journal = PostgresJournal(url)
        try:
            for path in rdj:
                redrive.import_run(path, journal)
        finally:
            journal.close()
        yield url
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.postgres
def test_every_source_answers_as_the_duckdb_journal_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    """The same queries over a DuckDB journal, its run exported to ``.rdj`` and a
    Postgres copy give the same rows, with batches small enough that every load spools
    many times and no spool ever holds more than one batch."""
    path = str(tmp_path / "runs.duckdb")
    _record(path, steps=12)
    journal = DuckDBJournal(path)
    rdj = tmp_path / "run.rdj"
    redrive.export_run(journal, RUN, rdj)
    journal.close()

    held: list[int] = []
    flushes: list[int] = []
    real_add, real_flush = _sqlspool.TableSpool.add, _sqlspool.TableSpool.flush

    def add(self: _sqlspool.TableSpool, row: Any) -> None:
        real_add(self, row)
        held.append(len(self._rows))

    def flush(self: _sqlspool.TableSpool) -> None:
        if self._rows:
            flushes.append(len(self._rows))
        real_flush(self)

    monkeypatch.setattr(_sqlspool.TableSpool, "add", add)
    monkeypatch.setattr(_sqlspool.TableSpool, "flush", flush)
    monkeypatch.setattr(_sql, "TableSpool", _small_batches(5))

    expected = [_cli_json("--journal", path, "sql", q) for q in QUERIES]
    assert all(code == 0 for code, _ in expected)
    assert expected[2][1]["rows"] == [{"n": 50, "d": 50}]
    with _postgres_copy(pg_url, [rdj]) as url:
        for source in (str(rdj), url):
            for query, (_, want) in zip(QUERIES, expected, strict=True):
                code, got = _cli_json("--journal", source, "sql", query)
                assert (code, got) == (0, want), (source, query)
    assert max(held) <= 5 and len(flushes) > 25 and max(flushes) <= 5


def _small_batches(batch: int) -> Any:
    def spool(*args: Any, **kwargs: Any) -> _sqlspool.TableSpool:
        return _sqlspool.TableSpool(*args, **{**kwargs, "batch": batch})

    return spool


def test_a_count_over_an_rdj_decodes_no_payload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query that does not read ``frames.data`` decodes nothing, whatever the source
    (before, every payload of an ``.rdj`` was decoded to JSON for a ``count(*)``)."""
    path = str(tmp_path / "runs.duckdb")
    _record(path, steps=3)
    journal = DuckDBJournal(path)
    redrive.export_run(journal, RUN, tmp_path / "long.rdj")
    journal.close()

    def no_decoding(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a payload was decoded for a query that does not read data")

    monkeypatch.setattr(_sql, "_frames_json", no_decoding)
    code, data = _cli_json(
        "--journal", str(tmp_path / "long.rdj"), "sql", "SELECT count(*) AS n FROM frames"
    )
    assert code == 0 and data["rows"] == [{"n": 14}]


def test_a_damaged_step_decodes_the_rest_of_the_run_frame_by_frame(tmp_path: Path) -> None:
    """``_frames_json`` streams: the frames before a step it cannot resolve keep their resolved
    requests, the rest are decoded one by one (before, the whole run fell back)."""
    path = str(tmp_path / "runs.duckdb")
    _record(path, steps=4)
    journal = DuckDBJournal(path)
    frames = list(journal.frames(RUN))
    journal.close()
    at = len(frames) - 3
    broken = [*frames[:at], attrs.evolve(frames[at], payload=b"\xc1"), *frames[at + 1 :]]
    rows = list(_sql._frames_json(iter(broken)))
    assert [f.seq for f, _ in rows] == [f.seq for f in frames]
    assert rows[at][1] is None
    requests = [json.loads(d) for f, d in rows[:at] if f.kind == "model_request" and d]
    assert len(requests) == 4
    assert [len(r["args"]["messages"]) for r in requests] == [2, 4, 6, 8]


_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
_CELL = {
    "VARCHAR": st.none() | _TEXT,
    "BLOB": st.none() | st.binary(max_size=40),
    "BIGINT": st.none() | st.integers(-(2**63), 2**63 - 1),
    "DOUBLE": st.none() | st.floats(allow_nan=False),
}


@given(rows=st.lists(st.tuples(*(_CELL[t] for t in _CELL)), max_size=30), batch=st.integers(1, 8))
def test_spooled_rows_read_back_exactly(rows: list[tuple[Any, ...]], batch: int) -> None:
    """Any text (commas, quotes, line breaks, NUL, any code point), bytes, 64-bit integer and
    double goes through the spool and reads back as it was, in order, NULLs included."""
    with _sqlspool.scratch() as (con, directory):
        con.execute("CREATE TABLE t (n BIGINT, a VARCHAR, b BLOB, c BIGINT, d DOUBLE)")
        with _sqlspool.TableSpool(con, "t", ("BIGINT", *_CELL), directory, batch=batch) as spool:
            for n, row in enumerate(rows):
                spool.add((n, *row))
        got = con.execute("SELECT a, b, c, d FROM t ORDER BY n").fetchall()
    assert got == [(a, b, c, (d + 0.0) if d is not None else None) for a, b, c, d in rows]
    assert all(
        math.copysign(1, g[3]) == math.copysign(1, r[3])
        for g, r in zip(got, rows, strict=True)
        if r[3] is not None
    )
