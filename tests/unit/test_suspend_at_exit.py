"""``suspend_at_exit`` with a callable: a pause a framework knows only when the run's block ends.

A framework whose loop runs in a task of its own (the Agents SDK's
``run_streamed``) may stop for a person after the call that started it
returned, or still be running when the block ends. The block's clean end
asks the callable then: a reason leaves the run ``suspended`` (with what the
callable journaled), None lets it end ``succeeded``; ``run.finish`` always wins.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

import redrive
from redrive.replay import suspend_at_exit
from redrive.storage import MemoryJournal

CASES = list(itertools.product(["sync", "async"], [True, False], [True, False]))


def _block(run: redrive.Run, waits: bool, finish: bool, asked: list[str]) -> None:
    """Hand the run a callable whose answer is only known later, then decide it."""
    known: dict[str, bool] = {}

    def why() -> str | None:
        asked.append("why")
        if not known["waits"]:
            return None
        run.note("paused_late", {"waiting": 1})
        return f"run {run.run_id!r} waits for a person"

    suspend_at_exit(run, why)
    known["waits"] = waits  # decided after the call, as a background loop decides it
    if finish:
        run.finish("done")


@pytest.mark.parametrize(("face", "waits", "finish"), CASES)
def test_the_callable_decides_the_clean_end(face: str, waits: bool, finish: bool) -> None:
    """Suspended iff the callable gives a reason and nothing finished; asked once, at the end."""
    journal = MemoryJournal()
    asked: list[str] = []
    if face == "sync":
        with redrive.run(journal, "late:1") as run:
            _block(run, waits, finish, asked)
            assert asked == []
    else:

        async def main() -> Any:
            async with redrive.run(journal, "late:1") as run:
                _block(run, waits, finish, asked)
                assert asked == []
            return run

        run = asyncio.run(main())
    suspended = waits and not finish
    assert run.status == ("suspended" if suspended else "succeeded")
    assert asked == ([] if finish else ["why"])
    notes = [f.name for f in journal.frames("late:1") if f.kind == "note"]
    assert notes == (["paused_late"] if suspended else [])
    record = journal.get_run("late:1")
    assert record is not None and record.status == run.status


def test_an_error_ends_the_block_without_asking() -> None:
    """A block that ends with an error is not a clean end: the callable is not asked."""
    journal = MemoryJournal()
    asked: list[str] = []
    with pytest.raises(ValueError), redrive.run(journal, "late:2") as run:
        suspend_at_exit(run, lambda: asked.append("why") or "waits")
        raise ValueError("the loop's own error")
    assert asked == []
