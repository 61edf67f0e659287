"""The Postgres journal: one journal shared by many worker processes and machines.

``redrive.open_journal("postgresql://user@host/db")`` opens it. Connections
come from a psycopg 3 connection pool; every operation is one short
transaction. A claim (an append) is **one statement, one round trip**: a
conditional ``UPDATE`` of the run row (``WHERE`` the fence, the seq, the
chain and the status are what the writer checked; it sets only what the
write changes) and the ``INSERT`` of the frames in one ``WITH`` statement, in
autocommit, whose row count says whether it wrote (no result row). The writer checks the append
in Python against the row it last saw (:func:`~redrive.storage._base.appended`);
when the row changed since, the statement matches nothing, writes nothing,
and the journal reads the row again (no lock) and checks again, which raises
the precise error (:class:`~redrive.errors.AppendConflictError`,
:class:`~redrive.errors.LeaseLostError`, ...) or retries. Lease changes are
compare-and-swap updates the same way. So no row lock is ever held across a
client round trip: a worker frozen (paused, swapped out, partitioned) between
statements holds no lock, and takeover by another worker never waits on it;
a statement waits at most ``lock_timeout`` for a lock another *statement*
holds. The primary key ``(run_id, seq)`` of the frames table backs the seq
check up. Leases and fencing work as in every backend (see
:mod:`redrive.storage._base`).

The schema is migrated on open (numbered migrations, serialized across
workers by an advisory lock); :meth:`PostgresJournal.check_schema` checks
without writing.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import attrs
import psycopg
from psycopg import sql as pgsql
from psycopg_pool import ConnectionPool

from ..errors import RunBusyError
from ..frames import Frame
from ._base import RunRecord, RunUpdate, appended, check_append, unknown_run
from ._pgstatements import (
    _SWAP_COLUMNS,
    _append_statement,
    _frame_arrays,
    _insert_frames_sql,
)
from ._pgurl import _partitions_option, _redacted, _schema_option, _unreachable
from ._sql import SqlJournal
from ._sqlschema import RUN_COLUMNS, Cursor
from ._sqlschema import schema as _schema_ddl

#: Run rows remembered per journal (the row each run's last write left); beyond it, forgotten.
_KNOWN_ROWS = 4096
#: Compare-and-swap attempts before a lease change gives up (each failure: another writer won).
_SWAP_TRIES = 20

__all__ = ["PostgresJournal"]

#: Advisory lock key that serializes schema migrations across workers.
_MIGRATION_LOCK = 0x726564726976  # "redriv"
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PostgresJournal(SqlJournal):
    """Journal in a PostgreSQL database, shared by many workers.

    Args:
        url: a libpq connection URL, ``"postgresql://user@host:5432/db"``.
        schema: the Postgres schema holding the tables (created when
            missing; also given in the URL as ``?schema=NAME``, so the command
            line reaches it); None uses the connection's ``search_path`` (``public``).
        min_size / max_size: connection pool bounds.
        migrate: apply pending migrations on open (default True); False only
            checks that the schema is current (read-only).
        connect_timeout: seconds to wait for the server when opening (libpq
            waits at least 2).
        partitions: hash-partition the frames table by ``run_id`` into this
            many partitions when the journal's tables are created (also given
            in the URL as ``?partitions=N``; see ``docs/scaling.md``). None:
            one table. A journal created one way keeps its layout; asking for
            partitions on an existing unpartitioned journal raises ``ValueError``.
        lock_timeout: seconds a statement waits for a row lock held by another
            connection (a worker frozen inside a journal write) before giving
            up with ``RunBusyError``; nothing is written then.
        idle_in_transaction_timeout: seconds after which the server ends a
            session of this journal that sits idle inside a transaction (a
            frozen worker), releasing its locks.

    Raises:
        ConnectionError: one direct connection attempt, made before the pool
            opens, failed: the server cannot be reached within
            ``connect_timeout``, the database does not exist, or the login
            was refused. The message names the URL (password hidden) and
            the server's answer; the psycopg error is its ``__cause__``.
        JournalFormatError: the schema is newer than this redrive, or older
            and ``migrate=False``.
        ValueError: ``schema`` is not a plain identifier.
    """

    for_update: ClassVar[str] = " FOR UPDATE"
    blob_type: ClassVar[str] = "BYTEA"
    double_type: ClassVar[str] = "DOUBLE PRECISION"
    durable = True
    read_only = False
    #: made for many workers: a run takes a lease by default (``lease="auto"``), so two
    #: workers started together on one run never both execute it
    shared_by_workers: ClassVar[bool] = True

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 8,
        migrate: bool = True,
        connect_timeout: float = 5.0,
        lock_timeout: float = 5.0,
        idle_in_transaction_timeout: float = 60.0,
        partitions: int | None = None,
    ) -> None:
        url, schema = _schema_option(url, schema)
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ValueError(f"schema={schema!r}: use a plain identifier (letters, digits, _)")
        url, partitions = _partitions_option(url, partitions)
        self.partitions = partitions
        shown = _redacted(url)
        self.url = shown if schema is None else f"{shown} (schema {schema})"
        self.schema = schema
        kwargs: dict[str, Any] = {"autocommit": True}
        # one direct attempt first: a wrong URL fails at once with the server's
        # answer, instead of a pool retrying in the background until it times out
        try:
            with psycopg.connect(
                url, autocommit=True, connect_timeout=max(2, int(connect_timeout))
            ) as conn:
                if schema is not None:
                    # created before the pool hands out connections that point at it
                    with contextlib.suppress(psycopg.errors.UniqueViolation):
                        conn.execute(
                            pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                                pgsql.Identifier(schema)
                            )
                        )
        except psycopg.OperationalError as exc:
            raise _unreachable(url, exc) from exc
        self.lock_timeout = lock_timeout
        idle_ms = max(1, int(idle_in_transaction_timeout * 1000))
        options = [
            f"-c lock_timeout={max(1, int(lock_timeout * 1000))}",
            f"-c idle_in_transaction_session_timeout={idle_ms}",
        ]
        if schema is not None:
            options.append(f"-c search_path={schema}")
        kwargs["options"] = " ".join(options)
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs=kwargs,
            open=False,
            name="redrive",
        )
        self._known: dict[str, RunRecord] = {}
        self._known_lock = threading.Lock()
        self._pool.open(wait=True, timeout=connect_timeout)
        try:
            if migrate and partitions is not None:
                self._create_partitioned_frames(partitions)
            if migrate:
                self._migrate()
            else:
                self.check_schema()
        except BaseException:
            self._pool.close()
            raise

    def _create_partitioned_frames(self, partitions: int) -> None:
        """Create ``redrive_frames`` hash-partitioned by ``run_id`` (before the migrations).

        Raises:
            ValueError: the journal already has an unpartitioned frames table.
        """
        columns = _schema_ddl(self.blob_type, self.double_type)[2]  # the frames table's DDL
        body = columns[columns.index("(") : columns.rindex(")") + 1]
        with self._transaction() as cur:
            self._lock_schema(cur)
            cur.execute(
                "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relname = 'redrive_frames' AND n.nspname = current_schema()"
            )
            row = cur.fetchone()
            if row is not None and row[0] != "p":
                raise ValueError(
                    f"journal {self.url}: partitions={partitions} asked for, but its frames "
                    "table already exists unpartitioned; a journal keeps the layout it was "
                    "created with. Open it without partitions, or copy its runs into a new "
                    "partitioned journal (redrive export / import, or copy_run)."
                )
            if row is None:
                cur.execute(f"CREATE TABLE redrive_frames {body} PARTITION BY HASH (run_id)")
                for i in range(partitions):
                    cur.execute(
                        f"CREATE TABLE redrive_frames_p{i} PARTITION OF redrive_frames "
                        f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
                    )

    # -- dialect hooks -----------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        try:
            with (
                self._pool.connection() as conn,
                conn.pipeline(),
                conn.transaction(),
                conn.cursor() as cur,
            ):
                yield cur
        except psycopg.errors.LockNotAvailable as exc:
            raise RunBusyError(
                f"journal {self.url}: a run row stayed locked by another connection for more "
                f"than lock_timeout={self.lock_timeout} s (a worker frozen inside a journal "
                "write?); nothing was written. Retry later; the server ends such a session "
                "after idle_in_transaction_timeout.",
                lock_timeout=self.lock_timeout,
            ) from exc

    @contextlib.contextmanager
    def _statement(self) -> Iterator[Cursor]:
        """A cursor for single statements in autocommit: each is one round trip."""
        try:
            with self._pool.connection() as conn, conn.cursor() as cur:
                yield cur
        except psycopg.errors.LockNotAvailable as exc:
            raise RunBusyError(
                f"journal {self.url}: a run row stayed locked by another statement for more "
                f"than lock_timeout={self.lock_timeout} s; nothing was written. Retry later.",
                lock_timeout=self.lock_timeout,
            ) from exc

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    # -- claims: one statement, no lock across a round trip --------------------------

    def _remember(self, record: RunRecord | None) -> RunRecord | None:
        if record is not None:
            with self._known_lock:
                if len(self._known) >= _KNOWN_ROWS:
                    self._known.clear()
                self._known[record.run_id] = record
        return record

    def _known_row(self, run_id: str) -> RunRecord | None:
        with self._known_lock:
            return self._known.get(run_id)

    def get_run(self, run_id: str) -> RunRecord | None:
        """See :meth:`redrive.storage.Journal.get_run`."""
        with self._statement() as cur:
            return self._remember(self._select_run(cur, run_id, lock=False))

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        """See :meth:`redrive.storage.Journal.create_run` (one statement)."""
        check_append(attrs.evolve(record, next_seq=0), [first], 0)
        row = attrs.evolve(record, next_seq=1, last_chain=first.chain)
        values = attrs.asdict(row)
        with self._statement() as cur:
            cur.execute(
                f"WITH r AS (INSERT INTO redrive_runs ({', '.join(RUN_COLUMNS)}) "
                f"VALUES ({', '.join('%s' for _ in RUN_COLUMNS)}) "
                "ON CONFLICT (run_id) DO NOTHING RETURNING 1), "
                f"f AS ({_insert_frames_sql(1)} WHERE EXISTS (SELECT 1 FROM r) RETURNING 1) "
                "SELECT count(*) FROM r",
                [values[c] for c in RUN_COLUMNS] + _frame_arrays([first]),
            )
            created = bool(cur.fetchone()[0])
        if created:
            self._remember(row)
        return created

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
        """See :meth:`redrive.storage.Journal.append`.

        One round trip when the row this journal last saw for the run is
        still current (the common case: the worker's own previous write);
        otherwise one plain read first. The write is one statement that
        updates the row only if the fence, seq, chain and status still are
        what was checked, and inserts the frames only if it did.

        Raises:
            UnknownRunError, LeaseLostError, RunBusyError, AppendConflictError,
            TerminalRunError, ValueError: as :meth:`redrive.storage.Journal.append`.
        """
        known = self._known_row(run_id)
        row: RunRecord | None = None
        if known is not None and known.next_seq == expected_seq:
            try:
                row = appended(
                    known, run_id, frames, expected_seq=expected_seq, update=update, epoch=epoch
                )
            except Exception:  # the remembered row may be stale: decide on a fresh read
                row = None
        for _ in range(_SWAP_TRIES):
            if row is None or known is None:
                known = self.get_run(run_id)
                row = appended(
                    known, run_id, frames, expected_seq=expected_seq, update=update, epoch=epoch
                )
            assert known is not None
            if self._append_if(known, row, frames, epoch=epoch, sync=sync):
                self._remember(row)
                return
            row = None  # the row changed since it was read: read again, check again
        raise RunBusyError(
            f"run {run_id!r}: the run row changed under {_SWAP_TRIES} append attempts at seq "
            f"{expected_seq} in a row (other writers keep changing it); nothing was written. "
            "Retry later.",
            run_id=run_id,
            seq=expected_seq,
        )

    def _append_if(
        self,
        known: RunRecord,
        row: RunRecord,
        frames: Sequence[Frame],
        *,
        epoch: int | None,
        sync: bool,
    ) -> bool:
        """Write ``row`` and ``frames`` if the run row still is ``known``; True if written.

        The statement text depends only on (one frame or several, a lease or
        none, ``sync``, whether the write ends or changes the run's status,
        output or error), so psycopg prepares each of its few shapes once per
        connection; parameters go in binary (a 2 KB payload travels as 2 KB,
        not as 4 KB of hex the server decodes). A claim (no status, output or
        error change) leaves those three columns as the row has them: they
        change only with the status or an append, both of which the
        statement's ``WHERE`` compares, so the row written equals ``row``.
        The statement's row count answers (no result row travels back).
        """
        ends = (row.status, row.output, row.error) != (known.status, known.output, known.error)
        params: list[Any] = [row.next_seq, row.last_chain, row.updated_at]
        if ends:
            params += [row.status, row.output, row.error]
        params += [known.run_id, known.next_seq, known.last_chain, known.status, known.lease_epoch]
        if epoch is None:  # a writer without a lease: nobody else may hold one now
            params.append(time.time())
        if frames:
            params += _frame_arrays(frames)
        statement = _append_statement(min(len(frames), 2), epoch is None, sync, ends)
        conn = self._pool.getconn()
        try:
            written = conn.execute(statement, params).rowcount
        except psycopg.errors.LockNotAvailable as exc:
            raise RunBusyError(
                f"journal {self.url}: a run row stayed locked by another statement for more "
                f"than lock_timeout={self.lock_timeout} s; nothing was written. Retry later.",
                lock_timeout=self.lock_timeout,
            ) from exc
        finally:
            self._pool.putconn(conn)
        return written > 0

    def _change_run(self, run_id: str, change: Callable[[RunRecord], RunRecord]) -> RunRecord:
        """Apply ``change`` to the run row by compare-and-swap (no lock across round trips)."""
        for _ in range(_SWAP_TRIES):
            with self._statement() as cur:
                record = self._select_run(cur, run_id, lock=False)
            if record is None:
                raise unknown_run(run_id)
            changed = change(record)
            if changed is record:
                return self._remember(record) or record
            new = attrs.asdict(changed)
            old = attrs.asdict(record)
            sets = ", ".join(f"{c} = %s" for c in RUN_COLUMNS[1:])
            same = " AND ".join(f"{c} IS NOT DISTINCT FROM %s" for c in _SWAP_COLUMNS)
            with self._statement() as cur:
                cur.execute(
                    f"UPDATE redrive_runs SET {sets} WHERE run_id = %s AND {same} RETURNING 1",
                    [new[c] for c in RUN_COLUMNS[1:]] + [run_id] + [old[c] for c in _SWAP_COLUMNS],
                )
                if cur.fetchone() is not None:
                    return self._remember(changed) or changed
        raise RunBusyError(
            f"run {run_id!r}: the run row changed under {_SWAP_TRIES} lease or cancel attempts "
            "in a row (other writers keep changing it); nothing was changed. Retry later.",
            run_id=run_id,
        )

    def _table_scope(self) -> str:
        return " AND table_schema = current_schema()"

    def _lock_schema(self, cur: Cursor) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])

    def _relaxed_commit(self, cur: Cursor) -> None:
        # the commit survives this client dying at once; the server's WAL flush follows
        # within wal_writer_delay, and the next synchronous commit waits for it
        cur.execute("SET LOCAL synchronous_commit TO OFF")

    def _on_conflict_nothing(self, column: str) -> str:
        # RETURNING tells _inserted whether the row went in (rowcount is not known
        # before the pipeline syncs)
        return f" ON CONFLICT ({column}) DO NOTHING RETURNING 1"

    def _inserted(self, cur: Cursor) -> bool:
        return cur.fetchone() is not None

    # -- lifecycle ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return bool(self._pool.closed)

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._pool.close()

    def __repr__(self) -> str:
        return f"<PostgresJournal {self.url}>"
