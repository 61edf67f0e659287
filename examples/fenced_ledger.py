"""A downstream that closes the fencing window: a Postgres ledger that refuses stale tokens.

A lease cannot stop a worker that freezes (GC pause, SIGSTOP, VM migration)
inside its own tool body, past its lease: the worker that takes the run over
runs the step too, and when the first one thaws it carries on with its body.
Only the system the body writes to can refuse it (Kleppmann, "How to do
distributed locking", 2016: the fencing token; Google's Chubby calls it a
sequencer). This ledger does, for each write ``(resource, token, key, op)``
in one transaction:

1. it locks the resource's fence row and refuses the write when ``token`` is
   lower than the highest token the resource has accepted
   (:class:`StaleFencingToken`), else raises the stored token to ``token``;
2. it applies each ``(key, op)`` once: a write whose idempotency key and
   operation are already in the ledger returns the stored row instead of
   writing again (the step's retries and the takeover's replay of a write
   the frozen worker made before it froze).

A tool passes ``redrive.fencing_token()`` (the run's lease epoch: it grows
each time a worker takes the lease) and its step's idempotency key (a
parameter named ``idempotency_key``, filled by redrive, the same on every
attempt of the step), with the run id as the resource. The
crash experiment ``tests/crash/test_fenced_downstream.py`` freezes workers
at random points of a two-write body past their lease: with this ledger
every write lands once; with a plain table the same experiment writes twice.

Run it against PostgreSQL (a database you may create tables in)::

    python examples/fenced_ledger.py postgresql://postgres@127.0.0.1:5432/test [SCHEMA]

It refunds order 42 under a lease, then shows the ledger refusing a write
with a stale token (what a thawed worker's late write gets).
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg
from psycopg import sql

import redrive

__all__ = ["FencedLedger", "StaleFencingToken"]


class StaleFencingToken(Exception):
    """A write carried a fencing token lower than one the resource already accepted.

    Attributes:
        resource: the resource written (a run id).
        token: the token the write carried.
        current: the highest token the resource has accepted.
    """

    def __init__(self, resource: str, token: int, current: int) -> None:
        super().__init__(
            f"refused a write to {resource!r} with fencing token {token}: token {current} "
            "was accepted already, so this writer lost its lease (a newer worker holds the run)"
        )
        self.resource = resource
        self.token = token
        self.current = current


class FencedLedger:
    """A Postgres ledger whose writes are fenced by token and applied once per key.

    Args:
        conninfo: a PostgreSQL connection string.
        schema: the schema of the two tables (created if missing).

    Tables: ``fences(resource text primary key, token bigint)`` and
    ``ledger(key text, op text, resource text, token bigint, amount bigint,
    primary key (key, op))``.
    """

    def __init__(self, conninfo: str, *, schema: str = "public") -> None:
        self.conninfo = conninfo
        self.schema = schema
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "CREATE SCHEMA IF NOT EXISTS {s};"
                    "CREATE TABLE IF NOT EXISTS {s}.fences "
                    "(resource text PRIMARY KEY, token bigint NOT NULL);"
                    "CREATE TABLE IF NOT EXISTS {s}.ledger (key text NOT NULL, "
                    "op text NOT NULL, resource text NOT NULL, token bigint NOT NULL, "
                    "amount bigint NOT NULL, PRIMARY KEY (key, op))"
                ).format(s=sql.Identifier(schema))
            )

    def write(self, resource: str, token: int, key: str, op: str, amount: int) -> dict[str, Any]:
        """Apply ``op`` of ``amount`` for ``resource`` once, fenced by ``token``.

        Returns:
            ``{"op", "amount", "token", "applied"}``: the ledger row, with
            ``applied`` False when ``(key, op)`` was already written (the row
            is the earlier write's).

        Raises:
            StaleFencingToken: ``token`` is lower than the resource's highest token.
        """
        s = sql.Identifier(self.schema)
        with psycopg.connect(self.conninfo) as conn, conn.transaction():
            conn.execute(
                sql.SQL(
                    "INSERT INTO {s}.fences VALUES (%s, %s) ON CONFLICT (resource) DO NOTHING"
                ).format(s=s),
                (resource, token),
            )
            row = conn.execute(
                sql.SQL("SELECT token FROM {s}.fences WHERE resource = %s FOR UPDATE").format(s=s),
                (resource,),
            ).fetchone()
            assert row is not None
            if token < row[0]:
                raise StaleFencingToken(resource, token, row[0])
            conn.execute(
                sql.SQL("UPDATE {s}.fences SET token = %s WHERE resource = %s").format(s=s),
                (token, resource),
            )
            done = conn.execute(
                sql.SQL("SELECT amount, token FROM {s}.ledger WHERE key = %s AND op = %s").format(
                    s=s
                ),
                (key, op),
            ).fetchone()
            if done is not None:
                return {"op": op, "amount": done[0], "token": done[1], "applied": False}
            conn.execute(
                sql.SQL("INSERT INTO {s}.ledger VALUES (%s, %s, %s, %s, %s)").format(s=s),
                (key, op, resource, token, amount),
            )
            return {"op": op, "amount": amount, "token": token, "applied": True}

    def rows(self) -> list[tuple[str, str, int]]:
        """Return every ``(resource, op, token)`` in the ledger, oldest key first."""
        s = sql.Identifier(self.schema)
        with psycopg.connect(self.conninfo) as conn:
            got = conn.execute(
                sql.SQL("SELECT resource, op, token FROM {s}.ledger ORDER BY key, op").format(s=s)
            ).fetchall()
        return [(r, o, t) for r, o, t in got]


def main(conninfo: str, schema: str = "fenced_example") -> int:
    """Refund order 42 under a lease through the ledger; then show a stale write refused.

    The journal and the ledger's tables live in ``schema`` of ``conninfo``'s database.
    """
    from redrive.storage.postgres import PostgresJournal

    ledger = FencedLedger(conninfo, schema=schema)

    @redrive.tool(restart_safe=False)
    def refund(run_id: str, amount: int, idempotency_key: str | None = None) -> dict[str, Any]:
        token = redrive.fencing_token()  # None without a lease
        assert token is not None, "fencing needs a lease: redrive.run(..., lease=seconds)"
        assert idempotency_key is not None  # filled by redrive when the caller passes none
        ledger.write(run_id, token, idempotency_key, "debit", amount)
        return ledger.write(run_id, token, idempotency_key, "notify", amount)

    journal = PostgresJournal(conninfo, schema=schema)
    try:
        with redrive.run(journal, "order-42", lease=10) as run:
            run.finish(refund(run.run_id, 1999))
        print("refunded:", run.output)
        try:
            ledger.write("order-42", 0, "late-writer", "debit", 1999)
        except StaleFencingToken as exc:
            print("stale write refused:", exc)
    finally:
        journal.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*(sys.argv[1:] or ["postgresql:///test"])))
