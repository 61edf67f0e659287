"""Operator commands: ``decide`` (an approval), ``resolve`` (an in-flight step), ``prune``.

Each writes only through the journal's own conditional operations, as
``cancel`` does: a decision is recorded once (the first wins), a resolution is
a conditional append refused while a worker holds the run's lease, and prune
deletes a run only while it is unchanged and unleased.
"""

from __future__ import annotations

import argparse
import getpass
import json
import shlex
import time

from ..errors import TerminalRunError, UnknownRunError
from ..replay import pending_approvals, resolve_step
from ..storage import RunStatus, prune_runs
from ._common import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError, Subparsers
from ._journals import opened
from ._output import Out, age, run_row, shown

__all__ = ["register"]

_DAY = 86400.0


def _login() -> str:
    """Who acts when ``--by`` is not given: the login name, else ``"cli"``."""
    try:
        return f"{getpass.getuser()} (cli)"
    except (OSError, KeyError):  # no login name in this environment
        return "cli"


def _decide(args: argparse.Namespace, out: Out) -> int:
    journal = opened(args.journal)
    record = journal.get_run(args.run)
    if record is None:
        raise UnknownRunError(
            f"no run {args.run!r} in journal {args.journal}; list runs with `redrive runs`",
            run_id=args.run,
        )
    if RunStatus(record.status).terminal:
        raise TerminalRunError(
            f"run {args.run!r} already ended with status {record.status}; a decision would "
            "never be read, and nothing was recorded.",
            run_id=args.run,
            seq=record.next_seq,
            status=record.status,
        )
    approved = bool(args.approve)
    existing = journal.decision(args.run, args.name)
    if existing is None:
        pending = [str(p["name"]) for p in pending_approvals(journal, args.run)]
        if args.name not in pending:
            raise CliError(
                "UnknownApprovalError",
                f"run {args.run!r} has not asked for approval {args.name!r}; it waits for "
                + (", ".join(repr(p) for p in pending) if pending else "no approval")
                + f". Check the name (`redrive show {shlex.quote(args.run)}` lists its "
                "approval_requested notes)",
                EXIT_NOT_FOUND,
            )
    decision = existing or journal.decide(
        args.run, args.name, approved, by=args.by or _login(), note=args.note or ""
    )
    first = existing is None
    data = {
        "journal": args.journal,
        "run_id": args.run,
        "name": args.name,
        "approved": decision.approved,
        "by": decision.by,
        "at": decision.at,
        "note": decision.note,
        "recorded": first,
    }
    if out.json:
        out.emit(data)
    else:
        verdict = "approved" if decision.approved else "rejected"
        if first:
            out.line(
                f"run {shown(args.run)}: approval {shown(args.name)} {verdict} by "
                f"{shown(decision.by)}; the run gets it when its loop resumes"
            )
        else:
            out.line(
                f"run {shown(args.run)}: approval {shown(args.name)} was already {verdict} by "
                f"{shown(decision.by)}; the first decision stands, nothing was changed"
            )
    if not first and decision.approved != approved:
        return EXIT_FAILED
    return EXIT_OK


def _resolve(args: argparse.Namespace, out: Out) -> int:
    journal = opened(args.journal)
    if args.done is not None:
        try:
            result = json.loads(args.done)
        except ValueError as exc:
            raise CliError(
                "UsageError",
                f"--done takes the tool's result as JSON (e.g. --done '{{\"ok\": true}}'): {exc}",
                EXIT_USAGE,
            ) from None
        state = "done"
    else:
        result, state = None, "not_done"
    try:
        step = resolve_step(
            journal,
            args.run,
            args.seq,
            state=state,  # type: ignore[arg-type]
            by=args.by or _login(),
            reason=args.reason,
            result=result,
        )
    except LookupError as exc:
        if isinstance(exc, UnknownRunError):
            raise
        raise CliError("UnknownStepError", str(exc), EXIT_NOT_FOUND) from None
    except (ValueError, TypeError) as exc:
        raise CliError("UsageError", str(exc), EXIT_USAGE) from None
    data = {
        "journal": args.journal,
        "run_id": args.run,
        "seq": args.seq,
        "tool": step.name,
        "state": state,
        "result": result,
        "idempotency_key": step.idempotency_key,
    }
    if out.json:
        out.emit(data)
    elif state == "done":
        out.line(
            f"run {shown(args.run)} seq {args.seq}: tool {shown(step.name)} resolved as done; "
            "resuming the run hands the loop this result"
        )
    else:
        out.line(
            f"run {shown(args.run)} seq {args.seq}: tool {shown(step.name)} resolved as not "
            f"done; resuming the run runs it again (idempotency key {shown(step.idempotency_key)})"
        )
    return EXIT_OK


