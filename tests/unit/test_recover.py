"""Recovering stale runs, and what changed since a run was recorded (library and CLI).

Each test writes a small application module (a ``@redrive.durable`` entrypoint, a
model callable, a side-effecting tool) to its own directory, so it can be
edited between a crash and its recovery as a deploy would; side effects go to
a file outside the process's memory.
"""

from __future__ import annotations

import importlib
import json
import shlex
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive import cli
from redrive.storage import Journal, MemoryJournal

APP = '''
from pathlib import Path

import redrive

LOG = Path({log!r})
CRASH = Path({crash!r})
PROMPT = {prompt!r}


@redrive.tool(restart_safe=False)
def refund(order: str{extra}) -> dict:
    """Refund an order."""
    with LOG.open("a") as fh:
        fh.write(f"refund {{order}}\\n")
    return {{"refunded": order}}


@redrive.model
def ask(system: str, text: str) -> str:
    return f"{{text}}: ok"


@redrive.durable("unused.duckdb", run_id="refund:{{order}}")
{define} handle(order: str) -> str:
    first = ask(system=PROMPT, text=order)
    refund(order)
    if CRASH.exists():
        raise ConnectionError("the worker lost its database after the refund")  # resumable
    return ask(system=PROMPT, text=first)
'''


class App:
    """One application module in its own directory, editable between deploys."""

    def __init__(self, tmp: Path, define: str = "def") -> None:
        self.define = define
        self.dir = tmp / "app"
        self.dir.mkdir()
        self.name = f"deskapp_{uuid.uuid4().hex[:8]}"
        self.log = tmp / "effects.log"
        self.crash = tmp / "crash"
        self.deploy()

    def deploy(self, *, prompt: str = "v1", extra: str = "") -> Any:
        """Write (or rewrite) the module and import it afresh."""
        path = self.dir / f"{self.name}.py"
        path.write_text(
            APP.format(
                log=str(self.log),
                crash=str(self.crash),
                prompt=prompt,
                extra=extra,
                define=self.define,
            )
        )
        sys.modules.pop(self.name, None)
        importlib.invalidate_caches()
        sys.path.insert(0, str(self.dir))
        try:
            return importlib.import_module(self.name)
        finally:
            sys.path.remove(str(self.dir))

    def effects(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def interrupt(self, journal: Journal, orders: list[str]) -> None:
        """Start one run per order and stop each after its refund (a transient error: the
        run stops ``paused``, resumable)."""
        module = self.deploy()
        self.crash.touch()
        for order in orders:
            with pytest.raises(ConnectionError):
                module.handle.redrive_recover(journal, f"refund:{order}", [], {"order": order}, {})
        self.crash.unlink()


@pytest.fixture(params=["def", "async def"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> App:
    """An application module in a directory of its own (a sync, then an async entrypoint)."""
    return App(tmp_path, request.param)


def _duckdb(tmp_path: Path) -> Journal:
    from redrive.storage.duckdb import DuckDBJournal

    return DuckDBJournal(str(tmp_path / "runs.duckdb"))


def _postgres(request: pytest.FixtureRequest) -> Journal:
    from redrive.storage.postgres import PostgresJournal

    url = request.getfixturevalue("pg_url")
    schema = request.getfixturevalue("pg_schema")
    return PostgresJournal(url, schema=schema, max_size=4)


@pytest.fixture(params=["duckdb", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A fresh DuckDB or Postgres journal."""
    j = _duckdb(tmp_path) if request.param == "duckdb" else _postgres(request)
    yield j
    j.close()


def test_recover_finishes_interrupted_runs_without_repeating_side_effects(
    app: App, journal: Journal
) -> None:
    """recover_runs re-drives each interrupted run from its recorded input: the refund
    replays from the journal, the rest runs live, and every run ends succeeded."""
    app.interrupt(journal, ["A", "B", "C"])
    assert [r.run_id for r in redrive.recover_runs.__globals__["stale_runs"](journal, stale=0)]
    report = redrive.recover_runs(journal, stale=0, import_paths=[str(app.dir)], jobs=2)
    assert report.ok and report.count("recovered") == 3, report.summary()
    assert all(r.replayed_steps == 2 and r.live_steps == 1 for r in report.results)
    assert sorted(app.effects()) == ["refund A", "refund B", "refund C"]
    assert {journal.get_run(f"refund:{o}").status for o in "ABC"} == {"succeeded"}  # type: ignore[union-attr]
    again = redrive.recover_runs(journal, stale=0, import_paths=[str(app.dir)])
    assert again.results == () and again.summary() == "0 run(s): nothing to recover"


def test_two_recoverers_racing_on_postgres_finish_every_run_once(
    app: App, request: pytest.FixtureRequest
) -> None:
    """Two recoverers (own connections, two jobs each) race over the same stale runs:
    every run is finished once, no refund runs twice, and no run needs a person."""
    from redrive.storage.postgres import PostgresJournal

    url = request.getfixturevalue("pg_url")
    schema = request.getfixturevalue("pg_schema")
    journals = [PostgresJournal(url, schema=schema, max_size=4) for _ in range(2)]
    first = journals[0]
    orders = [f"O{i}" for i in range(8)]
    app.interrupt(first, orders)
    assert len(app.effects()) == 8
    reports: list[redrive.RecoverReport] = []
    barrier = threading.Barrier(2)

    def recoverer(j: Journal) -> None:
        barrier.wait()
        reports.append(redrive.recover_runs(j, stale=0, jobs=2, import_paths=[str(app.dir)]))

    threads = [threading.Thread(target=recoverer, args=(j,)) for j in journals]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        assert len(reports) == 2, "a recoverer did not finish"
        assert all(r.ok for r in reports), [r.summary() for r in reports]
        assert sum(r.count("recovered") for r in reports) == 8
        assert sorted(app.effects()) == sorted(f"refund {o}" for o in orders)
        statuses = {first.get_run(f"refund:{o}").status for o in orders}  # type: ignore[union-attr]
        assert statuses == {"succeeded"}
    finally:
        for j in journals:
            j.close()


def test_stale_selection(app: App, tmp_path: Path) -> None:
    """Only runs without a write for --stale seconds and without a live lease are stale."""
    journal = MemoryJournal()
    app.interrupt(journal, ["A"])
    record = journal.get_run("refund:A")
    assert record is not None
    stale_runs = redrive.recover_runs.__globals__["stale_runs"]
    assert stale_runs(journal, stale=3600) == []
    assert [r.run_id for r in stale_runs(journal, stale=0)] == ["refund:A"]
    assert stale_runs(journal, stale=0, entrypoint="elsewhere") == []
    journal.acquire_lease("refund:A", "someone", 60)
    assert stale_runs(journal, stale=0) == []  # held by a live worker
    with pytest.raises(ValueError, match="stale"):
        stale_runs(journal, stale=-1)
    with pytest.raises(ValueError, match="jobs"):
        redrive.recover_runs(journal, jobs=0)


def test_a_run_without_an_entrypoint_is_an_error_result() -> None:
    """A plain redrive.run run cannot be recovered: the result says why, nothing raises."""
    journal = MemoryJournal()
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "plain"):
        raise KeyboardInterrupt
    report = redrive.recover_runs(journal, stale=0)
    assert [r.outcome for r in report.results] == ["error"] and not report.ok
    assert "@redrive.durable" in report.results[0].message


def test_recover_after_a_prompt_change_uses_the_deployment_policy(app: App, tmp_path: Path) -> None:
    """A deploy that edits the prompt: strict recovery reports the divergence; with
    on_drift='continue_live' the run finishes and the refund still ran once.

    Outside cases: DBOS transact-golang #479 (runs of an older app version are never
    picked up again, silently) and cadence-go-client #333 (a nondeterministic run stuck,
    retried in a loop): here the old run is reported ``diverged`` once (exit 1), stays
    resumable, and a deployment-wide opt-in carries it forward."""
    journal = _duckdb(tmp_path)
    try:
        app.interrupt(journal, ["A"])
        app.deploy(prompt="v2")
        strict = redrive.recover_runs(journal, stale=0, import_paths=[str(app.dir)])
        assert [r.outcome for r in strict.results] == ["diverged"] and not strict.ok
        redrive.set_default_on_drift("continue_live")
        try:
            report = redrive.recover_runs(journal, stale=0, import_paths=[str(app.dir)])
        finally:
            redrive.set_default_on_drift(None)
        assert [r.outcome for r in report.results] == ["recovered"]
        assert app.effects() == ["refund A"]
        assert redrive.run_fingerprint(journal, "refund:A").reasked == (1,)
    finally:
        journal.close()


def test_what_changed_names_the_parts_and_the_steps(app: App) -> None:
    """what_changed compares the recorded fingerprint with the current code: a changed
    prompt is found by the dry replay at its model step; a tool that gained a parameter
    at its default is listed as changed, and its recorded step, which the replay did not
    reach, is not called unreplayable (the call keeps its identity, CONTRACT C1); nothing
    is written to the journal. (A signature change that breaks a recorded call:
    tests/unit/test_tool_defaults.py.)"""
    journal = MemoryJournal()
    app.interrupt(journal, ["A"])
    same = redrive.what_changed(journal, "refund:A", import_paths=[str(app.dir)])
    assert not same.changed, same.summary()
    app.deploy(prompt="v2", extra=", note: str = ''")
    frames_before = len(list(journal.frames("refund:A")))
    found = redrive.what_changed(journal, "refund:A", import_paths=[str(app.dir)])
    assert len(list(journal.frames("refund:A"))) == frames_before
    parts = {c.part: c.detail for c in found.changes}
    assert parts["tool:refund"] == "signature changed"
    steps = {s.seq: (s.name, s.blocking) for s in found.steps}
    assert steps[1] == ("model:ask", True) and steps[3] == ("refund", False)
    assert found.strict_replay_breaks and "$.system" in found.first_drift
    hint = found.summary().split("What to do: ")[1]
    assert hint.startswith("resume with replay=ReplayPolicy(on_drift='continue_live')")
    fingerprint_only = redrive.what_changed(
        journal, "refund:A", import_paths=[str(app.dir)], replay=False
    )
    assert [s.seq for s in fingerprint_only.steps] == [3] and fingerprint_only.replayed is None
    assert not fingerprint_only.strict_replay_breaks


def test_cli_recover_what_changed_runs_and_show(
    app: App, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commands exactly as docs/how-to/deploys.md gives them, on a DuckDB journal."""
    url = str(tmp_path / "runs.duckdb")
    journal = _duckdb(tmp_path)
    monkeypatch.setenv("REDRIVE_APP_VERSION", "v1")
    app.interrupt(journal, ["A", "B"])
    journal.close()
    monkeypatch.setenv("REDRIVE_APP_VERSION", "v2")
    monkeypatch.chdir(app.dir)

    def run(*argv: str) -> tuple[int, str]:
        code = cli.main(["--journal", url, *argv])
        return code, capsys.readouterr().out

    code, out = run("runs", "--app-version", "v1")
    assert code == 0 and len(out.splitlines()) == 3
    assert run("runs", "--app-version", "v0")[1].splitlines()[1:] == []
    code, out = run("show", "refund:A")
    assert code == 0 and "app version v1 (env)" in out and "models: model:ask" in out
    code, out = run("--json", "what-changed", "refund:A")
    data = json.loads(out)
    assert code == 1 and data["changes"][0]["part"] == "app_version"
    assert not data["strict_replay_breaks"]
    code, out = run("recover", "--stale", "0", "--dry-run")
    assert code == 0 and out.count("would recover") == 2
    code, out = run("--json", "recover", "--stale", "0", "--jobs", "2")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["summary"] == "2 run(s): 2 recovered"
    assert sorted(app.effects()) == ["refund A", "refund B"]
    code, out = run("recover", "--stale", "0")
    assert code == 0 and "nothing to recover" in out
    assert run("recover", "--stale", "-1")[0] == cli.EXIT_USAGE
    assert run("what-changed", "nope")[0] == cli.EXIT_NOT_FOUND


def _operating_commands() -> list[list[str]]:
    """The ``redrive ...`` command lines of docs/how-to/deploys.md's deploys and recovery."""
    from tests.docblocks import claimed

    blocks = claimed("tests/unit/test_recover.py::test_docs_operating_commands_run_as_written")
    return [shlex.split(line)[1:] for b in blocks for line in b.code.strip().splitlines()]


def test_docs_operating_commands_run_as_written(
    app: App, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command of docs/how-to/deploys.md's deploys and recovery runs as written: runs
    recorded under v1 are listed, shown, compared with v2 code, and recovered."""
    url = str(tmp_path / "runs.duckdb")
    journal = _duckdb(tmp_path)
    monkeypatch.setenv("REDRIVE_APP_VERSION", "v1")
    app.interrupt(journal, ["A", "B"])
    journal.close()
    monkeypatch.setenv("REDRIVE_APP_VERSION", "v2")
    monkeypatch.setenv("REDRIVE_JOURNAL", url)
    monkeypatch.chdir(app.dir)
    commands = _operating_commands()
    assert [c[0] for c in commands] == ["runs", "show", "what-changed", "recover", "recover"]
    codes = [cli.main(argv) for argv in commands]
    capsys.readouterr()
    assert codes == [0, 0, 1, 0, 0]  # what-changed: the app version differs (exit 1)
    assert sorted(app.effects()) == ["refund A", "refund B"]


def test_recovery_leaves_a_run_executing_under_a_lease_alone(app: App) -> None:
    """Outside case (DBOS transact-java #491: launch-time recovery re-executed a workflow
    still running in-process): a recoverer started while a worker executes a run under a
    lease does not re-drive it, and the refund runs once."""
    from redrive.replay import set_boundary_hook

    journal = MemoryJournal()
    module = app.deploy()
    inside, release = threading.Event(), threading.Event()

    def hook(point: str, info: dict[str, Any]) -> None:
        if point == "tool_claimed" and info["name"] == "refund":
            inside.set()
            release.wait(30)

    def worker() -> None:
        module.handle.redrive_recover(journal, "refund:A", [], {"order": "A"}, {"lease": 30})

    set_boundary_hook(hook)
    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert inside.wait(30)
        assert [r.run_id for r in journal.runs(status="running")] == ["refund:A"]
        report = redrive.recover_runs(journal, stale=0, import_paths=[str(app.dir)])
        (left,) = report.results  # looked at, left alone, and said why
        assert (left.outcome, left.state, left.live_steps) == ("left", "held", 0)
        assert "held by" in left.message and report.ok
    finally:
        release.set()
        thread.join(30)
        set_boundary_hook(None)
    assert app.effects() == ["refund A"]
    assert journal.get_run("refund:A").status == "succeeded"  # type: ignore[union-attr]


def test_check_reports_fingerprint_differences_next_to_a_divergence(app: App) -> None:
    """redrive check on a run recorded before a deploy: the divergence report is followed
    by what the fingerprint says changed (the tool's signature)."""
    journal = MemoryJournal()
    module = app.deploy()
    module.handle.redrive_recover(journal, "refund:A", [], {"order": "A"}, {})
    passed = redrive.check_run((journal, "refund:A"), import_paths=[str(app.dir)])
    assert passed.passed and "fingerprint" not in passed.message
    app.deploy(prompt="v2", extra=", note: str = ''")
    result = redrive.check_run((journal, "refund:A"), import_paths=[str(app.dir)])
    assert result.outcome == "diverged" and result.seq == 1
    assert "fingerprint differences: tool:refund (signature changed)" in result.message
