"""The Postgres journal: one journal shared by many worker processes and machines.

``redrive.open_journal("postgresql://user@host/db")`` opens it. Connections
come from a psycopg 3 connection pool; every operation is one short
transaction, sent in pipeline mode (statements whose results are not read
travel together, so an append costs two round trips: lock-and-read, then
insert-update-commit). Appends lock the run's row (``SELECT ... FOR UPDATE``), so of two
workers appending at the same seq exactly one commits and the other gets
:class:`~redrive.errors.AppendConflictError`; the primary key
``(run_id, seq)`` of the frames table backs that up. Leases and fencing work
as in every backend (see :mod:`redrive.storage._base`).

The schema is migrated on open (numbered migrations, serialized across
workers by an advisory lock); :meth:`PostgresJournal.check_schema` checks
without writing.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any, ClassVar

import psycopg
from psycopg import sql as pgsql
from psycopg_pool import ConnectionPool

from ..errors import RunBusyError
from ._sql import Cursor, SqlJournal

__all__ = ["PostgresJournal"]

#: Advisory lock key that serializes schema migrations across workers.
_MIGRATION_LOCK = 0x726564726976  # "redriv"
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def _redacted(url: str) -> str:
    """Return ``url`` with its password (if any) replaced by ``***``."""
    return _PASSWORD.sub(r"\1***@", url)


def _unreachable(url: str, exc: psycopg.Error) -> ConnectionError:
    """The one-line error for a journal database that cannot be connected to."""
    said = " ".join(str(exc).split())
    with contextlib.suppress(ValueError):
        password = urllib.parse.urlsplit(url).password
        if password:
            said = said.replace(password, "***")
    return ConnectionError(
        f"cannot connect to the Postgres journal {_redacted(url)}: {said}. Check the URL "
        "(host, port, user, database name) and that the server is running and accepts this "
        "user; the database must exist (create it with `createdb`), redrive creates only "
        "its tables."
    )


class PostgresJournal(SqlJournal):
    """Journal in a PostgreSQL database, shared by many workers.

    Args:
        url: a libpq connection URL, ``"postgresql://user@host:5432/db"``.
        schema: the Postgres schema holding the tables (created when
            missing); None uses the connection's ``search_path`` (``public``).
        min_size / max_size: connection pool bounds.
        migrate: apply pending migrations on open (default True); False only
            checks that the schema is current (read-only).
        connect_timeout: seconds to wait for the server when opening (libpq
            waits at least 2).
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
    ) -> None:
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ValueError(f"schema={schema!r}: use a plain identifier (letters, digits, _)")
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
        self._pool.open(wait=True, timeout=connect_timeout)
        try:
            if migrate:
                self._migrate()
            else:
                self.check_schema()
        except BaseException:
            self._pool.close()
            raise

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

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

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
