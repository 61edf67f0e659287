"""``redrive check``: re-drive saved runs against the current code (:func:`redrive.check_runs`)."""

from __future__ import annotations

import argparse

from .._check import CheckReport, CheckResult, collect_sources, iter_checks, write_junit
from .._update import update_run
from ._common import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_import_path,
    import_paths,
)
from ._output import Out, shown

__all__ = ["register"]


def _print(report: CheckReport, out: Out, *, fail_fast: bool, workers: int) -> None:
    if out.json:
        out.emit(
            {
                "ok": report.ok,
                "summary": report.summary(),
                "workers": workers,
                "results": [
                    {
                        "source": r.source,
                        "run_id": r.run_id,
                        "outcome": r.outcome,
                        "seq": r.seq,
                        "message": r.message,
                        "replayed_steps": r.replayed_steps,
                    }
                    for r in report.results
                ],
            }
        )
        return
    for r in report.results:
        if r.passed:
            out.line(
                f"PASS  {shown(r.source)} ({shown(r.run_id)}, {r.replayed_steps} steps replayed)",
                "green",
            )
        else:
            out.line(f"FAIL  {shown(r.source)} ({shown(r.run_id)}): {r.outcome}", "red")
            out.line("      " + r.message.replace("\n", "\n      "))
    out.line(
        report.summary()
        + (" (stopped at the first failure)" if fail_fast and report.failed else ""),
        "bold",
    )


def _update(sources: list[str], args: argparse.Namespace, out: Out) -> int:
    """``check --update``: re-drive each run with its recorded model responses; maybe rewrite."""
    paths = tuple(import_paths(args))
    results = [update_run(s, write=args.write, import_paths=paths) for s in sources]
    if out.json:
        out.emit(
            {
                "ok": all(r.ok for r in results),
                "results": [
                    {
                        "source": r.source,
                        "run_id": r.run_id,
                        "outcome": r.outcome,
                        "message": r.message,
                        "changes": [
                            [seq, name, [list(d) for d in diff]] for seq, name, diff in r.changes
                        ],
                        "output_diff": [list(d) for d in r.output_diff],
                    }
                    for r in results
                ],
            }
        )
    else:
        for r in results:
            style = {"unchanged": "green", "failed": "red"}.get(r.outcome, "yellow")
            out.line(f"{r.outcome.upper():9} {shown(r.source)} ({shown(r.run_id)})", style)
            out.line("      " + r.message.replace("\n", "\n      "))
    if not results:
        return EXIT_NOT_FOUND
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def _check(args: argparse.Namespace, out: Out) -> int:
    try:
        sources = collect_sources(args.paths)
    except ValueError as exc:
        raise CliError("UsageError", str(exc), EXIT_USAGE) from None
    if args.write and not args.update:
        raise CliError("UsageError", "--write goes with --update", EXIT_USAGE)
    if args.update:
        return _update(sources, args, out)
    results: list[CheckResult] = []
    workers = [1]  # what --jobs 0 chose (--json reports it)
    with out.progress("checking runs", len(sources)) as update:
        for result in iter_checks(
            sources,
            fail_fast=args.fail_fast,
            import_paths=import_paths(args),
            jobs=args.jobs,
            chosen=lambda n: workers.__setitem__(0, n),
        ):
            results.append(result)
            update(len(results), len(sources))
    report = CheckReport(tuple(results))
    if args.junit_xml:
        write_junit(report, args.junit_xml)
    _print(report, out, fail_fast=args.fail_fast, workers=workers[0])
    if not results:
        return EXIT_NOT_FOUND
    return EXIT_OK if report.ok else EXIT_FAILED


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``check`` command to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "check",
        parents=[common],
        help="re-drive saved runs against the current code (strict, replay only)",
        description="Re-drive each saved run (.rdj files, or the files in each directory) "
        "through its recorded entrypoint, replay only and strict: no model call, no tool "
        "body. Exit 0 when every run replays, 1 when one diverges or goes live.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help=".rdj files or directories")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    p.add_argument("--junit-xml", metavar="FILE", help="write a JUnit XML report")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="check in N worker processes (0: measure the first runs, then one worker "
        "per idle core when they save more than they cost to start, else this process "
        "alone; default 1); results are reported in the order of the files",
    )
    add_import_path(p)
    p.add_argument(
        "--update",
        action="store_true",
        help="re-drive each run with its recorded model responses (by position) and show "
        "how the current code's requests and output differ; with --write, rewrite the file",
    )
    p.add_argument(
        "--write", action="store_true", help="with --update: rewrite each changed .rdj file"
    )
    p.set_defaults(func=_check)
