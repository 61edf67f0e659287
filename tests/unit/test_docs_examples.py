"""The documentation's examples that need more than the generic check of their language.

Each test here is named by a claim in ``tests/docblocks.py`` and checks every
block the claim covers, on whichever page it appears (the README and the
site share the usage example and the divergence text): the usage example
against a scripted OpenAI-compatible server, the framework examples against
their real packages, the pytest plugin example under pytest, the incident
walkthrough as written, the design page's drawings against the code, the
scaling page's SQL on Postgres.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import redrive
from tests.docblocks import ROOT, Block, claimed
from tests.sdkserver import Reply, serve

EXAMPLES = "tests/unit/test_docs_examples.py"


def _claimed(test: str) -> list[Block]:
    found = claimed(f"{EXAMPLES}::{test}")
    assert found, f"no block is claimed by {test}"
    return found


def _ids(found: list[Block]) -> list[str]:
    return [b.where for b in found]


#: framework example (by the module it imports) -> framework family
FRAMEWORKS = {"openai_agents": "agents", "pydantic_ai": "pydantic", "langchain": "langchain"}
FRAMEWORK_BLOCKS = _claimed("test_agent_framework_example")


def _framework(block: Block) -> str:
    (name,) = re.findall(r"from redrive\.integrations\.(\w+) import", block.code)
    return name


def test_every_framework_has_an_example() -> None:
    """The frameworks page shows each framework once."""
    assert sorted(_framework(b) for b in FRAMEWORK_BLOCKS) == sorted(FRAMEWORKS)


@pytest.mark.parametrize("block", FRAMEWORK_BLOCKS, ids=_ids(FRAMEWORK_BLOCKS))
def test_agent_framework_example(block: Block, tmp_path: Path) -> None:
    """Each framework example runs its agent live once (one email), then replays it offline."""
    from tests.integrations.conftest import need
    from tests.integrations.fakeapi import FINAL, chat

    name = _framework(block)
    need(FRAMEWORKS[name])
    stream = name != "langchain"
    with serve() as server:
        server.add(chat(False, stream), chat(True, stream))
        result = subprocess.run(
            [sys.executable, "-c", block.code],
            cwd=tmp_path,
            env={
                **os.environ,
                "OPENAI_BASE_URL": server.url + "/v1",
                "OPENAI_API_KEY": "sk-readme",
                "PYTHONPATH": str(ROOT),
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        assert result.stdout.splitlines() == ["emailing ada@example.com", FINAL, FINAL]
        assert len(server.requests) == 2  # the second handle() replayed both model calls


def _tool_call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, object]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _chat(message: dict[str, object]) -> dict[str, object]:
    return {
        "id": "chatcmpl-r",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


USAGE_BLOCKS = _claimed("test_usage_example")


def test_the_usage_example_is_one_text() -> None:
    """The README and the crash-resume tutorial show the same usage example."""
    assert {b.page for b in USAGE_BLOCKS} >= {"README.md", "docs/tutorials/crash-resume.md"}
    assert len({b.code for b in USAGE_BLOCKS}) == 1


def test_usage_example(tmp_path: Path) -> None:
    """The usage example runs its loop live once, then replays it with no model call."""
    code = USAGE_BLOCKS[0].code
    replies = [
        _chat(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_tool_call("c1", "lookup_customer", {"email": "ada@example.com"})],
            }
        ),
        _chat(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _tool_call("c2", "open_ticket", {"customer_id": "C-7", "subject": "Damaged"}),
                    _tool_call("c3", "send_email", {"to": "ada@example.com", "body": "Sorry"}),
                ],
            }
        ),
        _chat({"role": "assistant", "content": "Ticket T-1 opened; Ada was emailed."}),
    ]
    with serve() as server:
        server.add(*(Reply(body=body) for body in replies))
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.url + "/v1",
            "OPENAI_API_KEY": "sk-readme",
            "PYTHONPATH": str(ROOT),
        }
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["Ticket T-1 opened; Ada was emailed."] * 2
        assert len(server.requests) == 3  # the second handle() replayed all three calls
        assert "sk-readme" not in (tmp_path / "runs.duckdb").read_bytes().decode("latin-1")


def test_pytest_plugin_example(tmp_path: Path) -> None:
    """The plugin example records its journal, then passes offline with the model broken."""
    (block,) = _claimed("test_pytest_plugin_example")
    code = block.code
    test_file = tmp_path / "test_refunds.py"
    test_file.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)]
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    journal = tmp_path / "journals" / "test_refunds" / "test_refund.rdj"
    assert journal.exists()
    assert (tmp_path / "journals" / "test_refunds" / "test_refund_saves_the_order.rdj").exists()
    # replay: the model and the tool now fail if called; the recorded run still passes
    test_file.write_text(
        code.replace('return "refund"', 'raise RuntimeError("model called")').replace(
            'return {"refunded": order_id}', 'raise RuntimeError("tool called")'
        )
    )
    env["CI"] = "true"
    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "2 passed" in second.stdout


def test_divergence_text() -> None:
    """The divergence shown (README, resume contract) has the lines a real DivergenceError has."""
    journal = redrive.open_journal(":memory:")

    @redrive.tool(read_only=True)
    def lookup_customer(email: str) -> str:
        return "C-7"

    @redrive.tool(restart_safe=True)
    def send_email(to: str, subject: str) -> str:
        return "sent"

    def loop(subject: str) -> None:
        with redrive.run(journal, "support:42"):
            lookup_customer("ada@example.com")
            send_email("ada@example.com", subject)

    loop("Refund")
    with pytest.raises(redrive.DivergenceError) as caught:
        loop("Refund request")
    real = str(caught.value)
    assert "the tool step 'send_email' was called with different arguments." in real
    assert "$.subject: 'Refund' -> 'Refund request'" in real
    for block in _claimed("test_divergence_text"):
        shown = block.code
        first = shown.splitlines()[0].split(" at seq ")[0]
        assert first == real.splitlines()[0].split(" at seq ")[0], block.where
        for line in shown.splitlines()[1:]:
            label = line.strip().split(":")[0]
            assert any(r.strip().startswith(label) for r in real.splitlines()), label
        assert "$.subject: 'Refund' -> 'Refund request'" in shown


def test_gitattributes_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The .gitattributes block names ``redrive textconv``, printing an .rdj file's text form."""
    (block,) = _claimed("test_gitattributes_block")
    assert "*.rdj diff=redrive" in block.code
    assert 'git config diff.redrive.textconv "redrive textconv"' in block.code
    from redrive import cli

    rdj = ROOT / "fixtures" / "runs" / "pass" / "refunded.rdj"
    assert cli.main(["textconv", str(rdj)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0])["run_id"] == "refund:A-100:refunded" and len(lines) == 15


