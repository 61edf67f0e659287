"""Each example under examples/ runs as its docstring says: live once, then replayed.

The example is run twice in a fresh directory against a scripted
OpenAI/Anthropic-compatible server: the first run calls the model twice and
sends the email once; the second replays its journal (no request, no email).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, anthropic, chat, responses, serve
from tests.sdkserver import Reply

ROOT = Path(__file__).resolve().parents[2]

#: example file, extra arguments, framework family, its two scripted model turns
EXAMPLES = {
    "openai_agents": ("openai_agents_support.py", [], "agents", responses, True),
    "pydantic_ai": ("pydantic_ai_support.py", [], "pydantic", chat, True),
    "pydantic_ai_anthropic": (
        "pydantic_ai_support.py",
        ["--anthropic"],
        "pydantic",
        anthropic,
        True,
    ),
    "langgraph": ("langgraph_support.py", [], "langchain", chat, False),
    "litellm": ("litellm_support.py", [], "litellm", chat, True),
}


def run_twice(path: Path, args: list[str], replies: list[Reply], tmp: Path) -> None:
    """Run ``path`` twice against the scripted ``replies``; check live then replayed."""
    with serve() as server:
        server.add(*replies)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "OPENAI_BASE_URL": server.url + "/v1",
            "OPENAI_API_KEY": "sk-example",
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-example",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        outputs, emails = [], []
        for _ in range(2):
            proc = subprocess.run(
                [sys.executable, str(path), "42", *args],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr[-4000:]
            outputs.append(proc.stdout.strip().splitlines()[-1])
            emails.append(proc.stderr.count("[email to ada@example.com"))
        assert outputs == [FINAL, FINAL]
        assert emails == [1, 0]  # the replay sent no email
        assert len(server.requests) == 2  # and made no model call


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_records_then_replays(name: str, tmp_path: Path) -> None:
    """The example answers, sends one email, and replays with no request and no email."""
    file, args, family, build, stream = EXAMPLES[name]
    need(family)
    run_twice(ROOT / "examples" / file, args, [build(False, stream), build(True, stream)], tmp_path)
