"""Every code block in the README runs, so the README cannot drift from the code.

Each block's language decides how it is checked: ``python`` blocks run (the
usage example against a local scripted OpenAI-compatible server, the pytest
plugin example under pytest, recorded once and then replayed with the model
broken), ``sh`` blocks are the two set-up commands (the demo runs; the test
command is the one CI runs), ``text`` blocks are output a real run prints.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import redrive
from tests.sdkserver import Reply, serve

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(README.read_text())]


def _block(lang: str, containing: str) -> str:
    found = [code for kind, code in _blocks() if kind == lang and containing in code]
    assert len(found) == 1, f"expected one {lang} block containing {containing!r}"
    return found[0]


def test_every_block_is_checked_here() -> None:
    """Each README block has a language this file checks, and none is left unchecked."""
    blocks = _blocks()
    assert blocks, "the README has no code block"
    checked = {
        ("sh", "scripts/demo\n"),
        ("sh", "scripts/test\n"),
        ("python", "def handle(job_id: str, email: str"),
        ("python", "@pytest.mark.redrive"),
        ("text", "diverged from its journal"),
        ("text", "diff=redrive"),
        ("text", "Run (_run)"),
        *((lang, code) for lang, code in _incident_blocks()),
        *((("python", f"redrive.integrations.{name} import")) for name in FRAMEWORK_BLOCKS),
    }
    for lang, code in blocks:
        assert any(lang == kind and needle in code for kind, needle in checked), (
            f"README block ({lang or 'no language'}) is not checked by {__file__}:\n{code}"
        )
    assert len(blocks) == len(checked)


#: README "Agent frameworks" block (by the module it imports) -> framework family
FRAMEWORK_BLOCKS = {"openai_agents": "agents", "pydantic_ai": "pydantic", "langchain": "langchain"}


@pytest.mark.parametrize("name", sorted(FRAMEWORK_BLOCKS))
def test_agent_framework_example_records_then_replays(name: str, tmp_path: Path) -> None:
    """Each framework block runs its agent live once (one email), then replays it offline."""
    from tests.integrations.conftest import need
    from tests.integrations.fakeapi import FINAL, chat

    need(FRAMEWORK_BLOCKS[name])
    code = _block("python", f"redrive.integrations.{name} import")
    stream = name != "langchain"
    with serve() as server:
        server.add(chat(False, stream), chat(True, stream))
        result = subprocess.run(
            [sys.executable, "-c", code],
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


def _incident_blocks() -> list[tuple[str, str]]:
    """The code blocks of the incident walkthrough, in order."""
    text = README.read_text()
    start = text.index("### Debugging a production incident")
    end = text.index("\n## ", start)
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text[start:end])]


def test_usage_example_records_then_replays(tmp_path: Path) -> None:
    """The usage example runs its loop live once, then replays it with no model call."""
    code = _block("python", "def handle(job_id: str, email: str")
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


def test_pytest_plugin_example_records_once_then_replays(tmp_path: Path) -> None:
    """The plugin example records its journal, then passes offline with the model broken."""
    code = _block("python", "@pytest.mark.redrive")
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


def test_divergence_text_is_what_a_divergence_prints() -> None:
    """The divergence shown in the README has the lines a real DivergenceError message has."""
    shown = _block("text", "diverged from its journal")
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
    assert shown.splitlines()[0].split(" at seq ")[0] == real.splitlines()[0].split(" at seq ")[0]
    assert "the tool step 'send_email' was called with different arguments." in real
    for line in shown.splitlines()[1:]:
        label = line.strip().split(":")[0]
        assert any(r.strip().startswith(label) for r in real.splitlines()), label
    assert "$.subject: 'Refund' -> 'Refund request'" in real
    assert "$.subject: 'Refund' -> 'Refund request'" in shown


def test_setup_commands_are_what_ci_runs_and_the_demo_passes(tmp_path: Path) -> None:
    """``scripts/test`` is what .ci/run runs; ``scripts/demo``'s job passes its own account."""
    assert _block("sh", "scripts/test\n").strip() == "scripts/test"
    assert re.search(r"^scripts/test\b", (ROOT / ".ci/run").read_text(), re.M)
    assert _block("sh", "scripts/demo\n").strip() == "scripts/demo"
    demo = (ROOT / "scripts/demo").read_text()
    assert "-m redrive.demo" in demo
    # the demo the script runs, without re-installing (the suite runs in the same venv)
    result = subprocess.run(
        [sys.executable, "-m", "redrive.demo", "--dir", str(tmp_path), "--json"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert json.loads(result.stdout)["exit_code"] == 0


def test_gitattributes_driver_is_the_textconv_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The .gitattributes block names ``redrive textconv``, printing an .rdj file's text form."""
    block = _block("text", "diff=redrive")
    assert "*.rdj diff=redrive" in block
    assert 'git config diff.redrive.textconv "redrive textconv"' in block
    from redrive import cli

    rdj = ROOT / "fixtures" / "runs" / "pass" / "refunded.rdj"
    assert cli.main(["textconv", str(rdj)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0])["run_id"] == "refund:A-100:refunded" and len(lines) == 15


MYAPP = """
import os

import redrive

PROMPT = os.environ.get("MYAPP_PROMPT", "Refund when the order allows it.")
ORDERS = {"A-1": {"order_id": "A-1", "amount": 30, "refundable": True}}


@redrive.model(name="model:support")
def support_model(messages):
    last = messages[-1]
    if last["role"] == "user":
        return {"tool": "lookup_order", "args": {"order_id": last["content"].split()[-1]}}
    if last["name"] == "lookup_order":
        if "ask a human" in messages[0]["content"]:
            return {"text": "A human will look at order A-1."}
        return {"tool": "issue_refund", "args": {"order_id": "A-1", "amount": 30}}
    return {"text": "Refunded 30 on A-1."}


@redrive.tool(read_only=True)
def lookup_order(order_id):
    return dict(ORDERS[order_id])


@redrive.tool(restart_safe=True)
def issue_refund(order_id, amount, idempotency_key):
    return {"refunded": amount}


TOOLS = {"lookup_order": lookup_order, "issue_refund": issue_refund}


@redrive.durable(os.environ.get("MYAPP_JOURNAL", "prod.duckdb"), run_id="support:{ticket_id}")
def handle_ticket(ticket_id, message):
    messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": message}]
    for _ in range(4):
        answer = support_model(messages)
        if "tool" not in answer:
            return {"reply": answer["text"]}
        result = TOOLS[answer["tool"]](**answer["args"])
        messages.append({"role": "tool", "name": answer["tool"], "content": result})
    return {"reply": "gave up"}
"""


def test_incident_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """Issue 17 #4: the README's five incident steps run exactly as written (sh lines through a
    ``redrive`` command, python blocks as scripts), production recorded with one prompt and the
    fix made with another: the fork replays the old steps by position (model='warn'), finishes,
    re-runs cleanly, and ends as a fixture that ``redrive check`` passes."""
    blocks = _incident_blocks()
    assert [lang for lang, _ in blocks] == ["sh", "sh", "python", "python", "sh", "sh"]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "agent.py").write_text(MYAPP)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "redrive"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m redrive.cli "$@"\n')
    shim.chmod(0o755)
    base = {
        **{k: v for k, v in os.environ.items() if k != "REDRIVE_JOURNAL"},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "PROD_JOURNAL": "prod.duckdb",
    }
    fixed = {**base, "MYAPP_PROMPT": "Refund when the order allows it; else ask a human."}

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

    # production: the old prompt refunds order A-1
    made = python(
        "from myapp.agent import handle_ticket; print(handle_ticket(4711, 'refund order A-1'))",
        base,
    )
    assert made.returncode == 0 and "Refunded 30" in made.stdout, made.stderr
    sh(blocks[0][1], base)  # 1. export, verify
    shown = sh(blocks[1][1], base)  # 2. show, import
    assert "issue_refund" in shown and '"refunded": 30' in shown
    replayed = python(blocks[2][1], base)  # 3. replay with the suspect tool live
    assert replayed.returncode == 0, replayed.stderr
    for _attempt in range(2):  # 4. the fork leaves nothing behind: it runs twice alike
        forked = python(blocks[3][1], fixed)
        assert forked.returncode == 0, forked.stderr
    diff = sh(blocks[4][1], fixed)
    assert "first differ at seq 5" in diff and "else ask a human." in diff
    checked = sh(blocks[5][1], fixed)  # 5. update, then the check passes
    assert "PASS" in checked


def test_design_drawing_names_the_parts_and_arrows_of_the_code() -> None:
    """The README's drawing of replay/: each module exists, each ``──>`` is an import."""
    import ast

    drawing = _block("text", "Run (_run)")
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
