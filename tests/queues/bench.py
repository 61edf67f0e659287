"""The bench of the queue tests: the model server, the workers' environment, the outside account.

A :class:`Bench` starts the scripted model server (:mod:`tests.sdkserver`, answering
with :func:`tests.queues.agent.respond`), holds the environment every worker process
gets, starts worker processes (each in its own session, killed by process group at the
end) and reads what happened from outside them: the side-effect log and the model
server's requests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.queues.agent import model_calls, read_effects, respond, turn_of
from tests.sdkserver import Received, Reply, ScriptServer, serve

ROOT = Path(__file__).resolve().parents[2]

#: trials of each scenario (a nightly job raises it)
TRIALS = int(os.environ.get("REDRIVE_QUEUE_TRIALS", "1"))


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 60.0, logs: Callable[[], str] = str
) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` s
    (with the tail of ``logs()``)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{logs()[-3000:]}")
        time.sleep(0.1)


class Bench:
    """One test's model server, environment, worker processes and side-effect log."""

    def __init__(self, server: ScriptServer, tmp: Path, env: dict[str, str]) -> None:
        self.server = server
        self.tmp = tmp
        self.effects = tmp / "effects.log"
        self.holds = tmp / "holds.json"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "OPENAI_BASE_URL": server.url + "/v1",
            "OPENAI_API_KEY": "sk-queue-test",
            "REDRIVE_EFFECTS": str(self.effects),
            "REDRIVE_HOLDS": str(self.holds),
            **env,
        }
        self.workers: list[tuple[subprocess.Popen[bytes], Path]] = []

    def hold(self, job: str, tool: str, seconds: float) -> None:
        """Make ``tool``'s first body start for ``job`` sleep ``seconds`` (read by the workers)."""
        holds = json.loads(self.holds.read_text()) if self.holds.exists() else {}
        holds[job] = [tool, seconds]
        part = self.holds.with_suffix(".part")
        part.write_text(json.dumps(holds))
        part.replace(self.holds)

    def start(self, argv: list[str], name: str) -> Path:
        """Start one worker process (``python ARGV``); return the path of its log."""
        log = self.tmp / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, *argv],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.workers.append((proc, log))
        return log

    def stop(self) -> None:
        """SIGKILL every worker this bench started (their process groups) and reap them."""
        for proc, _ in self.workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def logs(self) -> str:
        """Every worker's log, for a failure message and for counting outcomes."""
        return "\n".join(log.read_text(errors="replace") for _, log in self.workers)

    def outcomes(self, job: str) -> Counter[str]:
        """How many deliveries of ``job`` came to each outcome (``queue job OUTCOME:`` lines)."""
        found: Counter[str] = Counter()
        for line in self.logs().splitlines():
            if "queue job " in line and f"'support:{job}'" in line:
                found[line.split("queue job ", 1)[1].split(":", 1)[0]] += 1
        return found

    def effects_of(self, job: str) -> list[tuple[str, ...]]:
        return [e for e in read_effects(self.effects) if e[0] == job]

    def started(self, job: str, tool: str) -> list[tuple[str, ...]]:
        """The body starts of ``tool`` for ``job``: ``(job, tool, "start", pid, key)``."""
        return [e for e in self.effects_of(job) if e[1] == tool and e[2] == "start"]

    def kill_inside(self, job: str, tool: str) -> int:
        """Wait until ``tool``'s body started for ``job``, SIGKILL that process; return its pid."""
        start = wait_for(
            f"{tool} to start for {job}", lambda: self.started(job, tool), logs=self.logs
        )
        pid = int(start[0][3])
        os.kill(pid, signal.SIGKILL)
        for proc, _ in self.workers:  # a worker process of ours: reap it (not a pool's child)
            if proc.pid == pid:
                proc.wait(timeout=30)
        return pid

    def resolve_parked(self, journal_url: str, job: str) -> None:
        """Play the operator: find the job's run in ``redrive runs --status blocked``, check
        the ticket system (the ticket exists) and ``redrive resolve`` the step as done.

        The commands run in a process of their own, as an operator's do: a tool's
        declaration is per process, and this test process may hold another module's
        ``open_ticket`` (declared restart-safe, or with ``recover()``), under which the step
        would not be blocked. A copy of the job still being handed out (a sweeper that took
        a busy worker for a dead one) holds the run's lease for a moment: the run is listed
        once it is let go."""
        run_id = f"support:{job}"

        def redrive(*argv: str) -> str:
            done = subprocess.run(
                [sys.executable, "-m", "redrive.cli", "--journal", journal_url, *argv],
                cwd=ROOT,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"redrive {' '.join(argv)}: {done.stdout}{done.stderr}"
            return done.stdout

        def blocked() -> dict[str, Any] | None:
            listed = json.loads(redrive("--json", "runs", "--status", "blocked"))["runs"]
            return {r["run_id"]: r for r in listed}.get(run_id)

        listed = wait_for(f"{run_id} to be listed blocked", blocked, 180.0, logs=self.logs)
        seq = str(listed["blocked_seq"])
        done = json.dumps({"ticket": f"T-{job}"})
        why = ["--by", "ops", "--reason", "the ticket is in the ticket system"]
        redrive("resolve", run_id, seq, "--done", done, *why)

    def model_calls(self, job: str) -> dict[int, int]:
        """Requests the model server received for ``job``, per turn (0, 1, 2)."""
        with self.server.lock:
            counted = model_calls(list(self.server.requests))
        return {turn: n for (j, turn), n in sorted(counted.items()) if j == job}

    def account(self, job: str) -> str:
        """One line of what ``job`` cost, counted outside the workers (printed by the tests)."""
        sends = self.started(job, "send_email")
        return (
            f"ACCOUNT {job}: model calls per turn {self.model_calls(job)}, "
            f"open_ticket bodies {len(self.started(job, 'open_ticket'))}, send_email bodies "
            f"{len(sends)} under {len({e[4] for e in sends})} key(s), deliveries "
            f"{dict(self.outcomes(job))}"
        )

    @contextmanager
    def refusing(self, prefix: str, *, times: int = 1, retry_after: int = 1) -> Iterator[list[str]]:
        """While inside, the model refuses the second turn of each job named ``prefix...``
        with 429 and ``Retry-After: retry_after``, ``times`` times in a row; yields the list
        of refused jobs (one entry per refusal)."""
        refused: list[str] = []
        answer = self.server.respond
        assert answer is not None  # the bench answers each turn of a job

        def refuse(request: Received) -> Reply:
            job, turn = turn_of(request)
            if job.startswith(prefix) and turn == 1 and refused.count(job) < times:
                refused.append(job)
                error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit"}
                headers = {"retry-after": str(retry_after)}
                return Reply(status=429, body={"error": error}, headers=headers)
            return answer(request)

        self.server.respond = refuse
        try:
            yield refused
        finally:
            self.server.respond = answer

    def assert_once(self, job: str, *, emails: int = 1) -> None:
        """The finished job's account: each model turn paid once, the ticket opened once,
        the email sent under one idempotency key (started ``emails`` times)."""
        print(self.account(job))
        calls = self.model_calls(job)
        assert calls == {0: 1, 1: 1, 2: 1}, f"model calls {calls}\n{self.logs()[-3000:]}"
        assert len(self.started(job, "open_ticket")) == 1
        sends = self.started(job, "send_email")
        assert len(sends) == emails and len({e[4] for e in sends}) == 1


@contextmanager
def bench(tmp: Path, env: dict[str, str]) -> Iterator[Bench]:
    """A :class:`Bench` for one test; its workers are killed at the end."""
    with serve() as server:
        server.respond = respond
        made = Bench(server, tmp, env)
        try:
            yield made
        finally:
            made.stop()
