"""Child process for tests/crash/test_resume_crash.py: one run of a small payment loop.

Usage: ``python -m tests.crash.resume_child JOURNAL LOG SCENARIO KILL_AT ON_IN_FLIGHT``.
``KILL_AT`` is a boundary (``tool_claimed``, ``tool_body_done``) at which the
process SIGKILLs itself, or ``none``. Side effects go to ``LOG`` (one line per
body execution) and ``LOG.provider`` (the payment provider's ledger), both
fsynced, outside the process. Prints one JSON line: status, output, error.
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


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def main(argv: list[str]) -> int:
    """Run the scenario; return the exit code (0 done, 3 blocked)."""
    journal_url, log_name, scenario, kill_at, on_in_flight = argv
    log = Path(log_name)
    provider = Path(log_name + ".provider")

    def charge_body(amount: int, key: str, dedupe: bool) -> dict[str, Any]:
        _append(log, f"body {key}")
        if not (dedupe and any(line.split()[1] == key for line in _lines(provider))):
            _append(provider, f"charge {key} {amount}")
        return {"charged": amount, "key": key}

    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        _append(log, f"recover {key}")
        if any(line.split()[1] == key for line in _lines(provider)):
            return redrive.Recovery.done({"charged": args["amount"], "key": key})
        return redrive.Recovery.not_done()

    if scenario == "dedupe":

        @redrive.tool(name="charge_card", restart_safe=True)
        def charge_card(amount: int, idempotency_key: str) -> Any:
            return charge_body(amount, idempotency_key, dedupe=True)
    elif scenario == "recover":

        @redrive.tool(name="charge_card", restart_safe=False, recover=recover)
        def charge_card(amount: int, idempotency_key: str) -> Any:
            return charge_body(amount, idempotency_key, dedupe=False)
    else:

        @redrive.tool(name="charge_card")  # undeclared: the name says it is unsafe
        def charge_card(amount: int, idempotency_key: str) -> Any:
            return charge_body(amount, idempotency_key, dedupe=False)

    @redrive.tool(read_only=True)
    def get_balance(account: str) -> int:
        _append(log, "body get_balance")
        return 100

    def hook(point: str, info: dict[str, Any]) -> None:
        if point == kill_at and info["name"] == "charge_card":
            os.kill(os.getpid(), signal.SIGKILL)

    set_boundary_hook(hook)
    journal = redrive.open_journal(journal_url)
    result: dict[str, Any] = {}
    code = 0
    try:
        live = on_in_flight != "replay"
        mode = "raise" if on_in_flight == "replay" else on_in_flight
        with redrive.run(journal, "pay:1", on_in_flight=mode, live=live) as run:
            balance = get_balance("acct")
            receipt = charge_card(balance // 4)
            run.finish({"receipt": receipt})
        result = {"status": run.status, "output": run.output}
    except redrive.SideEffectRetryBlockedError as exc:
        result = {"error": type(exc).__name__, "fields": exc.to_fields()}
        code = 3
    finally:
        journal.close()
    print(json.dumps(result, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
