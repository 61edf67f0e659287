"""``redrive sql``: ``frames.data`` is the full payload, prefix deltas resolved."""

from __future__ import annotations

import json
from pathlib import Path

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
