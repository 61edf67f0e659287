"""The demo's worker process: one support-desk job, run durably with redrive.

Usage::

    python -m redrive.demo.worker --journal runs.duckdb --log effects.jsonl \\
        --base-url http://127.0.0.1:PORT/v1 --run-id support:job-4417 \\
        [--kill-at POINT | --pause-at POINT] [--drift]

It runs :func:`redrive.agent.run_agent` inside ``redrive.run(journal, run_id)``
on the DuckDB journal: started the first time, resumed (replayed up to the
first unfinished step, then live) every time after. At the end it prints one
JSON line on stdout: ``{"status", "error", "final", "replayed", "live",
"steps"}`` where ``steps`` lists the run's steps as the journal has them,
each marked ``replayed`` (answered from the journal in this process),
``live`` (executed in this process), ``rerun`` (in flight at the crash and
run again because restart-safe) or ``blocked`` (in flight and not restart-safe).

Crash points (for the demo and the crash tests), ``--kill-at`` or ``$REDRIVE_KILL_AT``:
``BOUNDARY[:NAME][#N]``, a boundary of :func:`redrive.replay.set_boundary_hook`
(``model_before``, ``model_after``, ``tool_claimed``, ``tool_body_done``,
``tool_recorded``), optionally only for the step ``NAME``, at its ``N``-th
occurrence (default 1). At that point the worker SIGKILLs itself;
``--pause-at`` instead prints ``{"paused": {...}}`` and waits to be killed.

``--drift`` runs a changed version of the code: the ticket subject gets a
priority prefix, so a strict replay of a finished run fails with a
``DivergenceError`` at the ``open_ticket`` step.

Exit codes: 0 success; 3 ``SideEffectRetryBlockedError``; 4 ``DivergenceError``;
5 another redrive error; 1 anything else.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .. import DivergenceError, ReplayError, SideEffectRetryBlockedError, open_journal, run
from ..agent import run_agent
from ..replay import iter_steps, set_boundary_hook
from . import tools

__all__ = ["MODEL", "SYSTEM", "account", "main", "parse_point", "ticket_text"]

MODEL = "gpt-4o-mini"
SYSTEM = (
    "You are the support desk assistant of an online shop. Look the customer up, open a "
    "ticket for their problem, and email them the ticket number. Use the tools; do not "
    "invent ids."
)


def ticket_text(order: str = "4417", email: str = "ada.lovelace@example.com") -> str:
    """The customer's message that starts the job."""
    return (
        f"Hello, this is {email}. My order #{order} arrived today and the screen is cracked. "
        "Can you send a replacement?"
    )


def parse_point(text: str) -> tuple[str, str | None, int]:
    """Parse ``BOUNDARY[:NAME][#N]`` into ``(boundary, name or None, N)``.

    Raises:
        ValueError: an unknown boundary or a bad occurrence number.
    """
    head, _, nth = text.partition("#")
    boundary, _, name = head.partition(":")
    known = ("model_before", "model_after", "tool_claimed", "tool_body_done", "tool_recorded")
    if boundary not in known:
        raise ValueError(f"crash point {text!r}: the boundary must be one of {', '.join(known)}")
    try:
        count = int(nth) if nth else 1
    except ValueError:
        raise ValueError(f"crash point {text!r}: #N must be a whole number") from None
    if count < 1:
        raise ValueError(f"crash point {text!r}: #N counts from 1")
    return boundary, name or None, count


def _install(point: str, action: Callable[[dict[str, Any]], None]) -> None:
    boundary, name, count = parse_point(point)
    seen = 0
    lock = threading.Lock()

    def hook(where: str, info: dict[str, Any]) -> None:
        nonlocal seen
        if where != boundary or (name is not None and info.get("name") != name):
            return
        with lock:
            seen += 1
            hit = seen == count
        if hit:
            action({"point": point, **info})

    set_boundary_hook(hook)


def _kill(info: dict[str, Any]) -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _pause(info: dict[str, Any]) -> None:
    print(json.dumps({"paused": info}), flush=True)
    threading.Event().wait()  # until the parent kills this process


