"""Ended runs kept in the DuckDB journal's log read exactly as ended runs moved into its tables.

Close keeps recently ended runs in the ``.rdlog`` (issue 26: replaying a
finished run then needs no DuckDB open), so every reader must see them as if
they were in the tables: the journal's own reads, ``redrive runs``, ``redrive
sql`` (which attaches the file and adds what the log holds), ``redrive export``
(the .rdj bytes), ``redrive verify`` and replaying the run through its loop,
on the sync and the async face. The property drives sequences of recorded
runs (finished, failed or interrupted), closes, crashes and kills at each
stage of a closing checkpoint, and at each read compares every reader's view
of the file as it is with its view of a copy whose log was moved wholly into
the tables, and both with what was acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive.storage import _duckdb_held, _framelog
from redrive.storage._framelog import START
from redrive.storage.duckdb import DuckDBJournal


class _Kill(BaseException):
    """A process killed at one stage of a closing checkpoint (nothing after it runs)."""


class _Stop(SystemExit):
    """An interruption (a deploy's SIGTERM handler): the run stays ``running``."""


def _loop(steps: int, stop_at: int | None = None) -> Any:
    @redrive.tool(read_only=True)
    def step(n: int) -> int:
        if n == stop_at:
            raise _Stop(f"stop at {n}")
        return n * 3

    return lambda: [step(n) for n in range(steps)]


#: (run id, steps, outcome): outcome "finish", "fail" or "stop" (interrupted).
_RECORD = st.tuples(
    st.integers(min_value=1, max_value=5), st.sampled_from(["finish", "fail", "stop"])
)
#: How the writer ends before a read: a clean close (ended runs kept or, "old", moved),
#: a crash (no checkpoint), or a kill at a stage of the closing checkpoint.
_END = st.sampled_from(
    ["close", "old", "crash", "checkpoint-ingested", "rewrite-opened", "rewrite-written"]
)
_OPS = st.lists(
    st.one_of(st.tuples(st.just("record"), _RECORD), st.tuples(st.just("read"), _END)),
    min_size=1,
    max_size=7,
)


def _record(journal: DuckDBJournal, run_id: str, steps: int, outcome: str) -> None:
    if outcome == "stop":
        with contextlib.suppress(_Stop), redrive.run(journal, run_id, input=steps):
            _loop(steps, stop_at=steps - 1)()
    elif outcome == "fail":
        with contextlib.suppress(ValueError), redrive.run(journal, run_id, input=steps):
            _loop(steps)()
            raise ValueError("failed on purpose")
    else:
        with redrive.run(journal, run_id, input=steps) as run:
            run.finish(_loop(steps)())


def _end(journal: DuckDBJournal, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """End the writer as ``how`` says (see :data:`_END`)."""
    if how in ("close", "old"):
        with monkeypatch.context() as patch:
            if how == "old":
                patch.setattr(_duckdb_held, "KEEP_ENDED_AGE", -1.0)
            journal.close()
        return
    if how == "crash":
        journal._settle()
        assert journal._log is not None
        journal._log.close()
        journal._close_store()
        journal._release()
        return

    journal._settle()  # a threshold move in flight ends before the kill is armed

    def kill(stage: str) -> None:
        if stage == how:
            raise _Kill(stage)

    with monkeypatch.context() as patch:
        patch.setattr(_framelog, "_crash_point", kill)
        patch.setattr(_duckdb_held, "KEEP_ENDED_AGE", -1.0)  # so that close moves something
        with contextlib.suppress(_Kill):
            journal.close()


def _cli(*argv: str) -> Any:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["--json", *argv])
    assert code == 0, (argv, out.getvalue())
    return json.loads(out.getvalue())


def _replay(path: str, run_id: str, steps: int, face: str) -> tuple[Any, int, int]:
    """Re-drive a finished run through its loop; return (output, replayed, live steps)."""
    journal = DuckDBJournal(path)
    try:
        if face == "sync":
            with redrive.run(journal, run_id, input=steps) as run:
                out = run.finish(_loop(steps)())
            return out, run.replayed_steps, run.live_steps

        async def main() -> tuple[Any, int, int]:
            async with redrive.run(journal, run_id, input=steps) as run:
                out = run.finish(await asyncio.to_thread(_loop(steps)))
            return out, run.replayed_steps, run.live_steps

        return asyncio.run(main())
    finally:
        journal.close()


def _views(path: str, runs: dict[str, tuple[int, str]], tmp: Path) -> dict[str, Any]:
    """What every reader sees of the journal at ``path`` (closed), keyed by reader."""
    views: dict[str, Any] = {}
    journal = DuckDBJournal(path, read_only=True)
    try:
        views["get_run"] = {
            r: attrs.asdict(row) for r in sorted(runs) if (row := journal.get_run(r)) is not None
        }
        views["frames"] = {r: [f.chain for f in journal.frames(r)] for r in sorted(runs)}
        views["runs"] = sorted((r.run_id, r.status) for r in journal.runs())
        views["succeeded"] = sorted(r.run_id for r in journal.runs(status="succeeded"))
    finally:
        journal.close()
    listed = _cli("--journal", path, "runs")
    views["cli runs"] = sorted(
        (item["run_id"], item["status"], item.get("steps")) for item in listed["runs"]
    )
    sql = "SELECT run_id, status, next_seq, last_chain FROM runs ORDER BY run_id"
    views["sql runs"] = _cli("--journal", path, "sql", sql)["rows"]
    sql = "SELECT run_id, seq, chain, kind, data FROM frames ORDER BY run_id, seq"
    views["sql frames"] = _cli("--journal", path, "sql", sql)["rows"]
    views["verify"] = _cli("--journal", path, "verify")["ok"]
    for run_id in sorted(runs):
        out = tmp / f"{run_id}.rdj.jsonl"
        _cli("--journal", path, "export", run_id, "-o", str(out))
        views[f"export {run_id}"] = out.read_text()
    for run_id, (steps, outcome) in sorted(runs.items()):
        if outcome == "finish":
            for face in ("sync", "async"):
                views[f"replay {face} {run_id}"] = _replay(path, run_id, steps, face)
    return views


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=_OPS, threshold=st.sampled_from([6, 2000]))
# a finished run kept in the log, one moved by age, one killed between the tables'
# insert and the log rewrite (in both; `redrive sql` showed its frames twice)
@example(ops=[("record", (3, "finish")), ("read", "close")], threshold=2000)
@example(ops=[("record", (2, "finish")), ("record", (1, "stop")), ("read", "old")], threshold=6)
@example(
    ops=[("record", (4, "fail")), ("record", (1, "stop")), ("read", "checkpoint-ingested")],
    threshold=6,
)
def test_ended_runs_kept_in_the_log_read_as_if_moved_into_the_tables(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[str, Any]],
    threshold: int,
) -> None:
    """Every reader sees the same journal whether its ended runs sit in the log or the tables."""
    base = tmp_path_factory.mktemp("kept")
    path = str(base / "runs.duckdb")
    runs: dict[str, tuple[int, str]] = {}
    journal: DuckDBJournal | None = None
    for op, arg in [*ops, ("read", "close")]:
        if op == "record":
            journal = journal or DuckDBJournal(path, checkpoint_frames=threshold)
            steps, outcome = arg
            run_id = f"run-{len(runs)}"
            _record(journal, run_id, steps, outcome)
            runs[run_id] = (steps, outcome)
            continue
        if journal is None:
            continue
        _end(journal, arg, monkeypatch)
        journal = None
        held = DuckDBJournal(path, read_only=True)
        in_log = {r for r in held._overlay.runs if runs[r][1] != "stop"}
        held.close()
        moved = str(base / "moved" / "runs.duckdb")
        shutil.rmtree(base / "moved", ignore_errors=True)
        (base / "moved").mkdir()
        for suffix in ("", ".rdlog"):
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(path + suffix, moved + suffix)
        mover = DuckDBJournal(moved)
        mover.checkpoint()  # everything into the tables, the log emptied
        mover.close()
        assert Path(moved + ".rdlog").stat().st_size == START
        here = _views(path, runs, base)
        there = _views(moved, runs, base)
        assert here == there, in_log
        # and both are what was acknowledged
        assert set(here["get_run"]) == set(runs)
        for run_id, (steps, outcome) in runs.items():
            status = here["get_run"][run_id]["status"]
            assert status == {"finish": "succeeded", "fail": "failed", "stop": "running"}[outcome]
            if outcome == "finish":
                for face in ("sync", "async"):
                    out, replayed, live = here[f"replay {face} {run_id}"]
                    assert (out, replayed, live) == ([n * 3 for n in range(steps)], steps, 0)
