"""``redrive runs`` (list runs) and ``redrive show`` (one run's timeline of steps)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from .._resumable import blocked_step
from .._whatchanged import fingerprint_lines, recorded_app_version, run_fingerprint
from ..errors import JournalCorruptError
from ..replay import pending_approvals, read_usage, run_events
from ..storage import RunRecord, RunStatus, check_row
from ._common import EXIT_OK, Subparsers
from ._journals import opened, source
from ._output import Out, age, clip, run_row, shown
from ._spend import add_prices_option, event_lines, prices_from, usage_line
from ._steps import count_steps, read_steps

__all__ = ["register"]


def _runs(args: argparse.Namespace, out: Out) -> int:
    journal = opened(args.journal)
    blocked: dict[str, int] = {}
    if args.stale is not None:
        rows = journal.stale_runs(older_than=args.stale)
    elif args.status == "blocked":
        rows = []
        for record in journal.runs(status=RunStatus.RUNNING.value):
            try:
                step = blocked_step(journal, record)
            except JournalCorruptError:  # a damaged run is listed by `runs`, not as blocked
                continue
            if step is not None:
                blocked[record.run_id] = step.seq
                rows.append(record)
    else:
        rows = journal.runs(status=args.status)
    if args.entrypoint:
        rows = [r for r in rows if r.entrypoint and args.entrypoint in r.entrypoint]
    if args.app_version:
        rows = [r for r in rows if recorded_app_version(journal, r.run_id) == args.app_version]
    if args.limit is not None:
        rows = rows[: args.limit]
    now = time.time()
    data = []
    with out.progress("counting steps", len(rows)) as update:
        for done, record in enumerate(rows, 1):
            item = run_row(record)
            try:
                check_row(record)
                item["steps"] = count_steps(journal, record.run_id)
            except JournalCorruptError as exc:  # damage stays with its run: list the others
                item["steps"], item["damaged"] = None, exc.message
                item["recorded_status"], item["status"] = item["status"], "damaged"
            item["age_s"] = round(now - record.updated_at, 3)
            if record.run_id in blocked:
                item["blocked_seq"] = blocked[record.run_id]
            data.append(item)
            update(done, len(rows))
    if out.json:
        out.emit({"journal": args.journal, "runs": data})
        return EXIT_OK
    out.table(
        f"runs in {args.journal}",
        ["run_id", "status", "steps", "frames", "age", "entrypoint"],
        [
            [
                d["run_id"],
                "damaged" if "damaged" in d else _status(record, d.get("blocked_seq")),
                "-" if d["steps"] is None else d["steps"],
                d["frames"],
                age(d["age_s"]),
                d["entrypoint"],
            ]
            for d, record in zip(data, rows, strict=True)
        ],
    )
    for d in data:
        if "damaged" in d:
            run = shown(d["run_id"])
            out.line(
                f"run {run} is damaged (every other run reads as before): save what is intact "
                f"with `redrive export {run} --intact -o FILE.rdj`, then `redrive drop {run}`",
                "yellow",
            )
    return EXIT_OK


def _status(record: RunRecord, blocked_seq: int | None = None) -> str:
    """A run's status for a table: a cancelled run's names who cancelled it and why."""
    if blocked_seq is not None:
        return f"blocked at seq {blocked_seq} (a side effect in flight: redrive resolve)"
    if record.status == RunStatus.PAUSED.value and record.error:
        return record.error  # "paused (rate_limit): RateLimitError: ..."
    if record.status == RunStatus.CANCELLED.value and record.error:
        return f"{record.status} ({record.error})"
    return record.status


def _show(args: argparse.Namespace, out: Out) -> int:
    journal, run_id = source(args.run, args.journal)
    record = journal.get_run(run_id)
    assert record is not None  # source() checked it
    check_row(record, getattr(journal, "url", None))  # a malformed row: JournalCorruptError, exit 4
    frames = list(journal.frames(run_id))
    steps, info = read_steps(frames)
    info["usage"] = read_usage(frames, prices_from(args)).as_dict()
    info["events"] = [e.as_dict() for e in run_events(frames)]
    if out.json:
        fingerprint = run_fingerprint(journal, run_id).to_dict()
        out.emit({"run": run_row(record), "info": info, "steps": steps, "fingerprint": fingerprint})
        return EXIT_OK
    total = {"input": 0, "output": 0}
    for step in steps:
        if step["tokens"]:
            total["input"] += step["tokens"]["input"]
            total["output"] += step["tokens"]["output"]
    out.line(
        f"run {shown(run_id)}  status {shown(_status(record))}  frames {record.next_seq}  "
        f"entrypoint {shown(record.entrypoint or '-')}  "
        f"tokens in/out {total['input']}/{total['output']}",
        style="bold",
    )
    if info.get("input") is not None:
        out.line(f"input: {clip(info['input'])}")
    out.line(usage_line(info["usage"]))
    for line in fingerprint_lines(run_fingerprint(journal, run_id)):
        out.line(line)
    rows: list[list[Any]] = []
    for step in steps:
        tokens = step["tokens"]
        status = step["status"]
        if step["attempts"] > 1:
            status = f"{status} (attempt {step['attempts']})"
        if step.get("settled"):
            status = f"{status}, {step['settled']}"
        rows.append(
            [
                step["seq"],
                step["kind"],
                step["name"],
                status,
                "" if step["duration_ms"] is None else f"{step['duration_ms']:.1f}",
                f"{tokens['input']}/{tokens['output']}" if tokens else "",
                clip(step["args"]),
                step["error"] or clip(step.get("response", step.get("result", ""))),
            ]
        )
    out.table(
        f"timeline of {shown(run_id)}",
        ["seq", "step", "name", "status", "ms", "tokens", "arguments", "result / response / error"],
        rows,
    )
    if info["events"]:
        out.line("interruptions, resumes, resolutions and decisions:")
        for line in event_lines(info["events"]):
            out.line(line)
    for approval in pending_approvals(journal, run_id):
        out.line(
            f"pending approval {shown(approval['name'])}: {clip(approval['payload'])}", "yellow"
        )
    end = info.get("end")
    if end:
        out.line(
            f"ended {end['status']}"
            + (
                f": {clip(end['error'], 300)}"
                if end.get("error")
                else f", output {clip(end['output'])}"
            )
        )
    elif record.status == RunStatus.PAUSED.value:
        out.line(
            f"{record.error or 'paused'}; see what a resume will do with redrive plan "
            f"{shown(run_id)}, continue it with redrive resume {shown(run_id)}",
            "yellow",
        )
    else:
        out.line("no run_end: the run is unfinished (it may be resumed)")
    return EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``runs`` and ``show`` commands to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "runs",
        parents=[common],
        help="list runs with status, steps and age",
        description="List the runs of --journal, newest first: id, status (running runs no "
        "worker holds show as blocked when a step waits for a person), steps, frames, age "
        "since the last update (an imported run keeps its own time) and entrypoint.",
    )
    p.add_argument(
        "--status",
        choices=["running", "suspended", "paused", "succeeded", "failed", "cancelled", "blocked"],
        help="only runs of this status; blocked: running runs, no worker holding them, that "
        "stopped at a side effect in flight (a person settles it with redrive resolve); "
        "paused: stopped on a rate limit, a quota, a budget or used-up retries (the reason "
        "is shown; continue with redrive resume RUN or redrive recover)",
    )
    p.add_argument(
        "--stale",
        type=float,
        nargs="?",
        const=0.0,
        default=None,
        metavar="SECONDS",
        help="only running runs whose lease expired (at least SECONDS ago)",
    )
    p.add_argument("--entrypoint", help="only runs whose entrypoint contains this text")
    p.add_argument("--app-version", help="only runs recorded under this app version (fingerprint)")
    p.add_argument("--limit", type=int, metavar="N", help="list at most N runs (the newest)")
    p.set_defaults(func=_runs)

    p = sub.add_parser(
        "show",
        parents=[common],
        help="a run's timeline of steps",
        description="Print run RUN step by step (seq, kind, name, status, attempts, tokens, "
        "duration), its fingerprint and its end. Exit 3 when there is no such run.",
    )
    p.add_argument("run", help="run id in --journal, or an .rdj file")
    add_prices_option(p)
    p.set_defaults(func=_show)
