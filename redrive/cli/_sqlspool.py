"""Bulk loading of journal rows into ``redrive sql``'s scratch DuckDB database, bounded in memory.

DuckDB's Python ``executemany`` binds and runs one row at a time (about a
millisecond a frame on this project's machine: 316 s for a 100,002-frame
``.rdj``, issue 24 #7). A :class:`TableSpool` instead collects at most
``batch`` rows, writes them to a spool file as comma-separated cells that need
no quoting (text and bytes as hexadecimal, numbers as Python prints them,
``N`` for NULL) and inserts the whole batch with one ``INSERT ... SELECT ...
FROM read_csv(...)``, DuckDB's own CSV reader. Memory held by Python is one
batch; the rows land in a scratch DuckDB database file (:func:`scratch`) whose
buffer manager keeps its own memory under ``memory_limit`` and spills to disk.

The spool file and the scratch database live in a private temporary directory
removed when the query is done. The CSV reader needs DuckDB's external access,
so every spool must be flushed before the connection is locked down
(``enable_external_access = false``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

__all__ = ["SCRATCH_MEMORY", "TableSpool", "scratch"]

#: DuckDB's memory limit for the scratch database (its buffer manager spills past it).
SCRATCH_MEMORY = "512MB"

#: How each DuckDB column type is read back from its spooled cell.
_READ_BACK = {
    "VARCHAR": "decode(unhex({c}))",
    "JSON": "decode(unhex({c}))::JSON",
    "BLOB": "unhex({c})",
    "BIGINT": "{c}::BIGINT",
    "DOUBLE": "{c}::DOUBLE",
}


def _cell(value: Any) -> str:
    """Return ``value`` as one spool cell: no comma, quote or line break can appear in it."""
    if value is None:
        return "N"
    if isinstance(value, str):
        return value.encode("utf-8", "replace").hex()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    raise TypeError(f"cannot spool a {type(value).__name__} cell")


@contextlib.contextmanager
def scratch() -> Iterator[tuple[Any, str]]:
    """Yield ``(connection, directory)``: a scratch DuckDB database in a private temporary folder.

    The database installs and loads no extension by itself, keeps under
    :data:`SCRATCH_MEMORY` and spills to the folder; the folder (database,
    spool files, DuckDB's temporary files) is removed on exit.
    """
    import duckdb

    with tempfile.TemporaryDirectory(prefix="redrive-sql-") as directory:
        con = duckdb.connect(
            os.path.join(directory, "scratch.duckdb"),
            config={
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
                "memory_limit": SCRATCH_MEMORY,
                "temp_directory": os.path.join(directory, "spill"),
            },
        )
        try:
            yield con, directory
        finally:
            con.close()


@attrs.define
class TableSpool:
    """Rows bound for one table of the scratch database, inserted a batch at a time.

    Args:
        con: the scratch DuckDB connection (external access still enabled).
        table: the table's name (created by the caller with these columns).
        types: each column's DuckDB type, in order: ``VARCHAR``, ``JSON``, ``BLOB``,
            ``BIGINT`` or ``DOUBLE``.
        directory: where the spool file is written (the scratch folder).
        batch: rows held in memory before they are inserted.

    Use :meth:`add` for each row and :meth:`flush` once at the end (a spool
    used as a context manager flushes on a clean exit).
    """

    con: Any
    table: str
    types: tuple[str, ...]
    directory: str
    batch: int = 5000
    _rows: list[Sequence[Any]] = attrs.field(factory=list, init=False)

    def __enter__(self) -> TableSpool:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self.flush()

    def add(self, row: Sequence[Any]) -> None:
        """Queue one row (one value per column); insert the batch when it is full.

        Raises:
            ValueError: the row has another number of values than the table has columns.
        """
        if len(row) != len(self.types):
            raise ValueError(f"{self.table}: {len(row)} values for {len(self.types)} columns")
        self._rows.append(row)
        if len(self._rows) >= self.batch:
            self.flush()

    def flush(self) -> None:
        """Insert the queued rows with one statement (nothing when none is queued)."""
        if not self._rows:
            return
        path = os.path.join(self.directory, f"{self.table}.spool")
        with open(path, "w", encoding="ascii") as spool:
            spool.writelines(",".join(map(_cell, row)) + "\n" for row in self._rows)
        names = [f"c{i}" for i in range(len(self.types))]
        columns = ", ".join(f"'{name}': 'VARCHAR'" for name in names)
        values = ", ".join(
            _READ_BACK[kind].format(c=name) for kind, name in zip(self.types, names, strict=True)
        )
        self.con.execute(
            f"INSERT INTO {self.table} SELECT {values} FROM read_csv(?, header = false, "
            f"delim = ',', quote = '', escape = '', nullstr = 'N', auto_detect = false, "
            f"columns = {{{columns}}})",
            [path],
        )
        os.unlink(path)
        self._rows.clear()
