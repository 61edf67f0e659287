"""The default run lease (issue 23 item 8, DESIGN C9): on by default where many workers share
a journal (Postgres), off where one process owns it; ``lease=None`` still means none."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive.replay._lease import SHARED_JOURNAL_LEASE, lease_for
from redrive.storage import MemoryJournal


def _run_lease(journal: Any, **options: Any) -> float | None:
    with redrive.run(journal, "r", **options) as run:
        lease = run.lease  # the resolved lease length
        run.finish(None)
    return lease


@pytest.mark.postgres
def test_a_run_on_postgres_takes_a_lease_by_default(pg_url: str, pg_schema: str) -> None:
    """Default: a 30 s lease (held while the run executes, released at its end); an
    explicit number is kept; lease=None takes none."""
    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(pg_url, schema=pg_schema, max_size=2)
    try:
        with redrive.run(journal, "auto") as run:
            record = journal.get_run("auto")
            assert record is not None and record.lease_owner is not None
            assert run.lease == SHARED_JOURNAL_LEASE == 30.0
        assert journal.get_run("auto").lease_owner is None  # type: ignore[union-attr]
        with redrive.run(journal, "given", lease=5) as run:
            assert run.lease == 5.0
        with redrive.run(journal, "none", lease=None) as run:
            assert run.lease is None and journal.get_run("none").lease_owner is None  # type: ignore[union-attr]
        with redrive.run(journal, "auto", live=False) as run:  # a replay takes no lease
            assert run.lease is None
    finally:
        journal.close()


@pytest.mark.postgres
def test_the_async_face_takes_the_same_default_lease(pg_url: str, pg_schema: str) -> None:
    """``async with redrive.run(...)`` on Postgres holds the default lease while it runs."""
    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(pg_url, schema=pg_schema, max_size=2)

    async def main() -> tuple[float | None, str | None]:
        async with redrive.run(journal, "async") as run:
            record = journal.get_run("async")
            run.finish(None)
            return run.lease, record.lease_owner if record is not None else None

    try:
        lease, owner = asyncio.run(main())
        assert lease == SHARED_JOURNAL_LEASE and owner is not None
    finally:
        journal.close()


def test_a_journal_one_process_owns_takes_no_lease_by_default(tmp_path: Path) -> None:
    """Memory and DuckDB journals: no lease unless asked for."""
    from redrive.storage.duckdb import DuckDBJournal

    assert _run_lease(MemoryJournal()) is None
    duck = DuckDBJournal(str(tmp_path / "runs.duckdb"))
    try:
        assert _run_lease(duck) is None
    finally:
        duck.close()
    assert _run_lease(MemoryJournal(), lease=2.5) == 2.5


def test_lease_for_reads_the_journal_capability_not_its_class() -> None:
    """Any journal declaring ``shared_by_workers = True`` gets the default lease."""

    class Shared:
        shared_by_workers = True

    assert lease_for("auto", Shared(), live=True) == SHARED_JOURNAL_LEASE
    assert lease_for("auto", Shared(), live=False) is None
    assert lease_for("auto", object(), live=True) is None
    assert lease_for(None, Shared(), live=True) is None
    assert lease_for(3, Shared(), live=True) == 3.0


@pytest.mark.parametrize("bad", ["forever", 0, -1, True])
def test_a_bad_lease_option_is_refused_naming_the_choices(bad: Any) -> None:
    with pytest.raises(TypeError, match="'auto'"):
        redrive.run(MemoryJournal(), "r", lease=bad)


def test_the_default_wait_outlasts_a_dead_holders_lease() -> None:
    """Under the default lease, on_busy='wait' waits long enough to take over a run whose
    worker died holding the lease (its length plus the takeover grace); a busy_timeout
    given is kept."""
    from redrive.replay import Run
    from redrive.replay._lease import takeover_grace

    class Shared(MemoryJournal):
        shared_by_workers = True

    waits = Run(Shared(), "r", on_busy="wait")._state.config
    assert waits.lease == SHARED_JOURNAL_LEASE
    assert waits.busy_timeout > SHARED_JOURNAL_LEASE + takeover_grace(SHARED_JOURNAL_LEASE)
    assert Run(Shared(), "r", busy_timeout=5)._state.config.busy_timeout == 5
    assert Run(MemoryJournal(), "r")._state.config.busy_timeout == 30.0
