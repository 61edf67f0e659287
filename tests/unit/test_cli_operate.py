"""Operator commands (issue 13 #5): ``decide``, ``resolve``, ``prune``, ``--version``.

Each runs on a DuckDB file and on Postgres; each writes through the journal's
conditional operations and respects a worker's lease.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive.storage import Journal, MemoryJournal, prune_runs

BACKENDS = [
    pytest.param("duckdb", id="duckdb"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


#: (journal URL for the CLI, a function opening a library journal on the same store)
Store = tuple[str, Callable[[], Journal]]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty journal on each backend, as a CLI URL and a library opener."""
    if request.param == "duckdb":
        path = str(tmp_path / "runs.duckdb")
        redrive.open_journal(path).close()
        yield path, lambda: redrive.open_journal(path)
        return
    import uuid

    import psycopg

    from redrive.storage.postgres import PostgresJournal

    # a database of its own: the CLI names a journal by URL alone (no schema), and prune
    # must not see other tests' runs
    base = request.getfixturevalue("pg_url")
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = urllib.parse.urlsplit(base)._replace(path=f"/{name}").geturl()
    try:
        PostgresJournal(url).close()
        yield url, lambda: PostgresJournal(url, max_size=2)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.contextmanager
def _opened(store: Store) -> Iterator[Journal]:
    journal = store[1]()
    try:
        yield journal
    finally:
        journal.close()


# -- decide ------------------------------------------------------------------------------


def _approval_loop(refunds: list[str]) -> Callable[[], str]:
    @redrive.tool(restart_safe=False)
    def refund(order: str) -> str:
        refunds.append(order)
        return "refunded"

    def loop() -> str:
        decision = redrive.await_approval("refund:ord-7", {"order": "ord-7"})
        if not decision.approved:
            return f"refused by {decision.by}: {decision.note}"
        return refund("ord-7")

    return loop


def test_decide_from_the_terminal_resumes_the_run(store: Store) -> None:
    """decide --approve records the decision; the suspended run resumes with it, once."""
    refunds: list[str] = []
    loop = _approval_loop(refunds)
    with _opened(store) as journal, redrive.run(journal, "job:1") as run:
        run.finish(loop())
    url = store[0]
    code, out, err = _cli("--journal", url, "decide", "job:1", "refund:ord-7", "--approve",
                          "--by", "alice", "--note", "ok")  # fmt: skip
    assert code == 0, err
    assert "approved by alice" in out
    code, out, _ = _cli("--journal", url, "--json", "decide", "job:1", "refund:ord-7",
                        "--reject", "--by", "mallory")  # fmt: skip
    data = json.loads(out)
    assert code == cli.EXIT_FAILED and data["recorded"] is False and data["by"] == "alice"
    with _opened(store) as journal:
        with redrive.run(journal, "job:1") as run:
            run.finish(loop())
        assert journal.get_run("job:1").status == "succeeded"  # type: ignore[union-attr]
    assert refunds == ["ord-7"]


def test_decide_reject_and_refusals(store: Store) -> None:
    """--reject reaches the loop; an approval the run did not ask for, a run that does not
    exist or has ended are refused with their exit codes and nothing is recorded."""
    refunds: list[str] = []
    loop = _approval_loop(refunds)
    with _opened(store) as journal, redrive.run(journal, "job:2") as run:
        run.finish(loop())
    url = store[0]
    code, _, err = _cli("--journal", url, "decide", "job:2", "refund:ord-8", "--approve")
    assert code == cli.EXIT_NOT_FOUND and "UnknownApprovalError" in err and "refund:ord-7" in err
    code, _, err = _cli("--journal", url, "decide", "nope", "x", "--approve")
    assert code == cli.EXIT_NOT_FOUND
    code, _, err = _cli("--journal", url, "decide", "job:2", "refund:ord-7")
    assert code == cli.EXIT_USAGE  # --approve or --reject is required
    code, _, err = _cli("--journal", url, "decide", "job:2", "refund:ord-7", "--reject",
                        "--by", "bob", "--note", "too large")  # fmt: skip
    assert code == 0, err
    with _opened(store) as journal:
        with redrive.run(journal, "job:2") as run:
            run.finish(loop())
        assert run.output == "refused by bob: too large"
    code, _, err = _cli("--journal", url, "decide", "job:2", "refund:ord-7", "--approve")
    assert code == cli.EXIT_FAILED and "TerminalRunError" in err
    assert refunds == []