def account(frames: Sequence[Any], before: int) -> list[dict[str, Any]]:
    """Describe a run's steps from its frames, relative to where this process started.

    Args:
        frames: the run's frames, in seq order.
        before: the run's ``next_seq`` when this process entered it (0 for a new run).

    Returns:
        One dict per step: ``seq``, ``kind`` (model/tool), ``name``, ``args`` (tools),
        ``how`` (``replayed``, ``live``, ``rerun``, ``blocked``, ``unfinished``).
    """
    out = []
    for step in iter_steps(frames):
        if step.kind == "value":
            continue
        end = None if step.end is None else step.end.seq
        rerun = step.last_attempt_seq is not None and step.last_attempt_seq >= before
        if step.status == "blocked":
            how = "blocked"
        elif step.seq >= before:
            how = "live" if end is not None else "unfinished"
        elif end is not None and end < before:
            how = "replayed"
        elif rerun:
            how = "rerun" if end is not None else "unfinished"
        elif end is not None:
            how = "live"
        else:
            how = "blocked" if step.kind == "tool" else "unfinished"
        out.append(
            {
                "seq": step.seq,
                "kind": step.kind,
                "name": step.name,
                "args": step.args if step.kind == "tool" else None,
                "how": how,
            }
        )
    return out


def _drifted_open_ticket() -> Callable[..., Any]:
    """The 'changed code': the same tool (same name, schema), with a prefixed subject."""
    original = tools.open_ticket

    @functools.wraps(original)
    def open_ticket(
        customer_id: str, subject: str, priority: Literal["low", "normal", "high"], summary: str
    ) -> Any:
        return original(
            customer_id=customer_id,
            subject=f"[{priority.upper()}] {subject}",
            priority=priority,
            summary=summary,
        )

    return open_ticket


def _client(base_url: str) -> Any:
    """An OpenAI client for the scripted server, wrapped so its calls are model steps."""
    from openai import OpenAI

    from .. import wrap

    return wrap(OpenAI(base_url=base_url, api_key="sk-demo-not-a-real-key", max_retries=0))


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or resume) one support-desk job; print the JSON summary; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m redrive.demo.worker", description=__doc__)
    parser.add_argument("--journal", required=True, help="DuckDB journal file")
    parser.add_argument("--log", required=True, help="side-effect log file (JSON lines)")
    parser.add_argument("--base-url", required=True, help="the model server's /v1 URL")
    parser.add_argument("--run-id", default="support:job-4417")
    parser.add_argument("--order", default="4417")
    parser.add_argument("--kill-at", default=os.environ.get("REDRIVE_KILL_AT"))
    parser.add_argument("--pause-at", default=None)
    parser.add_argument("--drift", action="store_true", help="run the changed code")
    args = parser.parse_args(argv)

    tools.configure(args.log)
    if args.kill_at:
        _install(args.kill_at, _kill)
    elif args.pause_at:
        _install(args.pause_at, _pause)

    journal = open_journal(args.journal)
    record = journal.get_run(args.run_id)
    before = record.next_seq if record is not None else 0
    text = ticket_text(args.order)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    toolset: list[Callable[..., Any]] = [
        tools.lookup_customer,
        _drifted_open_ticket() if args.drift else tools.open_ticket,
        tools.send_email,
    ]
    summary: dict[str, Any] = {"status": None, "error": None, "final": None}
    code = 0
    current = run(journal, args.run_id, input={"ticket": text})
    try:
        with current:
            result = run_agent(_client(args.base_url), MODEL, messages, toolset, temperature=0)
            current.finish(result.final)
        summary["final"] = current.output
    except SideEffectRetryBlockedError as exc:
        code = 3
        summary["error"] = {"type": type(exc).__name__, "message": str(exc)}
    except DivergenceError as exc:
        code = 4
        summary["error"] = {"type": type(exc).__name__, "message": str(exc)}
    except ReplayError as exc:
        code = 5
        summary["error"] = {"type": type(exc).__name__, "message": str(exc)}
    except Exception as exc:
        code = 1
        summary["error"] = {"type": type(exc).__name__, "message": str(exc)}
    summary["status"] = current.status
    summary["replayed"] = current.replayed_steps
    summary["live"] = current.live_steps
    summary["steps"] = account(list(journal.frames(args.run_id)), before)
    journal.close()
    print(json.dumps(summary, default=str), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
