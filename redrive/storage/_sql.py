"""The shared base of the SQL journals (DuckDB, Postgres).

Backends supply a connection and a few dialect hooks; the statements, the row
mapping and the append/lease logic live here once. SQL is written with ``?``
placeholders; a backend whose driver wants another style overrides
:meth:`SqlJournal._sql`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import attrs

from .._runid import check_run_id
from ..errors import JournalFormatError
from ..frames import FORMAT_VERSION, Frame
from ._base import (
    Decision,
    RunIndexOps,
    RunRecord,
    RunStatus,
    RunUpdate,
    appended,
    check_append,
    check_delete,
    scrubbed_text,
    unknown_run,
)
from ._sqlschema import (
    FRAME_ATTRS,
    FRAME_COLUMNS,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    Cursor,
    _frame,
    _record,
    _schema_of,
    migrations,
)
from ._sqlschema import PAGE as PAGE
from ._sqlschema import schema as schema

__all__ = ["SqlJournal"]


class SqlJournal(RunIndexOps):
    """Journal protocol over a SQL database; see the module docstring.

    Subclasses implement :meth:`_transaction` (a context manager yielding a
    cursor inside one committed transaction) and set the dialect hooks.
    """

    durable = True
    read_only = False
    #: Appended to the SELECT of a run row that is about to change.
    for_update: ClassVar[str] = ""
    blob_type: ClassVar[str] = "BLOB"
    double_type: ClassVar[str] = "DOUBLE"

    url: str

    # -- dialect hooks -------------------------------------------------------

    def _transaction(self) -> contextlib.AbstractContextManager[Cursor]:
        raise NotImplementedError

    def _sql(self, statement: str) -> str:
        return statement

    def _lock_schema(self, cur: Cursor) -> None:
        """Serialize concurrent migrations (dialects with several writers override this)."""

    # -- schema ----------------------------------------------------------------

    def _read_meta(self, cur: Cursor) -> dict[str, str]:
        """Return the ``redrive_meta`` rows (empty when the table is missing)."""
        if not self._has_meta(cur):
            return {}
        cur.execute("SELECT key, value FROM redrive_meta")
        return {str(k): str(v) for k, v in cur.fetchall()}

    def _has_meta(self, cur: Cursor) -> bool:
        cur.execute(
            self._sql(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = ?"
                + self._table_scope()
            ),
            ["redrive_meta"],
        )
        row = cur.fetchone()
        return bool(row and row[0])

    def _table_scope(self) -> str:
        """Extra condition restricting ``information_schema.tables`` to this journal's schema."""
        return ""

    def _migrate(self) -> None:
        """Apply the numbered migrations this journal lacks, in one transaction.

        Raises:
            JournalFormatError: the journal's schema or frame format is newer
                than this redrive (or not a redrive journal).
        """
        with self._transaction() as cur:
            self._lock_schema(cur)
            meta = self._read_meta(cur)
            if "format" in meta:
                self._check_format(meta["format"])
                if int(meta["format"]) < FORMAT_VERSION:  # older frames read as they are
                    cur.execute(
                        self._sql("UPDATE redrive_meta SET value = ? WHERE key = ?"),
                        [str(FORMAT_VERSION), "format"],
                    )
            current = _schema_of(meta)
            self._check_schema(current, writable=True)
            steps = migrations(self.blob_type, self.double_type)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for ddl in steps[version]:
                    cur.execute(ddl)
            if "format" not in meta:
                cur.execute(
                    self._sql("INSERT INTO redrive_meta (key, value) VALUES (?, ?)"),
                    ["format", str(FORMAT_VERSION)],
                )
            if "schema" not in meta:
                cur.execute(
                    self._sql("INSERT INTO redrive_meta (key, value) VALUES (?, ?)"),
                    ["schema", str(SCHEMA_VERSION)],
                )
            elif current != SCHEMA_VERSION:
                cur.execute(
                    self._sql("UPDATE redrive_meta SET value = ? WHERE key = ?"),
                    [str(SCHEMA_VERSION), "schema"],
                )

    def schema_version(self) -> int:
        """Return the journal's schema version (0: no redrive tables yet). Read-only."""
        with self._transaction() as cur:
            return _schema_of(self._read_meta(cur))

    def check_schema(self) -> None:
        """Check, without changing anything, that this redrive can use the journal as it is.

        Raises:
            JournalFormatError: the schema is too new (upgrade redrive) or too
                old (open the journal read-write once to migrate it), or the
                frame format differs.
        """
        with self._transaction() as cur:
            meta = self._read_meta(cur)
        if "format" in meta:
            self._check_format(meta["format"])
        self._check_schema(_schema_of(meta), writable=False)

    def _check_schema(self, found: int, *, writable: bool) -> None:
        if found > SCHEMA_VERSION:
            raise JournalFormatError(
                f"journal {self.url} has schema version {found}, newer than this redrive's "
                f"{SCHEMA_VERSION}: a newer redrive migrated it. Upgrade redrive on this worker "
                "(every worker sharing a journal needs a redrive that knows its schema).",
                found=found,
                expected=SCHEMA_VERSION,
                too="new",
            )
        if found < SCHEMA_VERSION and not writable:
            raise JournalFormatError(
                f"journal {self.url} has schema version {found}, older than this redrive's "
                f"{SCHEMA_VERSION}, and it was opened read-only. Open it once read-write "
                "(redrive.open_journal(url)) to apply the migrations.",
                found=found,
                expected=SCHEMA_VERSION,
                too="old",
            )

    def _check_format(self, value: str) -> None:
        try:
            found = int(value)
        except ValueError:
            found = -1
        if not 1 <= found <= FORMAT_VERSION:
            raise JournalFormatError(
                f"journal {self.url} has format version {value}; this redrive reads versions "
                f"1 to {FORMAT_VERSION}. "
                + (
                    "Upgrade redrive to read it."
                    if found > FORMAT_VERSION
                    else "It is not a redrive journal, or is damaged."
                ),
                found=value,
                expected=FORMAT_VERSION,
            )

    def format_version(self) -> int:
        """Return the format version stored in the journal (read-only check)."""
        with self._transaction() as cur:
            cur.execute(self._sql("SELECT value FROM redrive_meta WHERE key = ?"), ["format"])
            row = cur.fetchone()
        return int(row[0]) if row else 0

    # -- runs ----------------------------------------------------------------

    def _select_run(self, cur: Cursor, run_id: str, *, lock: bool) -> RunRecord | None:
        cur.execute(
            self._sql(
                f"SELECT {', '.join(RUN_COLUMNS)} FROM redrive_runs WHERE run_id = ?"
                + (self.for_update if lock else "")
            ),
            [run_id],
        )
        row = cur.fetchone()
        return None if row is None else _record(row)

    def _write_run(self, cur: Cursor, record: RunRecord) -> None:
        values = attrs.asdict(record)
        sets = ", ".join(f"{c} = ?" for c in RUN_COLUMNS[1:])
        cur.execute(
            self._sql(f"UPDATE redrive_runs SET {sets} WHERE run_id = ?"),
            [values[c] for c in RUN_COLUMNS[1:]] + [record.run_id],
        )

    def _insert_frames(self, cur: Cursor, frames: Sequence[Frame]) -> None:
        if not frames:
            return
        marks = ", ".join("?" for _ in FRAME_COLUMNS)
        cur.executemany(
            self._sql(f"INSERT INTO redrive_frames ({', '.join(FRAME_COLUMNS)}) VALUES ({marks})"),
            [[getattr(f, a) for a in FRAME_ATTRS] for f in frames],
        )

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        """See :meth:`redrive.storage.Journal.create_run`."""
        check_run_id(record.run_id)
        check_append(attrs.evolve(record, next_seq=0), [first], 0)
        row = attrs.evolve(record, next_seq=1, last_chain=first.chain)
        values = attrs.asdict(row)
        marks = ", ".join("?" for _ in RUN_COLUMNS)
        with self._transaction() as cur:
            if self._select_run(cur, record.run_id, lock=False) is not None:
                return False
            cur.execute(
                self._sql(
                    f"INSERT INTO redrive_runs ({', '.join(RUN_COLUMNS)}) VALUES ({marks})"
                    + self._on_conflict_nothing("run_id")
                ),
                [values[c] for c in RUN_COLUMNS],
            )
            if not self._inserted(cur):
                return False
            self._insert_frames(cur, [first])
        return True

    def _relaxed_commit(self, cur: Cursor) -> None:
        """Let this transaction commit without waiting for stable storage (``sync=False``)."""

    def _on_conflict_nothing(self, column: str) -> str:
        return f" ON CONFLICT ({column}) DO NOTHING"

    def _inserted(self, cur: Cursor) -> bool:
        """Return whether the last INSERT ... ON CONFLICT DO NOTHING inserted a row."""
        return True

    def get_run(self, run_id: str) -> RunRecord | None:
        """See :meth:`redrive.storage.Journal.get_run`."""
        with self._transaction() as cur:
            return self._select_run(cur, run_id, lock=False)

    def append(
        self,
        run_id: str,
        frames: Sequence[Frame],
        *,
        expected_seq: int,
        update: RunUpdate | None = None,
        epoch: int | None = None,
        sync: bool = True,
    ) -> None:
        """See :meth:`redrive.storage.Journal.append`."""
        with self._transaction() as cur:
            if not sync:
                self._relaxed_commit(cur)
            row = appended(
                self._select_run(cur, run_id, lock=True),
                run_id,
                frames,
                expected_seq=expected_seq,
                update=update,
                epoch=epoch,
            )
            self._insert_frames(cur, frames)
            self._write_run(cur, row)

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """See :meth:`redrive.storage.Journal.frames`."""
        cols = ", ".join(FRAME_COLUMNS)
        seq = start
        while True:
            with self._transaction() as cur:
                cur.execute(
                    self._sql(
                        f"SELECT {cols} FROM redrive_frames WHERE run_id = ? AND seq >= ? "
                        "AND seq < ? ORDER BY seq"
                    ),
                    [run_id, seq, seq + PAGE],
                )
                rows = cur.fetchall()
            for row in rows:
                yield _frame(row)
            if len(rows) < PAGE:
                return
            seq += PAGE

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """See :meth:`redrive.storage.Journal.runs`."""
        sql = f"SELECT {', '.join(RUN_COLUMNS)} FROM redrive_runs"
        params: list[Any] = []
        if status is not None:
            sql += " WHERE status = ?"
            params.append(status)
        sql += " ORDER BY created_at DESC, run_id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._transaction() as cur:
            cur.execute(self._sql(sql), params)
            return [_record(row) for row in cur.fetchall()]

    def stale_runs(self, *, older_than: float = 0.0) -> list[RunRecord]:
        """See :meth:`redrive.storage.Journal.stale_runs`."""
        cutoff = time.time() - older_than
        with self._transaction() as cur:
            cur.execute(
                self._sql(
                    f"SELECT {', '.join(RUN_COLUMNS)} FROM redrive_runs WHERE status = ? "
                    "AND lease_expires IS NOT NULL AND lease_expires <= ? "
                    "ORDER BY lease_expires"
                ),
                [RunStatus.RUNNING.value, cutoff],
            )
            return [_record(row) for row in cur.fetchall()]

    # -- leases ----------------------------------------------------------------

    def _change_run(self, run_id: str, change: Any) -> RunRecord:
        with self._transaction() as cur:
            record = self._select_run(cur, run_id, lock=True)
            if record is None:
                raise unknown_run(run_id)
            changed: RunRecord = change(record)
            if changed is not record:
                self._write_run(cur, changed)
            return changed

    def delete_run(self, run_id: str, *, expected_seq: int) -> bool:
        """See :meth:`redrive.storage.Journal.delete_run`."""
        with self._transaction() as cur:
            if not check_delete(self._select_run(cur, run_id, lock=True), expected_seq):
                return False
            for table in ("redrive_frames", "redrive_decisions", "redrive_runs"):
                cur.execute(self._sql(f"DELETE FROM {table} WHERE run_id = ?"), [run_id])
            return True

    # -- approvals -------------------------------------------------------------

    def decide(
        self, run_id: str, name: str, approved: bool, *, by: str, note: str = ""
    ) -> Decision:
        """See :meth:`redrive.storage.Journal.decide`."""
        by, note = scrubbed_text(by), scrubbed_text(note)
        with self._transaction() as cur:
            if self._select_run(cur, run_id, lock=False) is None:
                raise unknown_run(run_id)
            cur.execute(
                self._sql(
                    "INSERT INTO redrive_decisions "
                    "(run_id, name, approved, decided_by, decided_at, note) "
                    "VALUES (?, ?, ?, ?, ?, ?)" + self._on_conflict_nothing("run_id, name")
                ),
                [run_id, name, bool(approved), by, time.time(), note],
            )
        found = self.decision(run_id, name)
        assert found is not None
        return found

    def decision(self, run_id: str, name: str) -> Decision | None:
        """See :meth:`redrive.storage.Journal.decision`."""
        with self._transaction() as cur:
            cur.execute(
                self._sql(
                    "SELECT run_id, name, approved, decided_by, decided_at, note "
                    "FROM redrive_decisions WHERE run_id = ? AND name = ?"
                ),
                [run_id, name],
            )
            row = cur.fetchone()
        if row is None:
            return None
        return Decision(
            run_id=row[0], name=row[1], approved=bool(row[2]), by=row[3], at=row[4], note=row[5]
        )
