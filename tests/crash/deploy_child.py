"""Child process for tests/crash/test_deploy_crash.py: one run of a refund desk, per version.

Usage: ``python -m tests.crash.deploy_child JOURNAL LOG VERSION KILL_AT``. ``VERSION``
is the deployed code: ``v1``; ``v2`` (an edited system prompt, and a changed
argument of the email tool, which runs after the crash point); ``v3`` (as v2, and
the refund's amount changed too: a finished side effect asked with other
arguments). ``KILL_AT`` is ``refund`` (SIGKILL once the refund is journaled) or
``none``. The replay policy comes from the deployment (``$REDRIVE_ON_DRIFT``).
Side effects and model calls go to ``LOG`` (fsynced, outside the process). Prints
one JSON line; exit 0 done, 4 diverged.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import redrive
from redrive.replay import set_boundary_hook


def _append(path: Path, line: str) -> None:
    with path.open("a") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def main(argv: list[str]) -> int:
    """Run the desk once; return the exit code."""
    journal_url, log_name, version, kill_at = argv
    log = Path(log_name)
    prompt = "You are a refund desk." if version == "v1" else "You are a kind refund desk."
    amount = 12 if version == "v3" else 10
    subject = "Refund" if version == "v1" else "[v2] Refund"

    @redrive.model
    def ask(system: str, text: str) -> str:
        _append(log, f"model {system}")
        return f"answer to {text}"

    @redrive.tool(restart_safe=False)
    def refund(order: str, amount: int) -> dict[str, Any]:
        _append(log, f"refund {order} {amount}")
        return {"order": order, "amount": amount}

    @redrive.tool(restart_safe=False)
    def send_email(to: str, subject: str) -> str:
        _append(log, f"email {to} {subject}")
        return "sent"

    def hook(point: str, info: dict[str, Any]) -> None:
        if kill_at == "refund" and point == "tool_recorded" and info["name"] == "refund":
            os.kill(os.getpid(), signal.SIGKILL)

    set_boundary_hook(hook)
    journal = redrive.open_journal(journal_url)
    code = 0
    try:
        with redrive.run(journal, "desk:1", input={"order": "A"}) as run:
            first = ask(system=prompt, text="order A arrived damaged")
            receipt = refund("A", amount)
            send_email("ada@example.com", subject)
            run.finish({"first": first, "receipt": receipt})
        result: dict[str, Any] = {"status": run.status, "reasked": run.reasked}
    except redrive.DivergenceError as exc:
        result = {"error": "DivergenceError", "seq": exc.seq, "name": exc.name}
        code = 4
    finally:
        journal.close()
    print(json.dumps(result, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