def _prune(args: argparse.Namespace, out: Out) -> int:
    journal = opened(args.journal)
    if args.older_than < 0:
        raise CliError("UsageError", "--older-than takes a number of days >= 0", EXIT_USAGE)
    now = time.time()
    found = prune_runs(
        journal,
        older_than=args.older_than * _DAY,
        status=args.status,
        dry_run=args.dry_run,
        now=now,
    )
    if out.json:
        out.emit(
            {
                "journal": args.journal,
                "dry_run": found.dry_run,
                "deleted": [run_row(r) for r in found.deleted],
                "kept": [{"run": run_row(r), "reason": why} for r, why in found.kept],
            }
        )
        return EXIT_OK
    verb = "would delete" if found.dry_run else "deleted"
    if found.deleted:
        out.line(f"{verb} from {shown(args.journal)}:")  # piped, a table prints no title
        out.table(
            "",
            ["run_id", "status", "frames", "age"],
            [[r.run_id, r.status, r.next_seq, age(now - r.updated_at)] for r in found.deleted],
        )
    for record, why in found.kept:
        out.line(f"kept {shown(record.run_id)}: {shown(why)}")
    out.line(
        f"{verb} {len(found.deleted)} run(s) not updated for {args.older_than:g} day(s)"
        + (f", kept {len(found.kept)}" if found.kept else "")
        + (" (dry run: nothing was deleted)" if found.dry_run else "")
    )
    return EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add ``decide``, ``resolve`` and ``prune`` to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "decide",
        parents=[common],
        help="record a person's decision on a run's pending approval",
        description="Record the decision on approval NAME of RUN (the first decision wins; "
        "the suspended run gets it when its loop resumes). Exit 0 when recorded (or the same "
        "decision was already recorded); 1 when another decision was recorded first or the "
        "run already ended; 3 when there is no such run or pending approval.",
    )
    p.add_argument("run", help="run id in --journal")
    p.add_argument("name", help="the approval's name, as the loop asked for it")
    verdict = p.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--approve", action="store_true", help="approve it")
    verdict.add_argument("--reject", action="store_true", help="reject it")
    p.add_argument("--by", help="who decides (default: your login name)")
    p.add_argument("--note", help="a note kept with the decision")
    p.set_defaults(func=_decide)

    p = sub.add_parser(
        "resolve",
        parents=[common],
        help="settle an in-flight tool step whose outcome is unknown, naming who and why",
        description="A tool that was in flight when its worker died blocks its run "
        "(SideEffectRetryBlockedError). After checking the outside system, record whether "
        "it took effect: --done RESULT_JSON (resuming hands the loop that result) or "
        "--not-done (resuming runs the tool again, with the same idempotency key). Refused "
        "while a worker holds the run's lease. Exit 0 when recorded; 1 when the run ended "
        "or is leased; 2 when the step is not an in-flight tool step; 3 when there is no "
        "such run or step.",
    )
    p.add_argument("run", help="run id in --journal")
    p.add_argument("seq", type=int, help="the step's seq, as `redrive show RUN` lists it")
    outcome = p.add_mutually_exclusive_group(required=True)
    outcome.add_argument(
        "--done", metavar="RESULT_JSON", help="it took effect; this is what the tool returned"
    )
    outcome.add_argument("--not-done", action="store_true", help="it did not take effect")
    p.add_argument("--by", help="who checked (default: your login name)")
    p.add_argument("--reason", required=True, help="what was checked (kept in the journal)")
    p.set_defaults(func=_resolve)

    p = sub.add_parser(
        "prune",
        parents=[common],
        help="delete runs not updated for DAYS days (retention)",
        description="Delete runs whose last update is older than --older-than days: by "
        "default the ended ones (succeeded, failed, cancelled). A run a worker holds the "
        "lease of, or that changed after it was listed, is kept. --dry-run lists what "
        "would be deleted.",
    )
    p.add_argument(
        "--older-than",
        type=float,
        required=True,
        metavar="DAYS",
        help="delete runs whose last update (an imported run's own, not the import's) is at "
        "least DAYS days old (fractions allowed: 0.5 is twelve hours)",
    )
    p.add_argument(
        "--status",
        choices=[s.value for s in RunStatus],
        help="only runs of this status (default: succeeded, failed and cancelled)",
    )
    p.add_argument("--dry-run", action="store_true", help="delete nothing; list what would go")
    p.set_defaults(func=_prune)
