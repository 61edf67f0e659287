"""Child process for tests/crash/test_signal_crash.py: one job interrupted by a real signal.

Usage: ``python -m tests.crash.signal_child JOURNAL LOG FACE SIGNAL POINT NAME``.
``FACE`` is ``sync`` or ``async`` (under ``asyncio.run``); ``SIGNAL`` is
``int`` (SIGINT: ``KeyboardInterrupt``, or for ``asyncio.run`` the main task
cancelled), ``term`` (SIGTERM, with the handler a deploy-grade worker installs:
``sys.exit(143)``) or ``none``. The process sends itself the signal when step
``NAME`` reaches boundary ``POINT`` (see :func:`redrive.replay.set_boundary_hook`).
Side effects go, fsynced, outside the process: ``LOG`` (one line per tool body
or model call) and ``LOG.provider`` (the payment provider's ledger, deduped on
the idempotency key). Prints one JSON line: the run's status and output, or the
interruption that stopped it; exits 0 (done) or 130 (interrupted).
"""

from __future__ import annotations

import asyncio
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


def _charged(provider: Path, key: str) -> bool:
    lines = provider.read_text().splitlines() if provider.exists() else []
    return any(line.split()[1] == key for line in lines)


def main(argv: list[str]) -> int:
    """Run the job once; return the exit code (0 done, 130 interrupted)."""
    journal_url, log_name, face, sig, point, name = argv
    log = Path(log_name)
    provider = Path(log_name + ".provider")

    def pay(tool: str, amount: int, key: str) -> dict[str, Any]:
        _append(log, f"{tool} {key}")
        if not _charged(provider, key):
            _append(provider, f"{tool} {key} {amount}")
        return {"tool": tool, "amount": amount, "key": key}

    def summarize_body(text: str) -> str:
        _append(log, "model summarize")
        return f"summary of {text}"

    if face == "sync":

        @redrive.tool(name="charge_card", restart_safe=True)
        def charge_card(amount: int, idempotency_key: str) -> Any:
            return pay("charge_card", amount, idempotency_key)

        @redrive.tool(name="send_receipt", restart_safe=True)
        def send_receipt(amount: int, idempotency_key: str) -> Any:
            return pay("send_receipt", amount, idempotency_key)

        @redrive.model(name="summarize")
        def summarize(text: str) -> str:
            return summarize_body(text)

        def job() -> Any:
            with redrive.run(journal, "job:42", input="42") as run:
                charge = charge_card(250)
                note = summarize(f"charged {charge['amount']}")
                receipt = send_receipt(250)
                return run.finish({"note": note, "receipt": receipt["key"]})

        go = job
    else:

        @redrive.tool(name="charge_card", restart_safe=True)
        async def acharge_card(amount: int, idempotency_key: str) -> Any:
            return pay("charge_card", amount, idempotency_key)

        @redrive.tool(name="send_receipt", restart_safe=True)
        async def asend_receipt(amount: int, idempotency_key: str) -> Any:
            return pay("send_receipt", amount, idempotency_key)

        @redrive.model(name="summarize")
        async def asummarize(text: str) -> str:
            return summarize_body(text)

        async def ajob() -> Any:
            async with redrive.run(journal, "job:42", input="42") as run:
                charge = await acharge_card(250)
                note = await asummarize(f"charged {charge['amount']}")
                receipt = await asend_receipt(250)
                return run.finish({"note": note, "receipt": receipt["key"]})

        def go() -> Any:
            return asyncio.run(ajob())

    signum = {"int": signal.SIGINT, "term": signal.SIGTERM}.get(sig)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a deploy's graceful stop
    # Python's own SIGINT handler, as an interactive or supervised process has it: a parent
    # started in the background (a shell without job control) hands down SIG_IGN
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def hook(boundary: str, info: dict[str, Any]) -> None:
        if signum is not None and boundary == point and info["name"] == name:
            os.kill(os.getpid(), signum)

    set_boundary_hook(hook)
    journal = redrive.open_journal(journal_url)
    try:
        output = go()
        result: dict[str, Any] = {"output": output}
        code = 0
    except (KeyboardInterrupt, SystemExit, asyncio.CancelledError) as exc:
        result = {"interrupted": type(exc).__name__}
        code = 130
    record = journal.get_run("job:42")
    result["status"] = record.status if record is not None else None
    journal.close()
    print(json.dumps(result, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