# -- resolve -----------------------------------------------------------------------------


def _crashed_refund(store: Store, run_id: str, charges: list[str]) -> Callable[[], Any]:
    """Record a run whose non-restart-safe refund was in flight when the worker died."""

    @redrive.tool(restart_safe=False)
    def refund(order: str) -> dict[str, Any]:
        charges.append(order)
        if len(charges) == 1:
            raise KeyboardInterrupt  # the worker dies inside the body
        return {"refund": "re-1", "order": order}

    def loop() -> Any:
        return refund("ord-9")

    with _opened(store) as journal:
        with pytest.raises(KeyboardInterrupt), redrive.run(journal, run_id):
            loop()
        with pytest.raises(redrive.SideEffectRetryBlockedError), redrive.run(journal, run_id):
            loop()
    return loop


def test_resolve_done_hands_the_result_without_running_the_body(store: Store) -> None:
    """resolve --done records the result with who and why; the resume replays it."""
    charges: list[str] = []
    loop = _crashed_refund(store, "job:3", charges)
    code, out, err = _cli("--journal", store[0], "resolve", "job:3", "1", "--done",
                          '{"refund": "re-0", "order": "ord-9"}', "--by", "ops",
                          "--reason", "found refund re-0 in the payment console")  # fmt: skip
    assert code == 0, err
    assert "resolved as done" in out
    with _opened(store) as journal:
        with redrive.run(journal, "job:3") as run:
            run.finish(loop())
        assert run.output == {"refund": "re-0", "order": "ord-9"}
        frames = list(journal.frames("job:3"))
    assert charges == ["ord-9"]  # the body ran once, before the crash
    done = next(f for f in frames if f.kind == "tool_done")
    assert done.data()["resolved"]["by"] == "ops"
    assert "payment console" in done.data()["resolved"]["reason"]


def test_resolve_not_done_runs_the_body_again_once(store: Store) -> None:
    """resolve --not-done lets the next resume run the tool again, with its idempotency key."""
    charges: list[str] = []
    loop = _crashed_refund(store, "job:4", charges)
    code, out, err = _cli("--journal", store[0], "resolve", "job:4", "1", "--not-done",
                          "--reason", "no refund in the console")  # fmt: skip
    assert code == 0, err
    assert "resolved as not done" in out and "job:4:1:refund" in out
    with _opened(store) as journal:
        with redrive.run(journal, "job:4") as run:
            run.finish(loop())
        assert run.output == {"refund": "re-1", "order": "ord-9"}
        with redrive.run(journal, "job:4") as again:  # a finished run replays
            again.finish(loop())
        assert again.output == run.output
    assert charges == ["ord-9", "ord-9"]


def test_resolve_refusals(store: Store) -> None:
    """Not an in-flight tool step, an ended run, bad JSON: refused, nothing written."""
    charges: list[str] = []
    _crashed_refund(store, "job:5", charges)
    url = store[0]
    with _opened(store) as journal:
        before = journal.get_run("job:5").next_seq  # type: ignore[union-attr]
    code, _, err = _cli("--journal", url, "resolve", "job:5", "0", "--not-done", "--reason", "x")
    assert code == cli.EXIT_NOT_FOUND and "no step opened at seq 0" in err
    code, _, err = _cli(
        "--journal", url, "resolve", "job:5", "1", "--done", "{bad", "--reason", "x"
    )
    assert code == cli.EXIT_USAGE and "as JSON" in err
    code, _, err = _cli("--journal", url, "resolve", "job:5", "1", "--reason", "x")
    assert code == cli.EXIT_USAGE
    code, _, err = _cli("--journal", url, "resolve", "job:5", "1", "--not-done", "--reason", "x")
    assert code == 0
    code, _, err = _cli("--journal", url, "resolve", "job:5", "1", "--not-done", "--reason", "x")
    assert code == cli.EXIT_USAGE and "already resolved" in err
    with _opened(store) as journal:
        assert journal.get_run("job:5").next_seq == before + 1  # type: ignore[union-attr]
        journal.cancel("job:5", reason="done by hand", by="ops")
    code, _, err = _cli("--journal", url, "resolve", "job:5", "1", "--not-done", "--reason", "x")
    assert code == cli.EXIT_FAILED and "TerminalRunError" in err


