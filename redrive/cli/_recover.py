"""``redrive recover``: re-drive stale runs through their entrypoint (``recover_runs``)."""

from __future__ import annotations

import argparse
from typing import Any

from .._entry import import_paths as _import_paths
from .._plan import plan
from .._recover import RecoverResult, recover_runs
from .._resumable import resumable_runs
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_import_path,
    import_paths,
)
from ._journals import opened
from ._output import Out, age, shown

__all__ = ["register"]


def _recover(args: argparse.Namespace, out: Out) -> int:
    journal = opened(args.journal)
    imports = import_paths(args)
    if args.stale < 0:
        raise CliError("UsageError", f"--stale {args.stale}: use 0 or more seconds", EXIT_USAGE)
    if args.dry_run:
        found = resumable_runs(
            journal,
            stale=args.stale,
            entrypoint=args.entrypoint,
            status=args.status,
            import_paths=imports,
        )
        return _dry_run(args, out, journal, found, imports)
    with out.progress("recovering runs", None) as update:

        def progress(result: RecoverResult, done: int, total: int) -> None:
            update(done, total)

        report = recover_runs(
            journal,
            stale=args.stale,
            entrypoint=args.entrypoint,
            status=args.status,
            jobs=args.jobs,
            lease=args.lease,
            import_paths=imports,
            on_result=progress,
        )
    if out.json:
        out.emit(
            {
                "journal": args.journal,
                "ok": report.ok,
                "summary": report.summary(),
                "results": [r.to_dict() for r in report.results],
            }
        )
    else:
        for r in report.results:
            style = "green" if r.outcome in ("recovered", "already_done") else "red"
            if r.outcome in ("busy", "suspended", "left", "paused"):
                style = "yellow"
            out.line(f"{r.outcome:<12} {shown(r.run_id)}  ({age(r.duration)})  {r.message}", style)
        out.line(report.summary(), "bold")
    return EXIT_OK if report.ok else EXIT_FAILED


def _dry_run(
    args: argparse.Namespace, out: Out, journal: Any, found: list[Any], imports: list[str]
) -> int:
    """Print what recover would do: each run it would drive with its plan, each it leaves."""
    plans = []
    with _import_paths(imports):
        for c in found:
            if c.drive:
                plans.append(plan(journal, c.run_id, import_paths=imports))
    driven = iter(plans)
    if out.json:
        out.emit(
            {
                "journal": args.journal,
                "dry_run": True,
                "runs": [c.run_id for c in found if c.drive],
                "candidates": [
                    {
                        "run_id": c.run_id,
                        "state": c.state,
                        "drive": c.drive,
                        "why": c.why,
                        "plan": next(driven).to_dict() if c.drive else None,
                    }
                    for c in found
                ],
            }
        )
        return EXIT_OK
    for c in found:
        if c.drive:
            out.line(f"would recover {shown(c.run_id)} ({c.state}): {c.why}", "bold")
            out.line(next(driven).summary())
        else:
            out.line(f"would leave {shown(c.run_id)} ({c.state}): {c.why}", "yellow")
    total = sum(1 for c in found if c.drive)
    out.line(f"{total} run(s) to recover, {len(found) - total} left alone", "bold")
    return EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``recover`` command to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "recover",
        parents=[common],
        help="re-drive interrupted runs through their recorded @redrive.durable entrypoint",
        description="Look at every run not ended and re-drive each one that can continue "
        "now through its recorded @redrive.durable entrypoint and input, under a run lease "
        "(recoverers racing on Postgres drive each run once): interrupted runs (no write for "
        "--stale SECONDS, no live lease), runs suspended on an approval that is now decided, "
        "runs paused on what waiting clears (a rate limit, used-up retries), runs whose side "
        "effect in flight a person resolved. Every run left alone is listed with why (held "
        "by a worker, an approval undecided, paused on a quota or budget, blocked on a side "
        "effect in flight). Entrypoints are imported from the current directory and each -I "
        "DIR. Exit 0 when every run was recovered, had already ended, is held by another "
        "worker or waits (left alone); 1 when any failed, is blocked, diverged, stopped "
        "again or could not be loaded.",
    )
    p.add_argument(
        "--stale",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds since a run's last write before it counts as stale (default 60)",
    )
    p.add_argument("--entrypoint", help="only runs whose entrypoint contains this text")
    p.add_argument(
        "--status",
        choices=["running", "suspended", "paused"],
        default=None,
        help="only runs of this status, every one that no worker holds (default: every "
        "resumable state: interrupted, approved, paused on what waiting clears, resolved; "
        "each run left alone is listed with why)",
    )
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="runs driven at once")
    p.add_argument(
        "--lease", type=float, default=30.0, metavar="SECONDS", help="run lease (default 30)"
    )
    add_import_path(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="show each run's resume plan (redrive plan) and each run left alone; re-drive nothing",
    )
    p.set_defaults(func=_recover)
