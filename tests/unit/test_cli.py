"""The redrive command line: every command, --json, exit codes, and the incident workflow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive import cli
from redrive.storage.rdj import import_run

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "fixtures" / "runs"
REFUNDED = "refund:A-100:refunded"
PROMPT = "refund:A-100:prompt"
CASSETTES = Path("/work/shared/realdata/cassettes")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code, out, _err = _run(capsys, "--json", *argv)
    return code, json.loads(out)


@pytest.fixture
def journal_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A DuckDB journal holding two saved runs; the cwd is the repository root."""
    monkeypatch.chdir(ROOT)
    url = str(tmp_path / "runs.duckdb")
    journal = redrive.open_journal(url)
    import_run(RUNS / "pass" / "refunded.rdj", journal)
    import_run(RUNS / "fail" / "prompt.rdj", journal)
    journal.close()
    return url


def test_runs_lists_and_filters(journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """runs lists every run with status and steps, plain when piped, and filters."""
    code, out, _ = _run(capsys, "--journal", journal_url, "runs")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split("\t")[:4] == ["run_id", "status", "steps", "frames"]
    assert sorted(line.split("\t")[0] for line in lines[1:]) == [PROMPT, REFUNDED]
    code, data = _json(
        capsys, "--journal", journal_url, "runs", "--status", "succeeded", "--limit", "1"
    )
    assert code == 0 and len(data["runs"]) == 1 and data["runs"][0]["steps"] == 6
    assert _json(capsys, "--journal", journal_url, "runs", "--stale")[1]["runs"] == []
    code, data = _json(capsys, "--journal", journal_url, "runs", "--status", "failed")
    assert code == 0 and data["runs"] == []


def test_missing_journal_and_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing journal exits 3 (with a JSON error under --json); bad arguments exit 2."""
    code, data = _json(capsys, "--journal", str(tmp_path / "none.duckdb"), "runs")
    assert code == cli.EXIT_NOT_FOUND and data["error"] == "FileNotFoundError"
    assert not (tmp_path / "none.duckdb").exists()
    assert cli.main(["runs", "--status", "nonsense"]) == cli.EXIT_USAGE
    assert cli.main([]) == cli.EXIT_USAGE
    capsys.readouterr()


def test_show_timeline(journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """show gives each step with status, duration and token usage, from a journal or a file."""
    code, data = _json(capsys, "--journal", journal_url, "show", REFUNDED)
    assert code == 0
    steps = data["steps"]
    assert [s["name"] for s in steps] == [
        "model:support",
        "lookup_order",
        "model:support",
        "issue_refund",
        "model:support",
        "write_audit",
    ]
    assert steps[0]["tokens"] == {"input": 40, "output": 12}
    assert all(s["status"] == "done" and s["duration_ms"] >= 0 for s in steps)
    assert data["info"]["end"]["output"] == {"refunded": True, "reply": "Refunded 42 on A-100."}
    code, out, _ = _run(capsys, "show", str(RUNS / "pass" / "refunded.rdj"))
    assert code == 0 and "tokens in/out 180/36" in out and "issue_refund" in out
    code, _, err = _run(capsys, "--journal", journal_url, "show", "nope")
    assert code == cli.EXIT_NOT_FOUND and "no run 'nope'" in err


def test_export_import_verify(
    journal_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """export writes a verifiable file, import copies it, verify checks files and runs."""
    out_file = str(tmp_path / "x.rdj")
    code, data = _json(capsys, "--journal", journal_url, "export", REFUNDED, "-o", out_file)
    assert code == 0 and data["frames"] == 14 and os.path.getsize(out_file) == data["bytes"]
    other = str(tmp_path / "other.duckdb")
    code, data = _json(capsys, "--journal", other, "import", out_file)
    assert code == 0 and data["run"]["status"] == "succeeded"
    code, data = _json(capsys, "--journal", other, "verify", REFUNDED, out_file)
    assert code == 0 and [r["frames"] for r in data["results"]] == [14, 14]
    code, data = _json(capsys, "--journal", journal_url, "verify")
    assert code == 0 and len(data["results"]) == 2
    raw = bytearray(Path(out_file).read_bytes())
    raw[-40] ^= 0xFF
    Path(out_file).write_bytes(bytes(raw))
    code, data = _json(capsys, "verify", out_file)
    assert code == cli.EXIT_FAILED and data["ok"] is False
    assert data["results"][0]["last_good_seq"] == 13  # the damaged byte is in the end record
    assert data["results"][0]["reason"] == "checksum"
    code, _, err = _run(capsys, "--journal", str(tmp_path / "third.duckdb"), "import", out_file)
    assert code == cli.EXIT_JOURNAL and "JournalCorruptError" in err
    code, _, _ = _run(capsys, "--journal", journal_url, "export", "nope", "-o", out_file)
    assert code == cli.EXIT_NOT_FOUND


def test_diff(journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """diff names the first divergent step and the path that changed; identical runs exit 0."""
    code, data = _json(capsys, "--journal", journal_url, "diff", REFUNDED, PROMPT)
    assert code == cli.EXIT_FAILED and not data["identical"]
    first = data["first_divergent_step"]
    assert first["index"] == 0 and first["a"]["name"] == "model:support"
    assert first["diff"][0][0] == "$.messages[0].content"
    code, out, _ = _run(
        capsys, "--journal", journal_url, "diff", REFUNDED, str(RUNS / "pass" / "refunded.rdj")
    )
    assert code == 0 and "the same 6 steps" in out


def test_sql(journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """sql runs DuckDB over runs and frames, payloads as JSON; a bad query exits 2."""
    code, data = _json(
        capsys,
        "--journal",
        journal_url,
        "sql",
        "SELECT r.run_id, count(*) AS n, sum(CAST(json_extract(f.data, '$.response.usage"
        ".input_tokens') AS INT)) AS tokens FROM frames f JOIN runs r USING (run_id) "
        "WHERE f.kind = 'model_response' GROUP BY 1 ORDER BY 1",
    )
    assert code == 0
    assert data["rows"] == [
        {"run_id": PROMPT, "n": 3, "tokens": 180},
        {"run_id": REFUNDED, "n": 3, "tokens": 180},
    ]
    code, out, _ = _run(
        capsys,
        "--journal",
        str(RUNS / "pass" / "refunded.rdj"),
        "sql",
        "SELECT count(*) FROM frames",
    )
    assert code == 0 and out.splitlines()[1] == "14"
    code, _, err = _run(capsys, "--journal", journal_url, "sql", "SELECT nope FROM nowhere")
    assert code == cli.EXIT_USAGE and "query failed" in err


def test_check_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """check passes the passing fixtures, fails the others, stops early and writes JUnit XML."""
    monkeypatch.chdir(ROOT)
    code, data = _json(capsys, "check", str(RUNS / "pass"))
    assert code == 0 and data["ok"] and len(data["results"]) == 2
    junit = tmp_path / "junit.xml"
    code, out, _ = _run(capsys, "check", str(RUNS), "--junit-xml", str(junit))
    assert code == cli.EXIT_FAILED
    assert "FAIL" in out and "$.messages[0].content" in out and "2 passed, 2 failed" in out
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "2"  # type: ignore[union-attr]
    code, data = _json(capsys, "check", str(RUNS), "--fail-fast")
    assert code == cli.EXIT_FAILED and [r["outcome"] for r in data["results"]] == ["went_live"]
    code, _, _ = _run(capsys, "check", str(tmp_path / "missing"))
    assert code == cli.EXIT_NOT_FOUND


def test_import_cassette(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """import-cassette turns a real vcrpy cassette into a run that show can read."""
    cassette = CASSETTES / "llm__openai_chat_tool_chain_two_calls.yaml"
    if not cassette.exists():
        pytest.skip("the shared real-data cassettes are not on this machine")
    url = str(tmp_path / "c.duckdb")
    code, data = _json(
        capsys, "--journal", url, "import-cassette", str(cassette), "--run-id", "cassette:chain"
    )
    assert code == 0 and data["runs"] == ["cassette:chain"]
    code, data = _json(capsys, "--journal", url, "show", "cassette:chain")
    assert code == 0 and len(data["steps"]) >= 2
    assert {s["kind"] for s in data["steps"]} == {"model"}


def test_demo_is_wired(monkeypatch: pytest.MonkeyPatch) -> None:
    """demo passes its arguments to redrive.demo.main and returns its exit code."""
    import redrive.demo

    seen: list[list[str]] = []

    def fake(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    monkeypatch.setattr(redrive.demo, "main", fake)
    assert cli.main(["demo", "--keep", "--run-id", "x"]) == 7
    assert seen == [["--keep", "--run-id", "x"]]


def test_console_script(journal_url: str) -> None:
    """The installed `redrive` console script runs and returns the documented exit code."""
    exe = shutil.which("redrive", path=str(Path(sys.executable).parent))
    assert exe is not None
    done = subprocess.run(
        [exe, "--journal", journal_url, "--json", "show", "nope"], capture_output=True, text=True
    )
    assert done.returncode == cli.EXIT_NOT_FOUND
    assert json.loads(done.stdout)["error"] == "UnknownRunError"


def test_incident_workflow(
    journal_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Export a production run, import it locally, replay it offline, then fork and re-run it."""
    incident = str(tmp_path / "incident.rdj")
    local = str(tmp_path / "local.duckdb")
    assert _run(capsys, "--journal", journal_url, "export", PROMPT, "-o", incident)[0] == 0
    assert _run(capsys, "--journal", local, "import", incident)[0] == 0
    assert _run(capsys, "verify", incident)[0] == 0

    from fixtures.examples import refund_agent

    handle = refund_agent.handle_ticket.__wrapped_durable__  # type: ignore[attr-defined]
    # replay offline from the file: the recorded prompt is what the old code sent
    monkey = pytest.MonkeyPatch()
    monkey.setattr(refund_agent, "SYSTEM_PROMPT", "You are a refund assistant. Be brief.")
    try:
        with redrive.run(redrive.open_journal(incident), PROMPT, live=False) as run:
            assert handle("A-100", "Please refund order")["refunded"] is True
    finally:
        monkey.undo()
    assert (run.live_steps, run.replayed_steps) == (0, 6)
    # the current prompt diverges at the first model step
    assert redrive.check_run(incident, import_paths=[str(ROOT)]).outcome == "diverged"
    fork = getattr(redrive, "fork", None)
    if fork is None:
        pytest.skip("redrive.fork is not available: the fork step is not exercised")
    journal = redrive.open_journal(local)
    fork(journal, PROMPT, 1, "refund:A-100:fixed")
    with redrive.run(journal, "refund:A-100:fixed") as run:
        run.finish(handle("A-100", "Please refund order"))
    assert run.live_steps == 6 and journal.get_run("refund:A-100:fixed").status == "succeeded"  # type: ignore[union-attr]
    journal.close()
    code, data = _json(capsys, "--journal", local, "diff", PROMPT, "refund:A-100:fixed")
    assert code == cli.EXIT_FAILED
    assert data["first_divergent_step"]["diff"][0][0] == "$.messages[0].content"


def test_check_import_path_from_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check -I DIR finds entrypoints when run outside the project; without it, it says why."""
    import importlib
    import subprocess
    import sys
    import textwrap

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    module = f"agent_{uuid.uuid4().hex[:8]}"
    (project / f"{module}.py").write_text(
        textwrap.dedent("""
        import redrive

        @redrive.tool(read_only=True)
        def get_price(sku: str) -> int:
            return 42

        def handle(sku: str) -> int:
            return get_price(sku) + 1
    """)
    )
    monkeypatch.syspath_prepend(str(project))
    agent = importlib.import_module(module)
    journal = redrive.open_journal(":memory:")
    entry = redrive.durable(journal, run_id="price:{sku}")(agent.handle)
    assert entry("A1") == 43
    saved = tmp_path / "price.rdj"
    redrive.export_run(journal, "price:A1", saved)
    sys.modules.pop(module, None)

    command = [sys.executable, "-m", "redrive.cli", "--json", "check", str(saved)]
    without = subprocess.run(command, cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert without.returncode == cli.EXIT_FAILED
    assert "cannot load entrypoint" in without.stdout
    with_path = subprocess.run(
        [*command, "-I", str(project)], cwd=elsewhere, capture_output=True, text=True, timeout=120
    )
    assert with_path.returncode == 0, with_path.stdout + with_path.stderr


def _error_line(err: str, command: str, name: str) -> str:
    """The single stderr line of a failed command, checked to carry the public error name."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"redrive {command}: {name}: "), lines[0]
    return lines[0]


def test_a_file_that_is_not_a_journal_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --journal file that is not a DuckDB database is one line (or JSON) and exit 4."""
    text = tmp_path / "text.duckdb"
    text.write_text("hello\n")
    for command in (["runs"], ["show", "x"], ["sql", "SELECT 1"]):
        code, _, err = _run(capsys, "--journal", str(text), *command)
        assert code == cli.EXIT_JOURNAL
        line = _error_line(err, command[0], "JournalCorruptError")
        assert "cannot open journal" in line and "text.duckdb" in line
    code, data = _json(capsys, "--journal", str(text), "runs")
    assert code == cli.EXIT_JOURNAL and data["error"] == "JournalCorruptError"
    assert data["source"] == str(text) and data["reason"] == "unreadable"
    assert text.read_text() == "hello\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("interactions: [ {request: 1},", "not readable YAML: line 2, column 1: expected the node"),
        ("interactions: 5", "'interactions' must be a non-empty list"),
        ("interactions: [5]", "interaction 0: expected a mapping with 'request' and 'response'"),
        (
            "interactions: [{request: 1, response: {}}]",
            "interaction 0: 'request' must be a mapping",
        ),
        ("hello: world", "no 'interactions' list"),
    ],
    ids=["yaml", "not-a-list", "item-not-a-mapping", "request-not-a-mapping", "no-interactions"],
)
def test_malformed_cassette_is_one_line_and_exit_65(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    """A malformed cassette is a one-line CassetteError naming the file and the fault, exit 65
    (bad input data, told apart from a usage error)."""
    cassette = tmp_path / "bad.yaml"
    cassette.write_text(content + "\n")
    url = str(tmp_path / "c.duckdb")
    code, _, err = _run(capsys, "--journal", url, "import-cassette", str(cassette))
    assert code == cli.EXIT_DATA
    line = _error_line(err, "import-cassette", "CassetteError")
    assert "bad.yaml" in line and expected in line
    code, data = _json(capsys, "--journal", url, "import-cassette", str(cassette))
    assert code == cli.EXIT_DATA and data["error"] == "CassetteError"
    assert expected in data["message"] and "\n" not in data["message"]


@pytest.mark.parametrize(
    "query",
    [
        "DROP TABLE runs",
        "DELETE FROM frames",
        "UPDATE runs SET status = 'failed'",
        "INSERT INTO runs (run_id) VALUES ('x')",
        "CREATE TABLE t (a INT)",
        "ALTER TABLE runs ADD COLUMN x INT",
        "SELECT 1; DROP TABLE frames",
    ],
)
def test_sql_refuses_statements_that_change_data(
    journal_url: str, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    """sql refuses a statement that is not read-only with one line and exit 2, JSON too."""
    code, out, err = _run(capsys, "--journal", journal_url, "sql", query)
    assert code == cli.EXIT_USAGE and out == ""
    assert "read-only queries only" in _error_line(err, "sql", "ReadOnlyError")
    code, data = _json(capsys, "--journal", journal_url, "sql", query)
    assert code == cli.EXIT_USAGE and data["error"] == "ReadOnlyError"
    code, data = _json(capsys, "--journal", journal_url, "sql", "SELECT count(*) AS n FROM runs")
    assert code == 0 and data["rows"] == [{"n": 2}]


def test_sql_error_names_no_private_class(
    journal_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A query DuckDB rejects is one line named QueryError (never _QueryError), exit 2."""
    for query in ("SELECT nope FROM nowhere", "SELEC 1", ""):
        code, _, err = _run(capsys, "--journal", journal_url, "sql", query)
        assert code == cli.EXIT_USAGE and "_QueryError" not in err
        _error_line(err, "sql", "QueryError")
    code, data = _json(capsys, "--journal", journal_url, "sql", "SELECT nope FROM nowhere")
    assert code == cli.EXIT_USAGE and data["error"] == "QueryError"
    assert data["message"].startswith("query failed: Catalog Error")


def test_show_measures_model_steps_from_their_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model step's duration runs from the call's start, not from when its frames were written."""
    url = str(tmp_path / "dur.duckdb")
    journal = redrive.open_journal(url)

    @redrive.model
    def ask(prompt: str) -> str:
        return prompt.upper()

    with redrive.run(journal, "dur"):
        ask("hi")
    frames = list(journal.frames("dur"))
    journal.close()
    request = next(f for f in frames if f.kind == "model_request")
    response = next(f for f in frames if f.kind == "model_response")
    started = request.data()["started_at"]
    assert started <= request.at
    code, data = _json(capsys, "--journal", url, "show", "dur")
    assert code == 0
    assert data["steps"][0]["duration_ms"] == round((response.at - started) * 1000, 3)


def test_show_step_statuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """show tells a recorded value, a tool error and a tool left in flight by a crash apart."""
    url = str(tmp_path / "statuses.duckdb")
    journal = redrive.open_journal(url)

    @redrive.tool(read_only=True)
    def lookup(order: str) -> str:
        raise RuntimeError(f"no order {order}")

    @redrive.tool
    def charge(amount: int) -> str:
        raise SystemExit(3)  # the worker dies inside the body: the step stays in flight

    with pytest.raises(SystemExit), redrive.run(journal, "crashed"):
        token = redrive.uuid4()
        with pytest.raises(RuntimeError):
            lookup("A-1")
        charge(5)
    journal.close()
    code, data = _json(capsys, "--journal", url, "show", "crashed")
    assert code == 0 and data["run"]["status"] == "running" and "end" not in data["info"]
    value, error, in_flight = data["steps"]
    assert (value["kind"], value["status"], value["duration_ms"]) == ("value", "done", 0.0)
    assert value["result"] == str(token)
    assert (error["name"], error["status"]) == ("lookup", "error")
    assert error["error"] == "builtins.RuntimeError: no order A-1" and "result" not in error
    assert (in_flight["name"], in_flight["status"], in_flight["duration_ms"]) == (
        "charge",
        "in flight",
        None,
    )
    assert in_flight["args"] == {"amount": 5} and "result" not in in_flight
    code, out, _ = _run(capsys, "--journal", url, "show", "crashed")
    assert code == 0 and "in flight" in out and "RuntimeError: no order A-1" in out
    assert '{"amount": 5}' in out  # arguments as one line of JSON
    assert "no run_end: the run is unfinished (it may be resumed)" in out
