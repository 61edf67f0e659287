"""The fencing window, closed downstream: workers frozen inside their body past their lease.

Issue 24 #9: 60 holders SIGSTOPped at random moments past their lease, then
resumed, gave 16 duplicate bodies, all inside the window docs/explanation/guarantees.md documents
(a worker frozen inside its own body). redrive cannot close it; the system
the body writes to can, by refusing a stale fencing token
(``examples/fenced_ledger.py``).

Each trial (Postgres, ``lease=1``): worker A runs a two-write ``refund`` body
(``debit`` then ``notify``) and freezes itself (SIGSTOP) at a point of the body
chosen for the trial: before the first write, between the two, or after both.
Once A's lease has lapsed, worker B takes the run over, replays what is
recorded and runs the in-flight ``refund`` again (it is ``restart_safe``: the
downstream dedupes on the step's idempotency key). Then A is thawed and
carries on with its body. Every write the bodies attempt is counted in a
side-effect log outside the processes; the ledger's rows are read at the end.

- With the fenced ledger every ``(run, op)`` is written exactly once, and every
  write A attempts after B took over is refused as stale (``before`` and
  ``between``) or deduplicated (``after``): 0 duplicates.
- With a plain table (the control, same experiment: no token check, no key)
  every trial writes twice: the window is real, and the assertions above
  catch a downstream that lets it through.

Trials: ``REDRIVE_FENCED_DOWNSTREAM_TRIALS`` per downstream (default 3 in CI,
one per freeze point; 200 for the issue's experiment), the freeze point taken
in turn. Each trial adds a random 0-60 ms before A freezes.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.crash.workerproc import Worker as Process
from tests.crash.workerproc import lease_lapsed, wait_until

pytestmark = [pytest.mark.crash, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("REDRIVE_FENCED_DOWNSTREAM_TRIALS", "3"))
LEASE = 1.0  # worker A's lease, in seconds
POINTS = ("before", "between", "after")


@functools.cache
def _ledger_module() -> Any:
    """``examples/fenced_ledger.py``, loaded once (its exception class must be one class)."""
    spec = importlib.util.spec_from_file_location(
        "fenced_ledger", ROOT / "examples/fenced_ledger.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the worker process ----------------------------------------------------------------------


def _say(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def _log(line: str) -> None:
    """Append one line to the side-effect log outside the processes."""
    fd = os.open(os.environ["REDRIVE_FENCE_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


class _Plain:
    """The control downstream: writes whatever it is given, once per call."""

    def __init__(self, conninfo: str, schema: str) -> None:
        import psycopg
        from psycopg import sql

        self.conninfo, self.table = conninfo, sql.Identifier(schema, "plain")
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (resource text, op text, token bigint)"
                ).format(self.table)
            )

    def write(self, resource: str, token: int, key: str, op: str, amount: int) -> dict[str, Any]:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.conninfo) as conn:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(self.table),
                (resource, op, token),
            )
        return {"op": op, "amount": amount, "token": token, "applied": True}

    def rows(self) -> list[tuple[str, str, int]]:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.conninfo) as conn:
            rows = conn.execute(sql.SQL("SELECT resource, op, token FROM {}").format(self.table))
            return [(r, o, t) for r, o, t in rows.fetchall()]


def _downstream(kind: str, conninfo: str, schema: str) -> Any:
    if kind == "plain":
        return _Plain(conninfo, schema)
    return _ledger_module().FencedLedger(conninfo, schema=schema)


def worker(run_id: str, kind: str, lease: float, freeze_at: str, jitter: float) -> None:
    """Run ``run_id`` under a lease; SIGSTOP itself at ``freeze_at`` of the refund body."""
    from redrive.storage.postgres import PostgresJournal

    conninfo, schema = os.environ["REDRIVE_PG"], os.environ["REDRIVE_SCHEMA"]
    store = _downstream(kind, conninfo, schema)
    stale = _ledger_module().StaleFencingToken

    def freeze(point: str) -> None:
        if point == freeze_at:
            time.sleep(jitter)
            _say({"frozen": point, "pid": os.getpid()})
            os.kill(os.getpid(), signal.SIGSTOP)

    def write(op: str, token: int, key: str) -> dict[str, Any]:
        try:
            done: dict[str, Any] = store.write(run_id, token, key, op, 42)
        except stale:
            _log(f"refused {run_id} {op} {os.getpid()} {token}")
            raise
        _log(f"{'wrote' if done['applied'] else 'deduped'} {run_id} {op} {os.getpid()} {token}")
        return done

    @redrive.tool(restart_safe=True)  # the ledger dedupes on the idempotency key
    def refund(run_key: str, idempotency_key: str | None = None) -> dict[str, Any]:
        token = redrive.fencing_token()  # both filled by redrive inside the body
        assert token is not None and idempotency_key is not None
        freeze("before")
        write("debit", token, idempotency_key)
        freeze("between")
        done = write("notify", token, idempotency_key)
        freeze("after")
        return {"refunded": done["amount"]}

    journal = PostgresJournal(conninfo, schema=schema, max_size=2)
    try:
        with redrive.run(journal, run_id, input=run_id, lease=lease, on_busy="wait") as run:
            run.finish(refund(run_id))
        _say({"outcome": "ok", "output": run.output})
    except (redrive.ReplayError, stale) as exc:
        _say({"outcome": type(exc).__name__, "error": str(exc)})
    finally:
        journal.close()


# -- the parent side -------------------------------------------------------------------------


class _Proc(Process):
    def __init__(self, env: dict[str, str], *args: str) -> None:
        super().__init__("tests.crash.test_fenced_downstream", env, *args)

    def end(self) -> None:
        self.thaw_and_stop()


def _experiment(kind: str, pg_url: str, schema: str, effects: Path) -> dict[str, str]:
    """Run the trials against ``kind``; return each run's freeze point."""
    from redrive.storage.postgres import PostgresJournal

    env = dict(os.environ)
    env.update(
        REDRIVE_PG=pg_url,
        REDRIVE_SCHEMA=schema,
        REDRIVE_FENCE_EFFECTS=str(effects),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    _downstream(kind, pg_url, schema)  # the tables exist before the workers race for them
    journal = PostgresJournal(pg_url, schema=schema, max_size=2)
    rng = random.Random(24)
    points: dict[str, str] = {}
    try:
        for trial in range(TRIALS):
            run_id = f"{kind}-{trial}"
            points[run_id] = POINTS[trial % len(POINTS)]
            jitter = f"{rng.uniform(0.0, 0.06):.3f}"
            a = _Proc(env, "worker", run_id, kind, str(LEASE), points[run_id], jitter)
            try:
                assert "frozen" in a.read(), run_id
                wait_until(functools.partial(lease_lapsed, journal, run_id))
                b = _Proc(env, "worker", run_id, kind, "30", "never", "0")
                try:
                    assert b.read() == {"outcome": "ok", "output": {"refunded": 42}}
                finally:
                    b.end()
                a.proc.send_signal(signal.SIGCONT)  # A carries on inside its body
                thawed = a.read()
            finally:
                a.end()
            assert thawed["outcome"] != "ok", thawed  # A lost the run: it records nothing
    finally:
        journal.close()
    return points


def test_a_fenced_downstream_writes_once_whatever_the_freeze(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    """Frozen before, between or after its writes: each (run, op) is in the ledger once,
    written by one worker, and every late write of the thawed worker was refused or deduped."""
    effects = tmp_path / "effects.log"
    points = _experiment("fenced", pg_url, pg_schema, effects)
    ledger = _ledger_module().FencedLedger(pg_url, schema=pg_schema)
    rows = Counter((resource, op) for resource, op, _token in ledger.rows())
    assert rows == Counter({(run, op): 1 for run in points for op in ("debit", "notify")})
    log = [line.split() for line in effects.read_text().splitlines()]
    wrote = Counter((run, op) for what, run, op, _pid, _token in log if what == "wrote")
    assert wrote == rows  # the log outside agrees: no write landed twice
    refused = Counter(points[run] for what, run, *_ in log if what == "refused")
    # the thawed worker's late writes: refused as stale where B wrote after A's token
    late = Counter(p for p in points.values() if p != "after")
    assert refused == late, (refused, late)  # one refused write per trial frozen before one
    print(f"{len(points)} trials, 0 duplicates; refused late writes: {dict(refused)}")


def test_a_plain_downstream_shows_the_window_is_real(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    """The control: the same experiment against a table that accepts every write (no token
    check, no key) writes twice in every trial: what the fenced ledger refuses or dedupes."""
    effects = tmp_path / "effects.log"
    points = _experiment("plain", pg_url, pg_schema, effects)
    rows = Counter((resource, op) for resource, op, _token in _Plain(pg_url, pg_schema).rows())
    twice = {run for (run, _op), n in rows.items() if n > 1}
    assert twice == set(points)
    print(f"{len(points)} trials; duplicated runs: {len(twice)}")


def test_the_example_runs_as_its_docstring_says(pg_url: str, pg_schema: str) -> None:
    """``python examples/fenced_ledger.py URL SCHEMA`` refunds once, then replays; both times a
    write with a stale token is refused."""
    import subprocess

    command = [sys.executable, str(ROOT / "examples" / "fenced_ledger.py"), pg_url, pg_schema]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):  # live, then replayed from the journal
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        refunded, refused = done.stdout.splitlines()
        assert refunded.startswith("refunded: ") and "'applied': True" in refunded
        assert refused.startswith("stale write refused: refused a write to 'order-42' with")
    ledger = _ledger_module().FencedLedger(pg_url, schema=pg_schema)
    assert ledger.rows() == [("order-42", "debit", 1), ("order-42", "notify", 1)]


if __name__ == "__main__":
    _, mode, run_id, kind, lease, freeze_at, jitter = sys.argv
    assert mode == "worker"
    worker(run_id, kind, float(lease), freeze_at, float(jitter))
