"""The demo's driver: start the model server, run, kill, resume, replay, diverge; tell the story."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .server import ScriptedModelServer
from .tools import read_log

__all__ = ["DemoError", "main"]


def _has_openai() -> bool:
    """True when the OpenAI SDK can be imported (the ``openai`` extra is installed)."""
    try:
        return importlib.util.find_spec("openai") is not None
    except (ImportError, ValueError):
        return False


#: Where the first worker is stopped: ``open_ticket``'s tool_done is durable, send_email not run.
CRASH_POINT = "tool_recorded:open_ticket"
_TIMEOUT = 120.0  # seconds a worker may take before the demo gives up on it


class DemoError(RuntimeError):
    """A worker did not behave as the demo expects (the message says how)."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REDRIVE_KILL_AT", None)
    root = str(Path(__file__).resolve().parents[2])  # the directory holding the package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _worker_cmd(journal: Path, log: Path, base_url: str, run_id: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "redrive.demo.worker",
        "--journal",
        str(journal),
        "--log",
        str(log),
        "--base-url",
        base_url,
        "--run-id",
        run_id,
        *extra,
    ]


def _summary(stdout: str, stderr: str, code: int) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        try:
            found = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict) and "status" in found:
            found["exit_code"] = code
            return found
    raise DemoError(
        f"the worker exited with code {code} without a summary.\n"
        f"stdout:\n{stdout[-2000:]}\nstderr:\n{stderr[-4000:]}"
    )