def test_resolve_is_refused_while_a_worker_holds_the_lease(store: Store) -> None:
    """A worker holding the run's lease may be running the step: resolve refuses (RunBusyError)."""
    _crashed_refund(store, "job:6", [])
    with _opened(store) as journal:
        epoch = journal.acquire_lease("job:6", "worker-b", 300.0)
    code, _, err = _cli("--journal", store[0], "resolve", "job:6", "1", "--not-done",
                        "--reason", "x")  # fmt: skip
    assert code == cli.EXIT_FAILED and "RunBusyError" in err
    with _opened(store) as journal:
        journal.release_lease("job:6", "worker-b", epoch)
    code, _, err = _cli("--journal", store[0], "resolve", "job:6", "1", "--not-done",
                        "--reason", "x")  # fmt: skip
    assert code == 0, err


# -- prune -------------------------------------------------------------------------------


def _finished(journal: Journal, run_id: str) -> None:
    with redrive.run(journal, run_id) as run:
        run.finish(run_id)


def test_prune_deletes_old_ended_runs_only(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """prune --older-than deletes ended runs older than the cutoff; --dry-run deletes nothing;
    running runs are kept unless named, and never while leased."""
    with _opened(store) as journal:
        for run_id in ("old:1", "old:2"):
            _finished(journal, run_id)
        with pytest.raises(KeyboardInterrupt), redrive.run(journal, "old:running"):
            raise KeyboardInterrupt
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 2 * 86400)  # two days later
    with _opened(store) as journal:
        _finished(journal, "new:1")
    url = store[0]
    days = "1"  # the old runs only
    code, out, _ = _cli("--journal", url, "--json", "prune", "--older-than", days, "--dry-run")
    data = json.loads(out)
    assert code == 0 and data["dry_run"] is True
    assert sorted(r["run_id"] for r in data["deleted"]) == ["old:1", "old:2"]
    with _opened(store) as journal:
        assert len(journal.runs()) == 4
    code, out, _ = _cli("--journal", url, "prune", "--older-than", days)
    assert code == 0 and "deleted 2 run(s)" in out
    with _opened(store) as journal:
        assert sorted(r.run_id for r in journal.runs()) == ["new:1", "old:running"]
        assert list(journal.frames("old:1")) == []
        epoch = journal.acquire_lease("old:running", "worker", 300.0)
    code, out, _ = _cli("--journal", url, "prune", "--older-than", "0", "--status", "running")
    assert code == 0 and "kept old:running" in out and "deleted 0 run(s)" in out
    with _opened(store) as journal:
        journal.release_lease("old:running", "worker", epoch)
        _finished(journal, "old:1")  # the id can be used again
    code, out, _ = _cli("--journal", url, "prune", "--older-than", "0", "--status", "running")
    assert code == 0 and "deleted 1 run(s)" in out


