"""The ``redrive`` parser and :func:`main`: run one command, map its errors to exit codes."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence

from .._runid import check_run_id
from ..errors import (
    JournalCorruptError,
    JournalFormatError,
    JournalLockedError,
    ReplayError,
    UnknownRunError,
)
from . import (
    _cancel,
    _check,
    _damaged,
    _demo,
    _diff,
    _operate,
    _plan,
    _recover,
    _runs,
    _sql,
    _transfer,
    _view,
    _whatchanged,
)
from ._common import (
    EXIT_FAILED,
    EXIT_JOURNAL,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    is_database_error,
    unreadable,
    with_journal,
)
from ._journals import close_opened
from ._output import Out, block

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="redrive",
        description="Inspect, move, verify and check redrive journals; operate runs (cancel, "
        "decide, resolve, prune).",
        epilog="exit codes: 0 ok; 1 check/verify/diff negative or replay error; 2 usage "
        "(or a missing optional dependency); 3 not found; 4 journal unreadable (corrupt, "
        "newer format, locked, cannot connect); 65 bad input data (a malformed or hostile "
        "cassette)",
    )
    parser.add_argument(
        "--journal",
        default=os.environ.get("REDRIVE_JOURNAL", "runs.duckdb"),
        help="journal URL: a DuckDB file (default runs.duckdb, or $REDRIVE_JOURNAL), "
        "postgresql://... (needs redrive[postgres]), or an .rdj file (read-only)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--version", action="version", version=f"redrive {_version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        _runs,
        _damaged,
        _cancel,
        _operate,
        _transfer,
        _diff,
        _sql,
        _demo,
        _check,
        _recover,
        _plan,
        _whatchanged,
        _view,
    ):
        module.register(sub, common)
    return parser


def _version() -> str:
    """The installed redrive's version (``importlib.metadata``), or ``"unknown"``."""
    import importlib.metadata

    try:
        return importlib.metadata.version("redrive")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        return "unknown"


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse arguments no command can use, before any journal is opened.

    Every text argument must be valid Unicode without NUL (a shell can pass
    bytes that are not UTF-8: Python keeps them as lone surrogates, which no
    journal stores; Postgres stores no NUL in text);
    run ids follow the one run-id rule; who acts and why, when given, are not
    blank; numbers are finite.

    Raises:
        CliError: a usage error (exit 2) naming the argument.
    """
    for name, value in vars(args).items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise CliError(
                    "UsageError", f"{_flag(name)} is not valid UTF-8 text: {value!r}", EXIT_USAGE
                ) from None
            if "\x00" in value:  # Postgres stores no NUL in text; no journal takes it
                raise CliError("UsageError", f"{_flag(name)} contains a NUL byte", EXIT_USAGE)
        elif isinstance(value, float) and not math.isfinite(value):
            raise CliError("UsageError", f"{_flag(name)} must be a finite number", EXIT_USAGE)
    run = getattr(args, "run", None)
    if isinstance(run, str) and not run.endswith((".rdj", ".jsonl")):
        try:
            check_run_id(run, where="the run id")
        except ValueError as exc:
            raise CliError("UsageError", str(exc), EXIT_USAGE) from None
    for name in ("by", "reason"):
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            raise CliError("UsageError", f"{_flag(name)} must not be blank", EXIT_USAGE)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-") if name not in ("run", "query", "sql") else name


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``redrive`` command line.

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).

    Returns:
        The exit code (see :mod:`redrive.cli`). Errors are reported, never raised,
        except an unexpected one (a bug), which propagates with its traceback.
    """
    parser = _parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "demo":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    if args.command == "demo":
        args.rest = [*extra, *args.rest]
    out = Out(bool(args.json))

    def fail(exc: BaseException, exit_code: int) -> int:
        name = exc.name if isinstance(exc, CliError) else type(exc).__name__
        message = with_journal(str(exc), args.journal)  # its hints name this journal
        if out.json:
            fields = exc.to_fields() if isinstance(exc, ReplayError) else {}
            out.emit({"error": name, **fields, "message": message})
        else:
            print(block(f"redrive {args.command}: {name}: {message}"), file=sys.stderr)
        return exit_code

    try:
        try:
            _check_arguments(args)
            return int(args.func(args, out))
        finally:
            close_opened()
    except (UnknownRunError, FileNotFoundError) as exc:
        return fail(exc, EXIT_NOT_FOUND)
    except (JournalCorruptError, JournalFormatError, JournalLockedError) as exc:
        return fail(exc, EXIT_JOURNAL)
    except CliError as exc:
        return fail(exc, exc.exit_code)
    except (ReplayError, PermissionError) as exc:
        return fail(exc, EXIT_FAILED)
    except BrokenPipeError:  # pragma: no cover - `redrive runs | head`
        return EXIT_OK
    except ConnectionError as exc:  # a journal database that cannot be reached
        return fail(exc, EXIT_JOURNAL)
    except Exception as exc:
        if is_database_error(exc):  # the journal's database failed while being read
            return fail(unreadable(args.journal, exc), EXIT_JOURNAL)
        raise
