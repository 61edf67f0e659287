"""Journal storage: the Journal protocol and its backends.

Backends are chosen by URL and imported lazily::

    open_journal("runs.duckdb")             # DuckDB file (default, embedded)
    open_journal(":memory:")                # in this process's memory
    open_journal("postgresql://host/db")    # Postgres, for many workers
    open_journal("incident.rdj")            # an exported run (read-only)

:func:`shared_journal` returns one journal per URL per process (a DuckDB file
cannot be open twice for writing in one process).
"""

from __future__ import annotations

import atexit
import sys
import threading

from ._base import (
    Decision,
    Journal,
    RunRecord,
    RunStatus,
    RunUpdate,
    cancel_text,
    held_by_other,
)
from ._copy import copy_run, load_checked
from ._limits import MAX_VALUE
from ._prune import PruneResult, prune_runs
from ._url import JournalURL, parse_journal_url
from ._validate import check_row, frame_problem, passed, passed_as_built, run_problem
from ._verify import verify_frames, verify_run
from .memory import MemoryJournal

__all__ = [
    "Decision",
    "Journal",
    "JournalURL",
    "MAX_VALUE",
    "MemoryJournal",
    "PruneResult",
    "RunRecord",
    "RunStatus",
    "RunUpdate",
    "cancel_text",
    "check_row",
    "copy_run",
    "frame_problem",
    "held_by_other",
    "load_checked",
    "open_journal",
    "parse_journal_url",
    "passed",
    "passed_as_built",
    "prune_runs",
    "run_problem",
    "shared_journal",
    "verify_frames",
    "verify_run",
]

_shared: dict[str, Journal] = {}
_shared_lock = threading.Lock()
_atexit_registered = False


def open_journal(url: str = "runs.duckdb", **options: object) -> Journal:
    """Open (creating when needed) the journal at ``url``.

    Args:
        url: ``":memory:"``; ``"postgresql://..."`` / ``"postgres://..."``;
            a path ending in ``.rdj`` (read-only export file); ``"duckdb:///path"``
            or any other path (a DuckDB file).
        **options: passed to the backend (e.g. ``read_only=True`` for DuckDB).

    Returns:
        A :class:`Journal`.

    Raises:
        JournalLockedError: a DuckDB file in use by another process.
        JournalFormatError: a journal of a format version this redrive cannot read.
        ImportError: the backend's extra is not installed (the message names it).
    """
    parsed = parse_journal_url(url)
    if parsed.scheme == "memory":
        return MemoryJournal()
    if parsed.scheme == "postgres":
        try:
            from .postgres import PostgresJournal
        except ImportError as exc:
            raise ImportError(
                f"the Postgres journal needs psycopg 3: pip install 'redrive[postgres]' ({exc})"
            ) from exc
        return PostgresJournal(url, **options)  # type: ignore[arg-type]
    assert parsed.path is not None
    if parsed.scheme == "rdj":
        from .rdj import RdjJournal

        return RdjJournal(parsed.path, **options)  # type: ignore[arg-type]
    from .duckdb import DuckDBJournal

    return DuckDBJournal(parsed.path, **options)  # type: ignore[arg-type]


def shared_journal(url: str) -> Journal:
    """Return this process's journal for ``url``, opening it on first use.

    Every call with the same URL (for files: the same real path, however it is
    spelled) returns the same journal object, from any thread. Use it wherever
    a journal is named by URL, so that one process never holds two journal
    objects on one DuckDB file. The journals are closed when the process exits
    (:mod:`atexit`); a shared journal that was closed by hand is opened again
    on the next call.

    Args:
        url: as for :func:`open_journal` (opened with default options).

    Returns:
        The shared :class:`Journal`.

    Raises:
        JournalLockedError: the DuckDB file is open in another process, or
            in this process through a journal object not obtained here.
        JournalFormatError, JournalCorruptError, ImportError: as :func:`open_journal`.
    """
    global _atexit_registered
    key = parse_journal_url(url).key
    with _shared_lock:
        journal = _shared.get(key)
        if journal is not None and not getattr(journal, "closed", False):
            return journal
        journal = open_journal(url)
        _shared[key] = journal
        if not _atexit_registered:
            atexit.register(_close_shared)
            _atexit_registered = True
        return journal


def _close_shared() -> None:
    """Close every shared journal (at exit); report a failed close on stderr."""
    with _shared_lock:
        journals = list(_shared.values())
        _shared.clear()
    for journal in journals:
        if getattr(journal, "closed", False):
            continue
        try:
            journal.close()
        except Exception as exc:  # at exit: report it, then close the others
            print(
                f"redrive: closing journal {getattr(journal, 'url', journal)!r} at exit "
                f"failed: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
