"""Child process for tests/crash/test_retry_crash.py: a payment loop that retries a timeout.

Usage: ``python -m tests.crash.retry_child JOURNAL PROVIDER PLAN MODE``. ``PLAN`` says what
the payment provider does with each request it gets, in order (comma-separated):
``ok``, ``timeout`` (charges, then times out: a retryable error) or ``kill`` (charges,
then the worker is SIGKILLed); past its end, ``ok``. The provider's request log
(``PROVIDER``) and its ledger (``PROVIDER.ledger``, one charge per idempotency key)
are fsynced files outside the process. ``MODE`` is ``live`` or ``replay``
(``live=False``). Prints one JSON line: status and output.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import redrive
from tests.crash.resume_child import _append, _lines


class ProviderTimeout(Exception):
    """The provider took the request and did not answer in time: retryable."""

    retryable = True


def main(argv: list[str]) -> int:
    """Run (or resume, or replay) the payment loop; return 0."""
    journal_url, provider_name, plan_text, mode = argv
    requests, ledger = Path(provider_name), Path(provider_name + ".ledger")
    plan = plan_text.split(",")

    @redrive.tool(restart_safe=True)
    def create_payment(order_id: str, cents: int, idempotency_key: str) -> dict[str, Any]:
        index = len(_lines(requests))
        _append(requests, idempotency_key)
        if idempotency_key not in {line.split()[0] for line in _lines(ledger)}:
            _append(ledger, f"{idempotency_key} {order_id} {cents}")  # the charge, once per key
        what = plan[index] if index < len(plan) else "ok"
        if what == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if what == "timeout":
            raise ProviderTimeout(f"request {index}: no answer in time")
        return {"order": order_id, "charged": cents, "key": idempotency_key}

    journal = redrive.open_journal(journal_url)
    try:
        with redrive.run(journal, "checkout:77", live=mode == "live") as run:
            for _ in range(3):
                try:
                    receipt = create_payment("77", 500)
                    break
                except ProviderTimeout:
                    continue
            run.finish({"receipt": receipt})
        result = {"status": run.status, "output": run.output}
    finally:
        journal.close()
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
