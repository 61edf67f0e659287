"""A worker process for crash tests: started with ``python -m``, read one JSON line at a time."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]


class Worker:
    """A worker process (``python -m module args...``) driven through its stdin and stdout."""

    def __init__(self, module: str, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    @property
    def stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def read(self, timeout: float = 60.0) -> dict[str, Any]:
        """Return the next JSON line (fails the test after ``timeout`` s of silence)."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"worker {self.proc.pid} said nothing for {timeout} s") from None
        if not line:
            raise AssertionError(f"worker {self.proc.pid} exited ({self.proc.wait()})")
        data: dict[str, Any] = json.loads(line)
        return data

    def send(self, line: str) -> None:
        self.stdin.write(line + "\n")
        self.stdin.flush()

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def thaw_and_stop(self) -> None:
        """Resume a worker that may be SIGSTOPped, then :meth:`stop` it."""
        self.proc.send_signal(signal.SIGCONT)
        self.stop()


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``predicate`` every 20 ms; fail the test when it is still false after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def lease_lapsed(journal: Any, run_id: str) -> bool:
    """True when ``run_id``'s lease in ``journal`` has an expiry in the past."""
    record = journal.get_run(run_id)
    return bool(record and record.lease_expires is not None and record.lease_expires < time.time())
