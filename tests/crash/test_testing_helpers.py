"""redrive.testing: crashes injected from the environment kill a real child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.crash

WORKER = textwrap.dedent(
    """
    import sys
    import redrive
    import redrive.testing

    journal_path, log_path, mode = sys.argv[1:4]
    redrive.testing.install_from_env()

    def log(line):
        with open(log_path, "a") as f:
            f.write(line + "\\n")
            f.flush()

    @redrive.tool
    def send_invoice(customer: str) -> str:
        log("send_invoice " + customer)
        return "inv-1"

    @redrive.tool(restart_safe=True)
    def sync_crm(customer: str, idempotency_key: str) -> str:
        log("sync_crm " + customer + " " + idempotency_key)
        return "synced"

    journal = redrive.open_journal(journal_path)
    with redrive.run(journal, "job:1", on_in_flight=mode) as run:
        out = [sync_crm("acme"), send_invoice("acme")]
        run.finish(out)
    print(repr(run.output))
    """
)


def worker(
    tmp_path: Path, crash: str | None, mode: str = "raise"
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if k != "REDRIVE_CRASH_AT"}
    if crash:
        env["REDRIVE_CRASH_AT"] = crash
    return subprocess.run(
        [
            sys.executable,
            str(script),
            str(tmp_path / "runs.duckdb"),
            str(tmp_path / "effects.log"),
            mode,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def effects(tmp_path: Path) -> list[str]:
    path = tmp_path / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def test_kill_mid_body_blocks_the_side_effect(tmp_path: Path) -> None:
    """Killed inside send_invoice's body: resume refuses to send it again, and says why."""
    first = worker(tmp_path, "tool_body_done:send_invoice")
    assert first.returncode == -signal.SIGKILL
    assert effects(tmp_path) == ["sync_crm acme job:1:1:sync_crm", "send_invoice acme"]
    second = worker(tmp_path, None)
    assert second.returncode == 1
    assert "SideEffectRetryBlockedError" in second.stderr and "send_invoice" in second.stderr
    assert effects(tmp_path) == ["sync_crm acme job:1:1:sync_crm", "send_invoice acme"]


def test_kill_after_claim_reruns_restart_safe_with_same_key(tmp_path: Path) -> None:
    """Killed after sync_crm's claim: the restart-safe tool runs again with the same key."""
    first = worker(tmp_path, "tool_claimed:sync_crm")
    assert first.returncode == -signal.SIGKILL and effects(tmp_path) == []
    second = worker(tmp_path, None)
    assert second.returncode == 0, second.stderr
    assert effects(tmp_path) == ["sync_crm acme job:1:1:sync_crm", "send_invoice acme"]
    third = worker(tmp_path, None)
    assert third.returncode == 0 and third.stdout == second.stdout
    assert len(effects(tmp_path)) == 2


def test_tell_model_outcome_instead_of_error(tmp_path: Path) -> None:
    """With on_in_flight='tell_model' the blocked step becomes a journaled outcome."""
    worker(tmp_path, "tool_body_done:send_invoice")
    second = worker(tmp_path, None, mode="tell_model")
    assert second.returncode == 0, second.stderr
    assert "not_safely_resumable" in second.stdout
    assert effects(tmp_path).count("send_invoice acme") == 1


def test_crash_spec_is_validated() -> None:
    """A malformed crash spec is a clear ValueError."""
    import redrive.testing

    with pytest.raises(ValueError, match="unknown boundary"):
        redrive.testing.crash_at("nowhere")
    os.environ["REDRIVE_X"] = "tool_claimed:a:-2"
    try:
        with pytest.raises(ValueError, match="nth must be a positive integer"):
            redrive.testing.install_from_env("REDRIVE_X")
        os.environ["REDRIVE_X"] = "model_recorded:openai:POST /chat/completions:2"
        crash = redrive.testing.install_from_env("REDRIVE_X")
        assert crash is not None
        assert (crash.name, crash.nth) == ("openai:POST /chat/completions", 2)
    finally:
        del os.environ["REDRIVE_X"]
        redrive.replay.set_boundary_hook(None)


MODEL_WORKER = textwrap.dedent(
    """
    import sys
    import redrive
    import redrive.testing

    journal_path, log_path, mode = sys.argv[1:4]
    redrive.testing.install_from_env()

    @redrive.model
    def ask(prompt: str) -> str:
        with open(log_path, "a") as f:
            f.write("paid " + prompt + "\\n")
        return prompt.upper()

    with redrive.run(redrive.open_journal(journal_path), "paid:1", model_commit=mode) as run:
        run.finish([ask("one"), ask("two")])
    print(run.output)
    """
)


@pytest.mark.parametrize(("mode", "paid"), [("write", 2), ("group", 3)])
def test_killed_worker_pays_for_a_finished_model_call_once(
    tmp_path: Path, mode: str, paid: int
) -> None:
    """Killed right after a model answered: 'write' (default) keeps it; 'group' pays again."""
    script = tmp_path / "model_worker.py"
    script.write_text(MODEL_WORKER)
    command = [
        sys.executable,
        str(script),
        str(tmp_path / "runs.duckdb"),
        str(tmp_path / "paid.log"),
        mode,
    ]
    env = {**os.environ, "REDRIVE_CRASH_AT": "model_recorded:model:ask:1"}
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    env.pop("REDRIVE_CRASH_AT")
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "['ONE', 'TWO']" in second.stdout
    lines = (tmp_path / "paid.log").read_text().splitlines()
    assert len(lines) == paid and lines.count("paid two") == 1
