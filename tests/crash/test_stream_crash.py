"""A streamed model response cut off by a real SIGKILL is not a finished step (issue 3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..sdkserver import Reply, serve

pytest.importorskip("openai")
pytestmark = pytest.mark.crash


def _chunk(delta: dict[str, object], finish: str | None = None) -> str:
    data = {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n"


STREAM = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "book_table", "arguments": ""},
                }
            ]
        }
    ),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"guests":'}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 4}"}}]}),
    _chunk({}, finish="tool_calls"),
    "data: [DONE]\n\n",
]

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    import openai
    import redrive

    url, journal_path, log_path = sys.argv[1:4]
    kill_after = int(sys.argv[4])

    @redrive.tool
    def book_table(guests: int) -> str:
        with open(log_path, "a") as f:
            f.write(f"booked {guests}\\n")
        return "booked"

    client = redrive.wrap(openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0))
    journal = redrive.open_journal(journal_path)
    with redrive.run(journal, "stream:1") as run:
        seen = 0
        args = ""
        for chunk in client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "table for 4"}], stream=True
        ):
            seen += 1
            if seen == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    args += call.function.arguments or ""
        run.finish(book_table(**json.loads(args)))
    print(json.dumps({"output": run.output, "replayed": run.replayed_steps,
                      "live": run.live_steps}))
    """
)


def test_stream_killed_midway_is_requested_again_then_replayed(tmp_path: Path) -> None:
    """Killed mid-stream: resume streams it again live, the tool runs once, replay is free."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    journal, log = tmp_path / "runs.duckdb", tmp_path / "effects.log"

    def child(url: str, kill_after: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), url, str(journal), str(log), str(kill_after)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    with serve() as server:
        server.add(Reply(chunks=STREAM), Reply(chunks=STREAM))
        first = child(server.url, 3)
        assert first.returncode == -signal.SIGKILL, first.stderr
        assert not log.exists()
        second = child(server.url, 0)
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout) == {"output": "booked", "replayed": 0, "live": 2}
        third = child(server.url, 0)
        assert third.returncode == 0, third.stderr
        assert json.loads(third.stdout) == {"output": "booked", "replayed": 2, "live": 0}
        assert len(server.requests) == 2  # the cut stream once, its retry once, replay none
    assert log.read_text().splitlines() == ["booked 4"]
    assert os.path.getsize(journal) > 0
