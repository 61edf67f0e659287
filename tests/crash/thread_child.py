"""Child process for tests/crash/test_thread_crash.py: a loop running two tools in a plain pool.

Usage: ``python -m tests.crash.thread_child JOURNAL LOG``. The pool does not
copy the context, so the tools join the run through the process's run registry.
``REDRIVE_CRASH_AT`` (see :func:`redrive.testing.install_from_env`) kills the
process at a step boundary; ``KILL_AFTER_TOOLS=1`` kills it after both tools
returned, before the run ends. Each body execution appends a line to ``LOG``
(fsynced, outside the process). Prints one JSON line: status, output.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import sys
from pathlib import Path

import redrive
from redrive.testing import install_from_env


def _append(path: Path, line: str) -> None:
    with path.open("a") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def main(argv: list[str]) -> int:
    """Run the loop; return the exit code (0 done, 3 blocked)."""
    journal_url, log_name = argv
    log = Path(log_name)

    @redrive.tool(restart_safe=False)
    def charge_card(order: str, cents: int) -> str:
        _append(log, f"charge {order} {cents}")
        return f"charged {order}"

    @redrive.tool(restart_safe=False)
    def send_invoice(order: str) -> str:
        _append(log, f"invoice {order}")
        return f"invoiced {order}"

    install_from_env()
    journal = redrive.open_journal(journal_url)
    try:
        with redrive.run(journal, "job:7") as run:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                futures = [pool.submit(charge_card, "o7", 500), pool.submit(send_invoice, "o7")]
                out = [f.result() for f in futures]
            if os.environ.get("KILL_AFTER_TOOLS") == "1":
                os.kill(os.getpid(), signal.SIGKILL)
            run.finish(out)
    except redrive.SideEffectRetryBlockedError as exc:
        print(json.dumps({"status": "blocked", "tool": exc.tool}))
        return 3
    finally:
        journal.close()
    print(json.dumps({"status": "done", "output": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
