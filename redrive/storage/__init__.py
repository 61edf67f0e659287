"""Journal storage: the Journal protocol and its backends.

Backends are chosen by URL and imported lazily::

    open_journal("runs.duckdb")             # DuckDB file (default, embedded)
    open_journal(":memory:")                # in this process's memory
    open_journal("postgresql://host/db")    # Postgres, for many workers
    open_journal("incident.rdj")            # an exported run (read-only)
"""

from __future__ import annotations

from ._base import (
    Decision,
    Journal,
    RunRecord,
    RunStatus,
    RunUpdate,
    verify_frames,
)
from .memory import MemoryJournal

__all__ = [
    "Decision",
    "Journal",
    "MemoryJournal",
    "RunRecord",
    "RunStatus",
    "RunUpdate",
    "open_journal",
    "verify_frames",
]


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
    if url == ":memory:":
        return MemoryJournal()
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresJournal
        except ImportError as exc:
            raise ImportError(
                f"the Postgres journal needs psycopg 3: pip install 'redrive[postgres]' ({exc})"
            ) from exc
        return PostgresJournal(url, **options)  # type: ignore[arg-type]
    if url.endswith(".rdj"):
        from .rdj import RdjJournal

        return RdjJournal(url, **options)  # type: ignore[arg-type]
    from .duckdb import DuckDBJournal

    path = url.removeprefix("duckdb://") if url.startswith("duckdb://") else url
    return DuckDBJournal(path, **options)  # type: ignore[arg-type]
