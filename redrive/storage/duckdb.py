"""The DuckDB journal: the embedded default (a file path, or ``":memory:"`` in DuckDB).

DuckDB lets one process at a time open a database file for writing. A second
process gets :class:`~redrive.errors.JournalLockedError`; for many workers use
the Postgres journal. Within a process the journal is thread-safe: all
statements go through one connection under a lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import duckdb

from ..errors import JournalLockedError
from ._sql import Cursor, SqlJournal

__all__ = ["DuckDBJournal"]


class DuckDBJournal(SqlJournal):
    """Journal in a DuckDB database file.

    Args:
        path: the database file (created when missing), or ``":memory:"``.
        read_only: open without writing (several processes may read at once).

    Raises:
        JournalLockedError: another process has the file open for writing.
        JournalFormatError: the file holds a journal of another format version.
    """

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = path
        self.url = path
        self.read_only = read_only
        self.durable = path != ":memory:"
        self._lock = threading.RLock()
        try:
            self._con = duckdb.connect(path, read_only=read_only)
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise JournalLockedError(
                    f"DuckDB journal {os.path.abspath(path)} is open for writing in another "
                    "process; DuckDB allows one writing process per file. Stop that process, "
                    "open the file read-only, or use a Postgres journal "
                    "(redrive.open_journal('postgresql://...')) for several workers. "
                    f"DuckDB said: {text}",
                    path=path,
                ) from None
            raise
        if not read_only:
            self._migrate()
        else:
            self._check_format(str(self.format_version()))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        with self._lock:
            con = self._con
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._con.close()
