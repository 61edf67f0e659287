"""Exports and shared pages refuse secrets (issue 25, item 5): export (.rdj, JSON Lines,
OTLP/JSON) and view scan with the journal writer's detector and name the run, seq and path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive._sharecheck import find_secrets
from redrive.cli._shares import ALLOW_HELP

#: What the tool hands back in the run being recorded.
_RESULT: dict[str, Any] = {}


@redrive.tool(read_only=True)
def lookup(order: str) -> dict[str, Any]:
    """Look an order up (whatever the run being recorded says it holds)."""
    return {"order": order, **_RESULT}


def _record(url: str, run_id: str, result: dict[str, Any], **options: Any) -> None:
    _RESULT.clear()
    _RESULT.update(result)
    journal = redrive.open_journal(url)
    with redrive.run(journal, run_id, **options) as run:
        run.finish(lookup("A-1")["order"])
    journal.close()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_export_and_view_refuse_then_allow(
    journal_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A handed-back credential field and a secret kept verbatim by keep=: every export form
    and the page refuse (exit 65) naming run, seq and path, write nothing; --allow-secrets
    writes; a clean run exports without it."""
    secret = "sk-proj-" + "a1" * 12
    _record(
        journal_url,
        "leaky",
        {"password": "hunter2", "note": f"key {secret}"},
        keep=("tool:$..note",),
    )
    _record(journal_url, "clean", {"status": "shipped"})
    base = ["--journal", journal_url]
    for form in (["-o", "x.rdj"], ["-o", "x.rdj.jsonl"], ["--otlp-json", "x.json"]):
        target = tmp_path / form[1]
        code, text = _cli(capsys, *base, "export", "leaky", form[0], str(target))
        assert code == cli.EXIT_DATA, text
        assert "SecretsFound" in text and "run 'leaky'" in text
        assert "seq 2 (tool_done lookup) $.result.password (credential field)" in text
        assert "$.result.note (secret-looking text)" in text and "--allow-secrets" in text
        assert secret not in text and not target.exists()
        code, text = _cli(capsys, *base, "export", "leaky", form[0], str(target), "--allow-secrets")
        assert code == cli.EXIT_OK, text
        assert target.exists()
    page = tmp_path / "leaky.html"
    code, text = _cli(capsys, *base, "view", "leaky", "-o", str(page))
    assert code == cli.EXIT_DATA and "$.result.password" in text and not page.exists()
    code, text = _cli(capsys, *base, "view", "clean", "leaky", "-o", str(page))
    assert code == cli.EXIT_DATA and not page.exists()
    assert _cli(capsys, *base, "view", "leaky", "-o", str(page), "--allow-secrets")[0] == 0
    assert page.read_text().startswith("<!doctype html>")
    code, text = _cli(capsys, *base, "export", "clean", "-o", str(tmp_path / "clean.rdj"))
    assert code == cli.EXIT_OK, text
    code, text = _cli(capsys, "--json", *base, "export", "leaky", "-o", str(tmp_path / "j.rdj"))
    assert code == cli.EXIT_DATA and json.loads(text)["error"] == "SecretsFound"


def test_the_flag_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    """`export --help` and `view --help` describe --allow-secrets and the refusal."""
    for command in ("export", "view"):
        assert cli.main([command, "--help"]) == cli.EXIT_OK
        text = " ".join(capsys.readouterr().out.split())
        assert "--allow-secrets" in text and " ".join(ALLOW_HELP.split()) in text


SECRETS = st.sampled_from(
    [
        "sk-proj-" + "a1" * 12,
        "sk-ant-api03-" + "b2" * 12,
        "ghp_" + "c3" * 18,
        "AKIAABCDEFGHIJKLMNOP",
    ]
)
FIELDS = st.sampled_from(["password", "api_key", "client_secret", "db_password"])


@given(
    secret=SECRETS,
    field=FIELDS,
    depth=st.integers(0, 3),
    in_list=st.booleans(),
    keep=st.booleans(),
)
def test_a_secret_anywhere_in_what_a_step_handed_back_is_found(
    secret: str, field: str, depth: int, in_list: bool, keep: bool
) -> None:
    """Wherever a credential field or secret-looking text sits in a tool's result (kept
    verbatim by keep=, or as a handed-back value keeps it), find_secrets names its seq and path."""
    value: Any = {field: "hunter2-" + field, "text": f"the key is {secret}"}
    parts: list[str] = []
    for level in range(depth):  # each wrapper goes around the last: its step comes first
        value = [value] if in_list and level == 0 else {"inner": value}
        parts.insert(0, "[0]" if in_list and level == 0 else ".inner")
    path = "$.result" + "".join(parts)
    journal = redrive.open_journal(":memory:")

    @redrive.tool(read_only=True)
    def fetch() -> Any:
        return value

    options: dict[str, Any] = {"keep": ("tool:$..text",)} if keep else {}
    with redrive.run(journal, "r", **options) as run:
        fetch()
        run.finish("ok")
    found = {(s.seq, s.path, s.why) for s in find_secrets("r", journal.frames("r"))}
    assert (2, f"{path}.{field}", "credential field") in found
    assert ((2, f"{path}.text", "secret-looking text") in found) is keep


def test_a_tool_named_like_a_credential_is_not_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fingerprint of ``run_start`` names the process's tools and holds digests; a tool
    called ``get_credentials`` registered anywhere in the process made every export refuse
    (found when another test module registered one). The writer keeps the fingerprint as
    it is, and so does the share check."""

    @redrive.tool(read_only=True)
    def get_credentials(service: str) -> str:
        return f"handle for {service}"

    url = str(tmp_path / "runs.duckdb")
    _record(url, "plain", {"status": "shipped"})
    code, out = _cli(capsys, "--journal", url, "export", "plain", "-o", str(tmp_path / "p.rdj"))
    assert code == 0, out
