"""``redrive sql``: ``frames.data`` is the full payload, prefix deltas resolved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive import cli
from redrive.storage.duckdb import DuckDBJournal


def test_sql_data_resolves_prefix_deltas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """frames.data of model requests stored as deltas is the full request as JSON."""
    path = str(tmp_path / "runs.duckdb")

    @redrive.model
    def chat(messages: list[dict[str, str]]) -> str:
        return f"reply {len(messages)}"

    journal = DuckDBJournal(path)
    with redrive.run(journal, "c") as run:
        messages = [{"role": "system", "content": "be brief"}]
        for i in range(4):
            messages.append({"role": "user", "content": f"question {i}"})
            messages.append({"role": "assistant", "content": chat(messages)})
        run.finish("ok")
    journal.close()
    code = cli.main(
        [
            "--journal",
            path,
            "--json",
            "sql",
            "SELECT data FROM frames WHERE kind = 'model_request' ORDER BY seq",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "PrefixRef" not in out
    rows = json.loads(out)["rows"]
    lengths = [len(json.loads(r["data"])["args"]["messages"]) for r in rows]
    assert lengths == [2, 4, 6, 8]


def _cli_json(*argv: str) -> tuple[int, Any]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["--json", *argv])
    return code, json.loads(out.getvalue())


def _journal_with_runs(path: str, runs: int = 3) -> None:
    @redrive.tool(read_only=True)
    def lookup(n: int) -> int:
        return n * 2

    journal = DuckDBJournal(path)
    for i in range(runs):
        with redrive.run(journal, f"r{i}") as run:
            run.finish(lookup(i))
    journal.close()


def test_sql_reads_the_journal_in_place_without_decoding_payloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query that does not read frames.data decodes no payload and copies no frame (issue 12
    #15: every query copied the whole journal first); the file is left byte for byte as it was."""
    import hashlib

    from redrive.cli import _sql

    path = str(tmp_path / "runs.duckdb")
    _journal_with_runs(path)
    before = hashlib.sha256(Path(path).read_bytes()).hexdigest()

    def no_decoding(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a payload was decoded for a query that does not read data")

    monkeypatch.setattr(_sql, "_frames_json", no_decoding)
    monkeypatch.setattr(_sql, "_load", no_decoding)  # the copying path is not taken
    code, data = _cli_json("--journal", path, "sql", "SELECT count(*) AS n FROM frames")
    assert code == 0 and data["rows"] == [{"n": 12}]
    code, data = _cli_json(
        "--journal", path, "sql", "SELECT run_id, status FROM runs ORDER BY run_id"
    )
    assert [r["status"] for r in data["rows"]] == ["succeeded"] * 3
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == before


def test_sql_sees_frames_still_in_the_log(tmp_path: Path) -> None:
    """Frames acknowledged but not yet checkpointed into the tables (a killed worker's last
    frames, in runs.duckdb.rdlog) are in the views too."""
    import subprocess
    import sys

    path = str(tmp_path / "runs.duckdb")
    script = (
        "import os, redrive\n"
        "from redrive.storage.duckdb import DuckDBJournal\n"
        f"j = DuckDBJournal({path!r})\n"
        "with redrive.run(j, 'done') as run:\n"
        "    run.finish(1)\n"
        "j.checkpoint()\n"
        "@redrive.tool\n"
        "def charge(n: int) -> int:\n"
        "    return n\n"
        "with redrive.run(j, 'logged') as run:\n"
        "    charge(7)\n"
        "    os._exit(0)\n"  # killed: the last frames are in the log only
    )
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", script], check=True, env={"PYTHONPATH": root})
    assert Path(path + ".rdlog").stat().st_size > 0
    code, data = _cli_json(
        "--journal", path, "sql", "SELECT run_id, count(*) AS n FROM frames GROUP BY 1 ORDER BY 1"
    )
    assert code == 0 and data["rows"] == [{"run_id": "done", "n": 2}, {"run_id": "logged", "n": 3}]
    code, data = _cli_json(
        "--journal",
        path,
        "sql",
        "SELECT data->>'$.args.n' AS n FROM frames WHERE kind = 'tool_start'",
    )
    assert data["rows"] == [{"n": "7"}]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM read_csv('{secret}')",
        "SELECT * FROM read_text('{secret}')",
        "SELECT * FROM read_parquet('https://example.invalid/x.parquet')",
        "SELECT * FROM glob('{dir}/*')",
    ],
)
def test_sql_cannot_reach_files_or_the_network(tmp_path: Path, query: str) -> None:
    """A SELECT cannot read local files or download anything: external access is disabled."""
    path = str(tmp_path / "runs.duckdb")
    _journal_with_runs(path, runs=1)
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    query = query.format(secret=secret, dir=tmp_path)
    code, data = _cli_json("--journal", path, "sql", query)
    assert code == cli.EXIT_USAGE and data["error"] == "QueryError"
    assert "hunter2" not in json.dumps(data)
    code, data = _cli_json(
        "--journal",
        path,
        "sql",
        "SELECT value FROM duckdb_settings() WHERE name IN "
        "('enable_external_access', 'autoload_known_extensions', 'lock_configuration') "
        "ORDER BY name",
    )
    assert [r["value"] for r in data["rows"]] == ["false", "false", "true"]