def test_incident_walkthrough(tmp_path: Path) -> None:
    """Issue 17 #4: the incident tutorial's five steps run exactly as written (its app written
    where its title says, sh lines through a ``redrive`` command, python blocks as scripts),
    production recorded with the old prompt and the fix made by the page's edit: the fork
    replays the old steps by position (model='warn'), finishes, re-runs cleanly, and ends as a
    fixture that ``redrive check`` passes."""
    claimed = _claimed("test_incident_walkthrough")
    app, steps = claimed[0], [(b.lang, b.code) for b in claimed[1:]]
    assert app.title == "myapp/agent.py"
    production, steps = steps[0], steps[1:]
    assert production[0] == "sh" and "PROD_JOURNAL=prod.duckdb" in production[1]
    assert [lang for lang, _ in steps] == ["sh", "sh", "python", "sh", "python", "sh", "sh"]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / app.title).write_text(app.code)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, command in {"redrive": "-m redrive.cli ", "python": ""}.items():
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {command}"$@"\n')
        shim.chmod(0o755)
    base = {
        **{k: v for k, v in os.environ.items() if k != "REDRIVE_JOURNAL"},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "PROD_JOURNAL": "prod.duckdb",
    }

    def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    def sh(block: str, env: dict[str, str]) -> str:
        out = ""
        for line in block.strip().splitlines():
            done = subprocess.run(
                ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            expected = 1 if line.startswith("redrive diff") else 0
            assert done.returncode == expected, f"{line}\n{done.stdout}\n{done.stderr}"
            out += done.stdout
        return out

    # production, as the page makes it: the old prompt refunds order A-1
    assert "Refunded 30" in sh(production[1], base)
    sh(steps[0][1], base)  # 1. export, verify
    shown = sh(steps[1][1], base)  # 2. show, import
    assert "issue_refund" in shown and '"refunded": 30' in shown
    replayed = python(steps[2][1], base)  # 3. replay with the suspect tool live
    assert replayed.returncode == 0, replayed.stderr
    sh(steps[3][1], base)  # 4. fix the prompt
    assert "allows it; else ask a human." in (tmp_path / app.title).read_text()
    for _attempt in range(2):  # the fork leaves nothing behind: it runs twice alike
        forked = python(steps[4][1], base)
        assert forked.returncode == 0, forked.stderr
    diff = sh(steps[5][1], base)
    assert "first differ at seq 5" in diff and "else ask a human." in diff
    checked = sh(steps[6][1], base)  # 5. update, then the check passes
    assert "PASS" in checked


def test_design_drawing() -> None:
    """The design page's drawing of replay/: each module exists, each ``──>`` is an import."""
    (block,) = _claimed("test_design_drawing")
    drawing = block.code
    replay = ROOT / "redrive" / "replay"
    named = re.findall(r"\((_\w+)(?:[,)])", drawing)
    assert len(named) >= 12, named
    for module in named:
        assert (replay / f"{module}.py").is_file(), f"the drawing names a missing module {module}"
    for line in drawing.splitlines():
        parts = re.findall(r"\((_\w+)\)", line)
        if "──>" not in line:
            continue
        for upper, lower in itertools.pairwise(parts):
            tree = ast.parse((replay / f"{upper}.py").read_text())
            imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
            assert lower in imported, f"{upper} does not import {lower}, as the drawing says"
    held = {name for name in vars(redrive.replay.Run(redrive.open_journal(":memory:"), "r"))}
    assert {"_block", "_tools", "_models", "_values", "_flows", "_state"} <= held


def test_design_rooms_and_layout() -> None:
    """The design page's data flow names the rooms that exist, and its layout the directories
    and modules of the repository."""
    for block in _claimed("test_design_rooms_and_layout"):
        rooms = re.findall(r"\b(recorders|replay|storage|cli)/", block.code)
        assert {"recorders", "replay", "storage"} <= set(rooms), block.where
        for room in rooms:
            assert (ROOT / "redrive" / room / "__init__.py").is_file(), (block.where, room)
        if "tests/" in block.code:  # the layout: each top-level directory and named module
            for directory in re.findall(r"^(\w+)/", block.code, re.M):
                assert (ROOT / directory).is_dir(), (block.where, directory)
            for module in re.findall(r"\b(\w+\.py)\b", block.code):
                assert (ROOT / "redrive" / module).is_file(), (block.where, module)


def test_design_lists_every_command() -> None:
    """The design page's public API names every command of the ``redrive`` parser."""
    import argparse

    from redrive.cli._main import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = (ROOT / "docs" / "explanation" / "design.md").read_text()
    listed = text.split("- CLI `redrive`:", 1)[1].split("\n- ", 1)[0]
    assert set(re.findall(r"`([a-z-]+)`", listed)) == set(sub.choices)


@pytest.mark.postgres
def test_scaling_sql(pg_url: str, pg_schema: str) -> None:
    """The scaling page's SQL is what the Postgres journal does: frames hash-partitioned by
    run_id with the partitions shown, and the retention deletes remove a finished run."""
    import psycopg

    from redrive.storage.postgres import PostgresJournal

    partitioned, retention = _claimed("test_scaling_sql")
    journal = PostgresJournal(pg_url, schema=pg_schema, partitions=8)
    try:
        with redrive.run(journal, "old:1") as run:
            run.finish("done")
        with pytest.raises(ConnectionError), redrive.run(journal, "kept:1"):
            raise ConnectionError("the worker lost its network: the run stays resumable")
    finally:
        journal.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{pg_schema}"')
        key = conn.execute("SELECT pg_get_partkeydef('redrive_frames'::regclass)").fetchone()
        assert key is not None and f"PARTITION BY {key[0]}" in partitioned.code
        bound = conn.execute(
            "SELECT pg_get_expr(relpartbound, oid) FROM pg_class "
            "WHERE relname = 'redrive_frames_p0'"
        ).fetchone()
        assert bound is not None and bound[0].upper() in partitioned.code.upper()
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT run_id FROM redrive_runs WHERE status IN "
                "('succeeded','failed','cancelled') LIMIT 10000"
            )
        ]
        assert ids == ["old:1"]
        for statement in retention.code.strip().splitlines():
            conn.execute(statement.split("--")[0].replace(":ids", "%(ids)s"), {"ids": ids})
        left = [row[0] for row in conn.execute("SELECT DISTINCT run_id FROM redrive_frames")]
        assert left == ["kept:1"]
        assert [r[0] for r in conn.execute("SELECT run_id FROM redrive_runs")] == ["kept:1"]
