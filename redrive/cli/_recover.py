"""``redrive recover``: re-drive stale runs through their entrypoint (``recover_runs``)."""

from __future__ import annotations

import argparse

from .._recover import RecoverResult, recover_runs, stale_runs
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
    try:
        todo = stale_runs(journal, stale=args.stale, entrypoint=args.entrypoint, status=args.status)
    except ValueError as exc:
        raise CliError("UsageError", str(exc), EXIT_USAGE) from None
    if args.dry_run:
        if out.json:
            ids = [row.run_id for row in todo]
            out.emit({"journal": args.journal, "dry_run": True, "runs": ids})
        else:
            for row in todo:
                out.line(
                    f"would recover {shown(row.run_id)}  "
                    f"({shown(row.entrypoint or 'no entrypoint')})"
                )
            out.line(f"{len(todo)} run(s) to recover", "bold")
        return EXIT_OK
    imports = import_paths(args)
    with out.progress("recovering runs", len(todo)) as update:

        def progress(result: RecoverResult, done: int, total: int) -> None:
            update(done, total)

        report = recover_runs(
            journal,
            runs=todo,
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
            if r.outcome in ("busy", "suspended"):
                style = "yellow"
            out.line(f"{r.outcome:<12} {shown(r.run_id)}  ({age(r.duration)})  {r.message}", style)
        out.line(report.summary(), "bold")
    return EXIT_OK if report.ok else EXIT_FAILED


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``recover`` command to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "recover",
        parents=[common],
        help="re-drive interrupted runs through their recorded @redrive.durable entrypoint",
        description="Find stale runs (no write for --stale SECONDS, no live lease) and "
        "re-drive each through its recorded @redrive.durable entrypoint and input, under a "
        "run lease (recoverers racing on Postgres drive each run once). Entrypoints are "
        "imported from the current directory and each -I DIR. Exit 0 when every run was "
        "recovered, had already ended, or is held by another worker; 1 when any failed, "
        "was blocked, diverged, stopped again or could not be loaded.",
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
        choices=["running", "suspended"],
        default="running",
        help="which runs (default running: interrupted)",
    )
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="runs driven at once")
    p.add_argument(
        "--lease", type=float, default=30.0, metavar="SECONDS", help="run lease (default 30)"
    )
    add_import_path(p)
    p.add_argument("--dry-run", action="store_true", help="list the runs, re-drive nothing")
    p.set_defaults(func=_recover)