def run_worker(cmd: list[str]) -> dict[str, Any]:
    """Run a worker to its end and return its JSON summary (plus ``exit_code`` and ``pid``)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    try:
        stdout, stderr = proc.communicate(timeout=_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise DemoError(f"the worker {' '.join(cmd)} did not finish in {_TIMEOUT:.0f} s") from None
    summary = _summary(stdout, stderr, proc.returncode)
    summary["pid"] = proc.pid
    return summary


def kill_at_pause(cmd: list[str]) -> dict[str, Any]:
    """Start a worker with ``--pause-at``, SIGKILL it once it reports the pause.

    Returns:
        The pause info (``point``, ``run_id``, ``seq``, ``name``) plus ``pid`` and
        ``exit_code`` (``-SIGKILL``).

    Raises:
        DemoError: the worker ended (or said something else) before pausing.
    """
    proc = subprocess.Popen(
        [*cmd, "--pause-at", CRASH_POINT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert proc.stdout is not None
    info: dict[str, Any] | None = None
    for line in proc.stdout:
        try:
            found = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict) and "paused" in found:
            info = dict(found["paused"])
            break
    if info is None:
        _, stderr = proc.communicate(timeout=_TIMEOUT)
        raise DemoError(
            f"the first worker ended (code {proc.returncode}) before reaching {CRASH_POINT}:\n"
            f"{stderr[-4000:]}"
        )
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=_TIMEOUT)
    info["pid"] = proc.pid
    info["exit_code"] = proc.returncode
    return info


def _counts(entries: list[dict[str, Any]], run_id: str) -> Counter[str]:
    return Counter(e["tool"] for e in entries if e.get("run_id") == run_id)


def _describe(step: dict[str, Any]) -> str:
    if step["kind"] == "model":
        return f"model  {step['name']}"
    args = list((step.get("args") or {}).items())
    shown = ", ".join(f"{k}={_clip(v)}" for k, v in args[:2])
    more = ", ..." if len(args) > 2 else ""
    return f"tool   {step['name']}({shown}{more})"


def _clip(value: Any, width: int = 30) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


_HOW = {
    "replayed": ("replayed from the journal", "cyan"),
    "live": ("ran live", "green"),
    "rerun": ("re-run (restart-safe)", "yellow"),
    "blocked": ("blocked (in flight, not restart-safe)", "red"),
    "unfinished": ("unfinished", "red"),
}


def _steps_table(steps: list[dict[str, Any]]) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("seq", justify="right")
    table.add_column("step")
    table.add_column("this worker")
    for step in steps:
        label, style = _HOW.get(step["how"], (step["how"], ""))
        table.add_row(str(step["seq"]), _describe(step), Text(label, style=style))
    return table


def _check(console: Console, ok: bool, text: str, checks: list[dict[str, Any]]) -> None:
    mark = Text("  ok   ", style="bold green") if ok else Text("  FAIL ", style="bold red")
    console.print(mark + Text(text))
    checks.append({"check": text, "ok": ok})


def story(
    console: Console,
    workdir: Path,
    run_id: str,
    *,
    kept: bool = True,
    report: dict[str, Any] | None = None,
) -> int:
    """Run the four acts of the demo in ``workdir``; print them; return 0 when every check held.

    Args:
        console: where the account is printed.
        workdir: directory of the journal (``runs.duckdb``) and the side-effect log.
        run_id: the run's id.
        kept: whether ``workdir`` survives the demo (then its path is printed).
        report: filled with the machine-readable account (``run_id``, ``journal``,
            ``log``, ``model_calls``, ``side_effects``, ``acts``, ``checks``).

    Raises:
        DemoError: a worker did not start, pause or answer as expected.
    """
    journal = workdir / "runs.duckdb"
    log = workdir / "side_effects.jsonl"
    report = report if report is not None else {}
    checks: list[dict[str, Any]] = []
    report.update(run_id=run_id, journal=str(journal), log=str(log), checks=checks)
    with ScriptedModelServer() as server:
        cmd = _worker_cmd(journal, log, server.base_url, run_id)
        console.print(
            Panel.fit(
                f"run      [bold]{run_id}[/]\njournal  {journal} (DuckDB)\n"
                f"model    scripted OpenAI-compatible server, {server.base_url}\n"
                f"log      {log} (written by the tools, read by this demo)",
                title="redrive demo: a support-desk agent that survives a crash",
            )
        )

        # act 1: run and kill
        console.rule("1. first worker: run, then SIGKILL")
        paused = kill_at_pause(cmd)
        calls_first = server.calls
        after_kill = _counts(read_log(log), run_id)
        ticket = next(
            (
                e["result"].get("ticket_id")
                for e in read_log(log)
                if e.get("run_id") == run_id and e["tool"] == "open_ticket"
            ),
            None,
        )
        console.print(
            f"worker pid {paused['pid']} opened ticket {ticket} (open_ticket's result is "
            f"durable at seq {paused.get('seq')}) and was killed with SIGKILL "
            f"(exit {paused['exit_code']}) before send_email ran.\n"
            f"side effects so far: {dict(after_kill)}; model calls so far: {calls_first}"
        )

        # act 2: resume
        console.rule("2. a new worker resumes the same run_id")
        resumed = run_worker(cmd)
        calls_resume = server.calls - calls_first
        console.print(_steps_table(resumed["steps"]))
        console.print(f"answer: [italic]{resumed.get('final')}[/]")
        effects = _counts(read_log(log), run_id)
        live_models = sum(
            1 for s in resumed["steps"] if s["kind"] == "model" and s["how"] == "live"
        )
        console.print(
            f"from the side-effect log: lookup_customer ran {effects['lookup_customer']}x, "
            f"open_ticket {effects['open_ticket']}x, send_email {effects['send_email']}x; "
            f"the model server answered {calls_first} call(s) before the crash and "
            f"{calls_resume} after it ({calls_first + calls_resume} in all)."
        )
        _check(
            console,
            resumed["status"] == "succeeded" and resumed["exit_code"] == 0,
            f"the resumed run succeeded (status {resumed['status']})",
            checks,
        )
        _check(console, effects["open_ticket"] == 1, "the ticket was opened exactly once", checks)
        _check(console, effects["send_email"] == 1, "the email was sent exactly once", checks)
        _check(
            console,
            calls_resume == live_models,
            f"no finished model call was paid twice ({calls_resume} live on resume)",
            checks,
        )

        # act 3: replay the finished run
        console.rule("3. replay the finished run (new worker)")
        log_before = len(read_log(log))
        calls_before = server.calls
        replayed = run_worker(cmd)
        new_calls = server.calls - calls_before
        new_effects = len(read_log(log)) - log_before
        console.print(
            f"worker pid {replayed['pid']}: {replayed['replayed']} steps replayed, "
            f"{replayed['live']} live; model calls {new_calls}; tool executions {new_effects}"
        )
        _check(
            console,
            new_calls == 0 and new_effects == 0,
            "zero model calls and zero tool executions",
            checks,
        )
        _check(
            console,
            replayed.get("final") == resumed.get("final"),
            "the same recorded answer",
            checks,
        )

        # act 4: changed code, strict replay
        console.rule("4. changed code, strict replay")
        console.print(
            "the new code prefixes the ticket subject with its priority; replaying the "
            "recorded run against it:"
        )
        drift = run_worker([*cmd, "--drift"])
        error = drift.get("error") or {}
        console.print(
            Panel(
                error.get("message", "(no error)"), title=str(error.get("type")), border_style="red"
            )
        )
        _check(
            console,
            error.get("type") == "DivergenceError" and server.calls == calls_before,
            "DivergenceError at open_ticket, with no model call and no tool run",
            checks,
        )
        _check(
            console, len(read_log(log)) == log_before, "the side-effect log is unchanged", checks
        )

        report["model_calls"] = {
            "first_worker": calls_first,
            "resume": calls_resume,
            "replay": new_calls,
            "divergence": server.calls - calls_before,
        }
    report["side_effects"] = dict(_counts(read_log(log), run_id))
    report["acts"] = {"killed": paused, "resume": resumed, "replay": replayed, "divergence": drift}
    failures = [c["check"] for c in checks if not c["ok"]]
    console.rule()
    if failures:
        console.print(f"[bold red]{len(failures)} check(s) failed[/]: " + "; ".join(failures))
        return 1
    console.print(
        "[bold green]All checks held.[/]"
        + (
            f" The journal and the side-effect log are in {workdir}"
            if kept
            else f" {workdir} is removed now, so the commands above no longer find its journal:"
            " run `redrive demo --keep` (or `--dir DIR`) to try them"
        )
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo (``redrive demo [--dir DIR] [--run-id ID] [--keep] [--json]``).

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        0 when every check of the story held; 1 when one failed; 2 on a
        demo error (a worker that did not start or answer).
    """
    parser = argparse.ArgumentParser(
        prog="redrive demo",
        description="Kill an agent worker mid-run, resume it, replay it, and show a divergence.",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory for the journal and the side-effect log (kept; default: a temp dir, "
        "removed at the end unless --keep)",
    )
    parser.add_argument("--run-id", default=None, help="the run id (default: a fresh job id)")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    parser.add_argument(
        "--json", action="store_true", help="print the account as one JSON object instead"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    console = Console(highlight=False, file=io.StringIO() if args.json else None)
    if not _has_openai():
        message = (
            "the demo drives the OpenAI Python SDK, which is not installed: "
            "pip install 'redrive[openai]'"
        )
        if args.json:
            print(json.dumps({"error": message, "exit_code": 2}, indent=2))
        else:
            Console(stderr=True, soft_wrap=True).print(
                "[bold red]demo error:[/] " + escape(message)
            )
        return 2
    temp = args.dir is None
    workdir = Path(tempfile.mkdtemp(prefix="redrive-demo-")) if temp else Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    run_id = args.run_id or f"support:job-{os.getpid() % 9000 + 1000}-{os.urandom(2).hex()}"
    report: dict[str, Any] = {}
    try:
        code = story(console, workdir, run_id, kept=not temp or args.keep, report=report)
    except DemoError as exc:
        console.print(f"[bold red]demo error:[/] {escape(str(exc))}")
        report["error"] = str(exc)
        code = 2
    finally:
        if temp and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        report["exit_code"] = code
        print(json.dumps(report, indent=2, default=str))
    return code
