"""What every command module shares: exit codes, one-line errors, the subcommands type."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from typing import TypeAlias

from ..errors import JournalCorruptError

__all__ = [
    "add_import_path",
    "import_paths",
    "EXIT_DATA",
    "EXIT_FAILED",
    "EXIT_JOURNAL",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "Subparsers",
    "is_database_error",
    "one_line",
    "unreadable",
    "with_journal",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_JOURNAL = 4
#: Bad input data (a malformed or hostile cassette, a file whose run id breaks the rule):
#: ``EX_DATAERR`` of BSD's sysexits(3), so a script tells it from a usage error (2).
EXIT_DATA = 65

#: The ``redrive`` parser's subcommands, to which each command module adds its own.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CliError(Exception):
    """An error reported as ``name: message`` (one line) with its own exit code.

    Args:
        name: the error name printed before the message (e.g. ``"QueryError"``).
        message: one line saying what went wrong and what to do next.
        exit_code: the process exit code (one of the ``EXIT_*`` constants).
    """

    def __init__(self, name: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.name = name
        self.exit_code = exit_code


def one_line(text: str) -> str:
    """Return a database or parser message on one line, without its source-position drawing."""
    lines = [line.strip() for line in str(text).splitlines()]
    kept = [
        line for line in lines if line and not line.startswith("LINE ") and set(line) - set("^ ")
    ]
    return " ".join(kept)


#: A command hint in a message: ```redrive ...``` not naming a journal already.
_HINT = re.compile(r"`redrive (?!--journal )")


def with_journal(text: str, url: str) -> str:
    """Return ``text`` with every ```redrive ...``` hint naming the journal ``url``.

    Errors raised by the library say "list runs with `redrive runs`"; printed by a
    command that was given ``--journal URL``, the hint must name that journal too,
    or it would list another one. Hints that name a journal are left as they are.

    Args:
        text: a message.
        url: the ``--journal`` URL the command used.

    Returns:
        The message with ``--journal URL`` (shell-quoted) after each hint's ``redrive``.
    """
    return _HINT.sub(f"`redrive --journal {shlex.quote(url)} ", text)


def is_database_error(exc: BaseException) -> bool:
    """Return True for an error raised by the DuckDB or psycopg driver (imports neither)."""
    module = type(exc).__module__ or ""
    return module.split(".")[0] in ("duckdb", "_duckdb", "psycopg")


def unreadable(url: str, exc: BaseException) -> JournalCorruptError:
    """Return the error for a journal whose database rejected being opened or read.

    Args:
        url: the journal URL as given to ``--journal``.
        exc: the driver's error (its message is kept, on one line).

    Returns:
        A :class:`~redrive.errors.JournalCorruptError` with ``reason="unreadable"``.
    """
    return JournalCorruptError(
        f"cannot open journal {url}: {one_line(str(exc))}; check that --journal names a "
        "redrive journal (a DuckDB file, postgresql://... or an .rdj file)",
        source=url,
        reason="unreadable",
    )


def add_import_path(p: argparse.ArgumentParser) -> None:
    """Add ``-I/--import-path DIR`` (repeatable) to a command that imports entrypoints."""
    p.add_argument(
        "-I",
        "--import-path",
        action="append",
        default=[],
        metavar="DIR",
        help="also import entrypoints from DIR (repeatable; the current directory "
        "is always searched)",
    )


def import_paths(args: argparse.Namespace) -> list[str]:
    """The directories to import entrypoints from: each ``-I DIR``, then the current one."""
    return [*(os.path.abspath(d) for d in args.import_path), os.getcwd()]
