"""A finished run is freed by reference counting: its journal and frames go with it.

A run that was a reference cycle waited for the cyclic collector, and a run
that lived through the collector's younger passes waits for a full pass, which
a process holding many objects makes rare (a full pass waits until the objects
new to the oldest generation number a quarter of it). Meanwhile every frame it
held stayed alive, and so did each frame's entry in the identity memos
(:mod:`redrive._identity`): a later long read that churned those memos resized
tables sized by the dead run's thousands of entries (test_steps' bounded read
after test_duckdb_read_memory).
"""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import Iterator

import pytest

import redrive
from redrive.storage import MemoryJournal


@redrive.tool(read_only=True)
def _item(n: int) -> str:
    return "r" * 50


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    """The cyclic collector off: what is freed here is freed by reference counting."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _recorded_and_replayed(
    steps: int,
) -> tuple[weakref.ref[redrive.Run], weakref.ref[MemoryJournal]]:
    journal = MemoryJournal()
    for _ in range(2):  # record, then replay
        with redrive.run(journal, "freed") as run:
            for n in range(steps):
                _item(n)
    assert run.replayed_steps == steps
    return weakref.ref(run), weakref.ref(journal)


def test_a_finished_run_and_its_journal_are_freed_without_the_cycle_collector(
    no_cycle_collector: None,
) -> None:
    run, journal = _recorded_and_replayed(20)
    assert run() is None
    assert journal() is None  # and with it every frame it held


def test_a_finished_async_run_is_freed_without_the_cycle_collector(
    no_cycle_collector: None,
) -> None:
    held: list[weakref.ref[object]] = []

    async def main() -> None:
        journal = MemoryJournal()
        async with redrive.run(journal, "freed") as run:
            _item(0)
        held.extend([weakref.ref(run), weakref.ref(journal)])

    asyncio.run(main())
    # the I/O thread that ran the block's closing section drops its work item (its
    # context names the run) just after it hands back the result: let it get there
    for _ in range(500):
        if all(ref() is None for ref in held):
            break
        time.sleep(0.01)
    assert [ref() for ref in held] == [None, None]
