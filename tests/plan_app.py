"""A small application for resume-plan and pause tests: a loop of steps chosen by its input.

``handle(ops)`` (sync) and ``ahandle(ops)`` (async) run one step per item of
``ops``: ``"ask"`` (a model call whose system prompt is :data:`PROMPT`),
``"safe"`` (a restart-safe tool), ``"unsafe"`` (a tool that is not), ``"rec"``
(a tool with a ``recover()`` hook that reads the side-effect log), and
``"approve"`` (an approval). Every tool body and every ``recover()`` call
appends a line to the file named by ``$PLAN_APP_LOG`` (outside the process),
so a test reads what ran. ``"limited"`` raises a rate-limit error (HTTP 429)
from its model call while ``$PLAN_APP_LIMITED`` names an existing file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import redrive

#: The model step's system prompt (a test edits it to make a code change).
PROMPT = "v1"


def _log(line: str) -> None:
    with Path(os.environ["PLAN_APP_LOG"]).open("a") as fh:
        fh.write(line + "\n")


def effects() -> list[str]:
    """The lines the tools and recover() hooks wrote."""
    path = Path(os.environ["PLAN_APP_LOG"])
    return path.read_text().splitlines() if path.exists() else []


class RateLimited(Exception):
    """What a provider SDK raises for HTTP 429 (its status and headers, as the SDKs carry them)."""

    status_code = 429

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.headers = {"retry-after": "0"}


@redrive.model
def ask(system: str, text: str) -> str:
    limited = os.environ.get("PLAN_APP_LIMITED")
    if text.startswith("limited") and limited and Path(limited).exists():
        raise RateLimited("Error code: 429 - rate limit reached for requests")
    return f"{system}:{text}"


@redrive.tool(restart_safe=True)
def safe(i: int) -> str:
    """A restart-safe tool."""
    _log(f"safe {i}")
    return f"safe {i}"


@redrive.tool(restart_safe=False)
def unsafe(i: int) -> str:
    """A side effect that must not repeat."""
    _log(f"unsafe {i}")
    return f"unsafe {i}"


def _recover(args: dict[str, Any], key: str) -> redrive.Recovery:
    _log(f"recover {args['i']}")
    done = f"rec {args['i']}" in effects()
    return redrive.Recovery.done(f"rec {args['i']}") if done else redrive.Recovery.not_done()


@redrive.tool(restart_safe=False, recover=_recover)
def rec(i: int) -> str:
    """A side effect whose outcome its recover() hook can read back."""
    _log(f"rec {i}")
    return f"rec {i}"


def _step(i: int, op: str) -> Any:
    if op == "ask":
        return ask(system=PROMPT, text=str(i))
    if op == "limited":
        return ask(system=PROMPT, text=f"limited {i}")
    if op == "approve":
        return redrive.await_approval(f"ok{i}", {"i": i}).approved
    return {"safe": safe, "unsafe": unsafe, "rec": rec}[op](i)


@redrive.durable("unused.duckdb", run_id=lambda ops, name: f"plan:{name}")
def handle(ops: list[str], name: str) -> list[Any]:
    """The sync face: one step per op."""
    return [_step(i, op) for i, op in enumerate(ops)]


@redrive.durable("unused.duckdb", run_id=lambda ops, name: f"plan:{name}")
async def ahandle(ops: list[str], name: str) -> list[Any]:
    """The async face: the same steps, from a coroutine."""
    return [_step(i, op) for i, op in enumerate(ops)]
