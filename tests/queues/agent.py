"""The support job every queue worker of these tests runs, and the scripted model it talks to.

The job (``support:{job}``): the model asks for ``open_ticket`` (a side effect,
``restart_safe=False``), then for ``send_email`` (restart-safe: it dedupes on
its idempotency key), then answers. Three model calls per job, each answered by
:func:`respond` from the request's content, so the model server counts the
requests of each (job, turn) and a call paid twice shows.

Worker processes read their settings from the environment:

- ``REDRIVE_PG``, ``REDRIVE_SCHEMA``: the Postgres journal (one schema per test).
- ``REDRIVE_EFFECTS``: the side-effect log, outside the workers; each tool body
  appends ``JOB TOOL start|done PID KEY`` lines.
- ``REDRIVE_HOLDS``: a JSON file ``{job: [tool, seconds]}``: that tool's first body
  start for that job sleeps (a job longer than the visibility timeout, or a body the
  test kills).
- ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``: the scripted model server.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import openai

import redrive
from tests.sdkserver import Received, Reply

FINAL = "Ticket opened and the customer emailed."


# -- the outside world: a side-effect log ---------------------------------------------------


def _log(job: str, tool: str, event: str, key: str) -> None:
    line = f"{job} {tool} {event} {os.getpid()} {key}\n".encode()
    fd = os.open(os.environ["REDRIVE_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _hold(job: str, tool: str) -> None:
    """Sleep on the first body start of ``tool`` for ``job`` when ``REDRIVE_HOLDS`` says so."""
    holds = Path(os.environ.get("REDRIVE_HOLDS", "-"))
    name, seconds = (
        json.loads(holds.read_text()).get(job, [None, 0]) if holds.exists() else [None, 0]
    )
    if name != tool:
        return
    effects = read_effects(Path(os.environ["REDRIVE_EFFECTS"]))
    if len([e for e in effects if e[:3] == (job, tool, "start")]) <= 1:
        time.sleep(float(seconds))


def read_effects(path: Path) -> list[tuple[str, ...]]:
    """The side-effect log's lines as ``(job, tool, event, pid, key)`` tuples."""
    if not path.exists():
        return []
    return [tuple(line.split()) for line in path.read_text().splitlines() if line.strip()]


@redrive.tool(restart_safe=False)
def open_ticket(job: str, subject: str) -> dict[str, str]:
    """Open a support ticket (must happen once: not restart-safe)."""
    key = redrive.idempotency_key() or "-"
    _log(job, "open_ticket", "start", key)
    _hold(job, "open_ticket")
    _log(job, "open_ticket", "done", key)
    return {"ticket": f"T-{job}"}


@redrive.tool(restart_safe=True)
def send_email(job: str, to: str, idempotency_key: str) -> str:
    """Email the customer; the mail service dedupes on the idempotency key."""
    _log(job, "send_email", "start", idempotency_key)
    _hold(job, "send_email")
    _log(job, "send_email", "done", idempotency_key)
    return f"sent to {to}"


TOOLS: dict[str, Any] = {"open_ticket": open_ticket, "send_email": send_email}


# -- the scripted model ----------------------------------------------------------------------


def _tool_call(name: str, arguments: dict[str, str]) -> dict[str, Any]:
    call = {"id": f"call_{name}", "type": "function", "function": {"name": name}}
    call["function"]["arguments"] = json.dumps(arguments)  # type: ignore[index]
    return call


def turn_of(request: Received) -> tuple[str, int]:
    """The (job, turn) a chat-completions request is for: turn = tool results so far."""
    body = json.loads(request.body)
    messages = body["messages"]
    job = messages[0]["content"].split()[1].rstrip(":")
    return job, sum(1 for m in messages if m.get("role") == "tool")


def respond(request: Received) -> Reply:
    """The model's answer to a request: open a ticket, then email, then the final text."""
    job, turn = turn_of(request)
    if turn == 0:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [_tool_call("open_ticket", {"job": job, "subject": "damaged order"})],
        }
    elif turn == 1:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [_tool_call("send_email", {"job": job, "to": "ada@example.com"})],
        }
    else:
        message = {"role": "assistant", "content": FINAL}
    return Reply(
        body={
            "id": f"chatcmpl-{job}-{turn}",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if turn < 2 else "stop",
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
        }
    )


def model_calls(requests: list[Received]) -> Counter[tuple[str, int]]:
    """How many requests the model server received per (job, turn)."""
    return Counter(turn_of(r) for r in requests)


# -- the loop, both faces ----------------------------------------------------------------------

SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string"} for p in params},
                "required": list(params),
            },
        },
    }
    for name, params in (("open_ticket", ("job", "subject")), ("send_email", ("job", "to")))
]


@functools.cache
def journal() -> Any:
    """This worker process's journal (opened on first use: after a prefork pool forked)."""
    from redrive.storage.postgres import PostgresJournal

    return PostgresJournal(
        os.environ["REDRIVE_PG"], schema=os.environ["REDRIVE_SCHEMA"], max_size=4
    )


@functools.cache
def client() -> Any:
    return redrive.wrap(openai.OpenAI(max_retries=0))


@functools.cache
def aclient() -> Any:
    return redrive.wrap(openai.AsyncOpenAI(max_retries=0))


def _first(job: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"job {job}: ada@example.com writes: my order arrived damaged"}
    ]


def _act(message: Any, messages: list[dict[str, Any]]) -> None:
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        result = TOOLS[call.function.name](**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})


def agent(job: str) -> str:
    """The support loop (sync face)."""
    messages = _first(job)
    while True:
        reply = client().chat.completions.create(model="gpt-4o", messages=messages, tools=SCHEMAS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        _act(message, messages)


async def aagent(job: str) -> str:
    """The support loop (async face; the tools are plain sync tools)."""
    messages = _first(job)
    while True:
        reply = await aclient().chat.completions.create(
            model="gpt-4o", messages=messages, tools=SCHEMAS
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        _act(message, messages)
