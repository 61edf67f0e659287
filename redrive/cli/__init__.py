"""The ``redrive`` command line: thin commands over the library.

Output is a rich table in a terminal, tab-separated text when piped, and one
JSON document with ``--json`` (every command). Progress bars go to stderr, in
a terminal only.

Exit codes:

    0  success (a check passed, a verify found the chain intact, a diff found no difference)
    1  a negative result: a check failed, verify found corruption, diff found a difference,
       or a replay error (e.g. ``cancel`` of a run that already ended: ``TerminalRunError``;
       ``cancel`` in a read-only ``.rdj`` file: ``PermissionError``)
    2  usage error: bad arguments (an invalid ``--run-id``, an unknown ``--provider``), a
       cassette run id that already exists, a SQL query DuckDB rejects (``QueryError``) or
       one that is not read-only (``ReadOnlyError``), or an optional dependency the command
       needs is not installed (``ImportError``: psycopg for a Postgres journal, PyYAML for
       cassettes)
    3  not found: no such run, file or journal
    4  the journal cannot be read: corrupt or not a journal at all (e.g. a file that is not a
       DuckDB database), of a newer format, locked by another process, or its database
       cannot be connected to
    65 bad input data (``EX_DATAERR``): a cassette that is malformed (not YAML/JSON, not the
       shape of a VCR cassette), over a reading limit (alias expansion, nesting, decoded
       size), holds a stream cut off before its final event, or could not be read in the
       memory available (``CassetteError``); an ``.rdj`` file whose run id breaks the
       run-id rule

Everything printed is data, never markup: values are rich ``Text`` (``[/]`` prints as
itself) and control characters are backslash-escaped (``\\n``, ``\\t``, ``\\x1b``), so a
value cannot fake a row of the tab-separated output or drive the terminal. A hint in a
message (```redrive runs```) names the journal the command used and runs as printed.

Errors are one line on stderr, ``redrive COMMAND: ErrorName: message``; with
``--json`` they are one JSON document ``{"error": ErrorName, "message": ...}``
on stdout instead.

Modules: :mod:`._main` (the parser and :func:`main`), one module per group of
commands (:mod:`._runs`: runs, show; :mod:`._cancel`; :mod:`._operate`: decide, resolve,
prune; :mod:`._transfer`: export, import,
verify, import-cassette; :mod:`._diff`; :mod:`._sql`; :mod:`._check`;
:mod:`._demo`), and what they share: :mod:`._common` (exit codes, one-line
errors), :mod:`._journals` (opening journals), :mod:`._output` (``--json``,
rich tables, plain text).
"""

from __future__ import annotations

from ._common import (
    EXIT_DATA,
    EXIT_FAILED,
    EXIT_JOURNAL,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
)
from ._main import main

__all__ = [
    "EXIT_DATA",
    "EXIT_FAILED",
    "EXIT_JOURNAL",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "main",
]
