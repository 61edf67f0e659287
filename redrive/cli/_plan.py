"""``redrive plan RUN`` (what a resume will do) and ``redrive resume RUN`` (continue one run)."""

from __future__ import annotations

import argparse

from .._plan import plan
from .._recover import BAD_OUTCOMES, recover_runs
from ..errors import UnknownRunError
from ._common import EXIT_FAILED, EXIT_OK, Subparsers, add_import_path, import_paths
from ._journals import opened, source
from ._output import Out, age, shown

__all__ = ["register"]


def _plan(args: argparse.Namespace, out: Out) -> int:
    journal, run_id = source(args.run, args.journal)
    found = plan(
        journal,
        run_id,
        import_paths=import_paths(args),
        replay=not args.no_replay,
        on_drift=args.on_drift,
    )
    if out.json:
        out.emit(found.to_dict())
    else:
        out.line(found.summary())
    return EXIT_FAILED if found.first_decision is not None or found.outcome == "ended" else EXIT_OK


def _resume(args: argparse.Namespace, out: Out) -> int:
    journal = opened(args.journal)
    record = journal.get_run(args.run)
    if record is None:
        raise UnknownRunError(
            f"no run {args.run!r} in journal {args.journal}: check the run id (redrive runs)",
            run_id=args.run,
        )
    report = recover_runs(journal, runs=[record], lease=args.lease, import_paths=import_paths(args))
    (result,) = report.results
    if out.json:
        out.emit({"journal": args.journal, "ok": report.ok, "result": result.to_dict()})
    else:
        style = "red" if result.outcome in BAD_OUTCOMES else "green"
        style = "yellow" if result.outcome in ("busy", "suspended", "paused") else style
        out.line(
            f"{result.outcome:<12} {shown(result.run_id)}  ({age(result.duration)})  "
            f"{result.message}",
            style,
        )
    moved_on = ("recovered", "already_done", "suspended")
    return EXIT_OK if result.outcome in moved_on else EXIT_FAILED


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``plan`` and ``resume`` commands to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "plan",
        parents=[common],
        help="what resuming a run will do, step by step, before anything runs",
        description="Read RUN's journal and the current code (its entrypoint imported from "
        "the current directory and each -I DIR) and print, step by step, what a resume "
        "does: replay, run live, re-run or recover() or block a step in flight, re-ask or "
        "diverge where the code changed, wait for an approval; and the first step a person "
        "must decide. Nothing is written and no model or tool is called. Exit 0 when the "
        "resume needs nobody, 1 when a person must decide first (or the run ended), 3 when "
        "there is no such run.",
    )
    p.add_argument("run", help="run id in --journal, or an .rdj file")
    add_import_path(p)
    p.add_argument(
        "--no-replay",
        action="store_true",
        help="do not re-drive the entrypoint replay-only to find drifting steps",
    )
    p.add_argument(
        "--on-drift",
        choices=["raise", "continue_live"],
        default="raise",
        help="the resume's drift policy (default raise: strict replay)",
    )
    p.set_defaults(func=_plan)
    p = sub.add_parser(
        "resume",
        parents=[common],
        help="continue one run (interrupted, suspended, paused) through its entrypoint",
        description="Re-drive RUN through its recorded @redrive.durable entrypoint and input "
        "under a run lease, whatever resumable state it is in (interrupted, approved, "
        "paused, resolved): recorded steps replay, the rest runs live. Run `redrive plan "
        "RUN` first to see what it will do. Exit 0 when it finished (or suspended on an "
        "approval), 1 when it did not (blocked, diverged, failed, paused again, held by "
        "another worker's lease, entrypoint not loadable).",
    )
    p.add_argument("run", help="run id in --journal")
    add_import_path(p)
    p.add_argument(
        "--lease", type=float, default=30.0, metavar="SECONDS", help="run lease (default 30)"
    )
    p.set_defaults(func=_resume)
