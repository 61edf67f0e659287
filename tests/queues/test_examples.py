"""The queue examples run as their docstrings say, and docs/queues.md shows what they run.

Each example's worker runs as a real process against the real broker (Redis
database 9 for Celery, flushed first; a Postgres schema of its own for
procrastinate and the journal) and the scripted OpenAI-compatible server; the
job is sent twice: the first answer is live (two model calls, one email), the
second is the finished run replayed (no model call, no email).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from redrive.storage.postgres import PostgresJournal
from tests.integrations.fakeapi import FINAL, chat
from tests.queues.bench import ROOT, bench

pytestmark = [pytest.mark.crash, pytest.mark.postgres]

DOCS = ROOT / "docs" / "queues.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
EXAMPLES = {"celery": "celery_queue.py", "procrastinate": "procrastinate_queue.py"}


def _send_twice(example: Path, env: dict[str, str], emails: Any, requests: Any) -> None:
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(example), "send", "42"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.strip().splitlines()[-1])
        assert emails() == 1
    assert outputs == [FINAL, FINAL]
    assert requests() == 2  # the second delivery replayed: no model call


@pytest.mark.parametrize("queue", sorted(EXAMPLES))
def test_queue_example_answers_then_replays(
    queue: str, tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    """The example's worker answers job 42 (two model calls, one email); sent again, the job's
    finished run replays: the same answer, no model call, no email."""
    example = ROOT / "examples" / EXAMPLES[queue]
    env = {
        "REDRIVE_JOURNAL": f"{pg_url}?schema={pg_schema}",
        "REDIS_URL": "redis://127.0.0.1:6379/9",
        "DATABASE_URL": f"{pg_url}?options=-c%20search_path%3D{pg_schema}",
    }
    if queue == "celery":
        redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    with bench(tmp_path, env) as made:
        made.server.respond = None
        made.server.add(chat(False), chat(True))
        if queue == "procrastinate":
            PostgresJournal(pg_url, schema=pg_schema, max_size=1).close()  # creates the schema
            schema = subprocess.run(
                [sys.executable, str(example), "schema"], cwd=ROOT, env=made.env, check=False
            )
            assert schema.returncode == 0
        made.start([str(example), "worker"], "worker")

        def emails() -> int:
            return made.logs().count("[email to ada@example.com")

        _send_twice(example, made.env, emails, lambda: len(made.server.requests))


def test_every_docs_block_is_checked_here() -> None:
    """Each code block of docs/queues.md is part of an example this file runs, or the operator
    commands that the next test runs."""
    blocks = [(m.group(1), m.group(2)) for m in FENCE.finditer(DOCS.read_text())]
    sources = {name: (ROOT / "examples" / file).read_text() for name, file in EXAMPLES.items()}
    assert len(blocks) >= 4
    for lang, code in blocks:
        if lang == "python":
            assert any(code in source for source in sources.values()), (
                f"this docs/queues.md block is not in an example under examples/:\n{code}"
            )
        else:
            assert lang == "sh" and code == OPERATOR, code


#: the operator's commands of docs/queues.md (the sh block), run by the next test
OPERATOR = """\
redrive --journal runs.duckdb runs --status blocked
redrive --journal runs.duckdb show support:42
redrive --journal runs.duckdb resolve support:42 1 --done '{"ticket": "T-42"}' \\
    --by ops --reason "T-42 is in the ticket system"
"""

#: a worker killed inside a side effect: the run support:42 blocked at seq 1
_KILLED = """
import os, signal, redrive

@redrive.tool
def open_ticket(subject: str) -> dict:
    os.kill(os.getpid(), signal.SIGKILL)

with redrive.run("runs.duckdb", "support:42", input={"text": "damaged"}) as run:
    open_ticket("damaged")
"""

_RESUMED = """
import redrive

@redrive.tool
def open_ticket(subject: str) -> dict:
    raise AssertionError("the ticket was opened again")

with redrive.run("runs.duckdb", "support:42", input={"text": "damaged"}) as run:
    print(run.finish(open_ticket("damaged")))
"""


def test_docs_operator_commands_list_show_and_resolve_a_parked_run(tmp_path: Path) -> None:
    """The docs' commands, run as written: `runs --status blocked` lists the run whose worker
    died inside open_ticket, `resolve ... --done` settles it, and the next delivery finishes
    the run with the resolved result, without opening the ticket again."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run([sys.executable, "-c", _KILLED], cwd=tmp_path, env=env, check=False)
    assert killed.returncode == -9
    redrive_cli = Path(sys.executable).with_name("redrive")
    script = OPERATOR.replace("redrive ", f"{redrive_cli} ")
    listed = subprocess.run(
        ["bash", "-c", script.splitlines()[0]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0 and "support:42" in listed.stdout, listed.stderr
    assert "blocked at seq 1" in listed.stdout
    done = subprocess.run(
        ["bash", "-ec", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    resumed = subprocess.run(
        [sys.executable, "-c", _RESUMED], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "{'ticket': 'T-42'}"
