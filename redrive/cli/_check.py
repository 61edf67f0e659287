"""``redrive check``: re-drive saved runs against the current code (:func:`redrive.check_runs`)."""

from __future__ import annotations

import argparse
import os

from .._check import CheckReport, CheckResult, collect_sources, iter_checks, write_junit
from ._common import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError, Subparsers
from ._output import Out

__all__ = ["register"]


def _print(report: CheckReport, out: Out, *, fail_fast: bool) -> None:
    if out.json:
        out.emit(
            {
                "ok": report.ok,
                "summary": report.summary(),
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
            out.line(f"PASS  {r.source} ({r.run_id}, {r.replayed_steps} steps replayed)", "green")
        else:
            out.line(f"FAIL  {r.source} ({r.run_id}): {r.outcome}", "red")
            out.line("      " + r.message.replace("\n", "\n      "))
    out.line(
        report.summary()
        + (" (stopped at the first failure)" if fail_fast and report.failed else ""),
        "bold",
    )


def _check(args: argparse.Namespace, out: Out) -> int:
    try:
        sources = collect_sources(args.paths)
    except ValueError as exc:
        raise CliError("UsageError", str(exc), EXIT_USAGE) from None
    results: list[CheckResult] = []
    with out.progress("checking runs", len(sources)) as update:
        for result in iter_checks(
            sources,
            fail_fast=args.fail_fast,
            import_paths=[*(os.path.abspath(d) for d in args.import_path), os.getcwd()],
            jobs=args.jobs,
        ):
            results.append(result)
            update(len(results), len(sources))
    report = CheckReport(tuple(results))
    if args.junit_xml:
        write_junit(report, args.junit_xml)
    _print(report, out, fail_fast=args.fail_fast)
    if not results:
        return EXIT_NOT_FOUND
    return EXIT_OK if report.ok else EXIT_FAILED


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``check`` command to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "check",
        parents=[common],
        help="re-drive saved runs against the current code (strict, replay only)",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help=".rdj files or directories")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    p.add_argument("--junit-xml", metavar="FILE", help="write a JUnit XML report")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="check in N worker processes (0: one per CPU core; default 1); "
        "results are reported in the order of the files",
    )
    p.add_argument(
        "-I",
        "--import-path",
        action="append",
        default=[],
        metavar="DIR",
        help="also import entrypoints from DIR (repeatable; the current directory "
        "is always searched)",
    )
    p.set_defaults(func=_check)