@pytest.mark.parametrize(
    "kind",
    ["memory", "duckdb", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def test_delete_run_is_conditional(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """delete_run deletes nothing when the run gained frames since it was listed."""
    journal: Journal
    if kind == "memory":
        journal = MemoryJournal()
    elif kind == "duckdb":
        journal = redrive.open_journal(str(tmp_path / "j.duckdb"))
    else:
        from redrive.storage.postgres import PostgresJournal

        journal = PostgresJournal(
            request.getfixturevalue("pg_url"), schema=request.getfixturevalue("pg_schema")
        )
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "r"):
        raise KeyboardInterrupt
    listed = journal.get_run("r")
    assert listed is not None
    with redrive.run(journal, "r") as run:  # resumed after it was listed
        run.finish(1)
    assert not journal.delete_run("r", expected_seq=listed.next_seq)
    assert journal.get_run("r") is not None
    result = prune_runs(journal, older_than=0)
    assert [r.run_id for r in result.deleted] == ["r"] and journal.get_run("r") is None
    journal.close()


def test_duckdb_prune_survives_reopening(tmp_path: Path) -> None:
    """A run deleted from a DuckDB journal does not come back from its log when reopened."""
    path = str(tmp_path / "j.duckdb")
    journal = redrive.open_journal(path)
    _finished(journal, "gone")
    assert prune_runs(journal, older_than=0).deleted
    journal.close()
    journal = redrive.open_journal(path)
    assert journal.runs() == [] and list(journal.frames("gone")) == []
    journal.close()


def test_version() -> None:
    """redrive --version prints the installed version and exits 0."""
    code, out, _ = _cli("--version")
    assert code == 0 and out.startswith("redrive ") and out.strip() != "redrive"


def test_docs_operator_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator commands of docs/how-to/deploys.md run as printed, exit 0."""
    from tests.docblocks import claimed

    (block,) = claimed("tests/unit/test_cli_operate.py::test_docs_operator_commands")
    commands = block.code.strip().splitlines()
    assert len(commands) >= 5
    monkeypatch.chdir(tmp_path)
    journal = redrive.open_journal("runs.duckdb")

    @redrive.tool(read_only=True)
    def lookup(order: str) -> str:
        return f"order {order}"

    @redrive.tool(restart_safe=False)
    def refund(order: str) -> dict[str, str]:
        raise KeyboardInterrupt  # the worker dies inside the body

    with redrive.run(journal, "refund:ord-7") as run:
        run.finish(redrive.await_approval("refund:ord-7", {"order": "ord-7"}))
    for run_id in ("support:4711", "support:4712"):
        with pytest.raises(KeyboardInterrupt), redrive.run(journal, run_id):
            lookup("o")  # seq 1-2
            refund("o")  # seq 3, in flight
    journal.close()
    for command in commands:
        words = shlex.split(command)
        code, out, err = _cli(*words[1:])
        assert code == 0, (command, out, err)


@given(
    plan=st.lists(
        st.tuples(
            st.sampled_from(["succeeded", "failed", "cancelled", "running", "suspended"]),
            st.booleans(),  # leased by a live worker (running runs only)
        ),
        min_size=1,
        max_size=8,
    ),
    cut=st.integers(0, 8),
    status=st.sampled_from([None, "succeeded", "failed", "cancelled", "running", "suspended"]),
    dry_run=st.booleans(),
)
def test_prune_deletes_exactly_the_old_unleased_runs_of_its_statuses(
    plan: list[tuple[str, bool]], cut: int, status: str | None, dry_run: bool
) -> None:
    """Random runs of every status and age: prune deletes (or, dry, lists) exactly those older
    than the cutoff, of the named status (default: ended), not leased; it keeps every other."""
    journal = MemoryJournal()

    @redrive.tool(read_only=True)
    def step(n: int) -> int:
        return n

    for i, (state, leased) in enumerate(plan):
        run_id = f"r{i}"
        if state == "suspended":
            with redrive.run(journal, run_id) as run:
                run.finish(redrive.await_approval("a"))
        elif state == "running":
            with pytest.raises(KeyboardInterrupt), redrive.run(journal, run_id):
                step(i)
                raise KeyboardInterrupt
            if leased:
                journal.acquire_lease(run_id, "worker", 3600.0)
        elif state == "cancelled":
            with pytest.raises(KeyboardInterrupt), redrive.run(journal, run_id):
                raise KeyboardInterrupt
            journal.cancel(run_id, reason="not needed", by="ops")
        elif state == "failed":
            with pytest.raises(LookupError), redrive.run(journal, run_id):
                step(i)
                raise LookupError("the loop failed")
        else:
            with redrive.run(journal, run_id) as run:
                run.finish(step(i))
    records = sorted(journal.runs(), key=lambda r: r.updated_at)
    cutoff = records[min(cut, len(records)) - 1].updated_at if cut else 0.0
    now = cutoff + 1000.0
    statuses = (status,) if status else ("succeeded", "failed", "cancelled")
    expected = {
        r.run_id
        for r in records
        if r.updated_at <= cutoff
        and r.status in statuses
        and not (r.lease_owner and (r.lease_expires or 0) > time.time())
    }
    before = {r.run_id for r in records}
    result = prune_runs(journal, older_than=1000.0, status=status, dry_run=dry_run, now=now)
    assert {r.run_id for r in result.deleted} == expected
    after = {r.run_id for r in journal.runs()}
    assert after == (before if dry_run else before - expected)


def test_resolve_step_on_the_memory_journal() -> None:
    """The library call behind `redrive resolve` on the reference backend: not done, then the
    resume re-runs the body once; a second crash in it blocks again (the resolution was used)."""
    from redrive.replay import resolve_step

    journal = MemoryJournal()
    calls: list[int] = []

    @redrive.tool(restart_safe=False)
    def charge(n: int) -> int:
        calls.append(n)
        if len(calls) < 3:
            raise KeyboardInterrupt
        return n

    for _ in range(2):
        with pytest.raises(KeyboardInterrupt), redrive.run(journal, "m"):
            charge(1)
        with pytest.raises(redrive.SideEffectRetryBlockedError), redrive.run(journal, "m"):
            charge(1)  # in flight again, unresolved: blocked, the body does not run
        step = resolve_step(journal, "m", 1, state="not_done", by="ops", reason="checked")
        assert step.name == "charge"
    with redrive.run(journal, "m") as run:
        run.finish(charge(1))
    assert run.output == 1 and calls == [1, 1, 1]


_BAD_TEXT = st.sampled_from(["", "   ", "\t", "bad\udcff", "\ud800", "a\x00b"])


@given(
    command=st.sampled_from(
        [
            ["cancel", "{run}", "--reason", "{bad}"],
            ["cancel", "{run}", "--reason", "ok", "--by", "{bad}"],
            ["decide", "{run}", "approve_refund", "--approve", "--by", "{bad}"],
            ["resolve", "{run}", "1", "--not-done", "--reason", "{bad}"],
            ["show", "{bad}"],
            ["cancel", "{bad}", "--reason", "ok"],
            ["sql", "select '{bad}'"],
        ]
    ),
    bad=_BAD_TEXT,
)
def test_bad_text_arguments_are_usage_errors_never_tracebacks(
    tmp_path_factory: pytest.TempPathFactory, command: list[str], bad: str
) -> None:
    """Kind (outside tester: blank --reason/--by, bytes that are not UTF-8 from the shell,
    NUL): any command given a blank who/why, a run id breaking the run-id rule, or text that
    is not valid Unicode exits 2 with a one-line usage error before a journal is touched;
    nothing is recorded."""
    if command[0] == "sql" and not bad.strip():
        return  # blank text inside a SQL string literal is SQL's business
    if command[1] == "{bad}" and bad and not bad.strip():
        return  # a run id of spaces is a valid (if odd) run id: not found, exit 3
    path = str(tmp_path_factory.mktemp("j") / "runs.duckdb")
    journal = redrive.open_journal(path)
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "r1"):
        raise KeyboardInterrupt  # stands for a crash: the run stays running
    journal.close()
    argv = [a.replace("{run}", "r1").replace("{bad}", bad) for a in command]
    code, _, err = _cli("--journal", path, *argv)
    assert code == 2, (argv, code, err)
    assert "Traceback" not in err and "UsageError" in err
    journal = redrive.open_journal(path)
    record = journal.get_run("r1")
    journal.close()
    assert record is not None and record.status == "running"


@pytest.mark.parametrize("days", ["nan", "inf", "-inf"])
def test_prune_refuses_a_number_of_days_that_is_not_finite(tmp_path: Path, days: str) -> None:
    """Outside tester: ``prune --older-than nan`` printed a traceback (NaN < 0 is False)."""
    path = str(tmp_path / "runs.duckdb")
    redrive.open_journal(path).close()
    code, _, err = _cli("--journal", path, "prune", f"--older-than={days}")
    assert code == 2 and "finite" in err and "Traceback" not in err
