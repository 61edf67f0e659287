"""RecordedSession: a session's history as a resumed run sees it (a Hypothesis property).

The kind (issue 27, failure 1): a store the framework keeps itself is written
by an interrupted attempt, and the next attempt must neither read those
writes as history it never had nor write them again. For any history before
the run, any writes the run makes in batches, and any point where the first
attempt stops (the store keeps what it wrote by then): the resumed attempt
reads at each write what the first one read, and the store ends with the
history plus each written item exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.integrations.agents_session import RecordedSession, SessionHistoryError
from redrive.storage.memory import MemoryJournal


class ListSession:
    """An in-memory store of the SDK's Session protocol."""

    def __init__(self, items: list[Any]) -> None:
        self.session_id = "conv-1"
        self.items = list(items)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items[-limit:] if limit else self.items)

    async def add_items(self, items: list[Any]) -> None:
        self.items += items

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items = []


class Stop(Exception):
    """The first attempt stops here (a retryable error: the run stays resumable)."""


item = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "n": st.integers(0, 3)}
)


async def _attempt(
    journal: Any, store: ListSession, batches: list[list[Any]], stop: int | None
) -> list[list[Any]]:
    """Write ``batches`` through a RecordedSession in the run; return what each write read first."""
    seen: list[list[Any]] = []
    session = RecordedSession(store)
    async with redrive.run(journal, "conv:1", retryable=(Stop,)):
        for index, batch in enumerate(batches):
            if index == stop:
                raise Stop
            seen.append(await session.get_items())
            await session.add_items(batch)
    return seen


@given(
    history=st.lists(item, max_size=3),
    batches=st.lists(st.lists(item, min_size=1, max_size=3), min_size=1, max_size=4),
    data=st.data(),
)
def test_a_resumed_run_reads_what_it_read_and_writes_each_item_once(
    history: list[Any], batches: list[list[Any]], data: st.DataObject
) -> None:
    stop = data.draw(st.integers(0, len(batches)), label="stop")
    journal = MemoryJournal()
    store = ListSession(history)
    first: list[list[Any]] = []
    with contextlib.suppress(Stop):
        first = asyncio.run(_attempt(journal, store, batches, stop))
    again = asyncio.run(_attempt(journal, store, batches, None))
    assert store.items == history + [i for batch in batches for i in batch]
    assert again[: len(first)] == first
    assert all(seen[: len(history)] == history for seen in again)


def test_a_store_that_lost_the_runs_history_is_refused() -> None:
    journal = MemoryJournal()
    store = ListSession([{"role": "user", "n": 1}])
    asyncio.run(_attempt(journal, store, [[{"role": "user", "n": 2}]], None))
    store.items = []
    with pytest.raises(SessionHistoryError, match="held 1 item"):
        asyncio.run(_attempt(journal, store, [[{"role": "user", "n": 2}]], None))


def test_a_store_holding_another_write_is_refused_and_left_alone() -> None:
    journal = MemoryJournal()
    store = ListSession([])
    with pytest.raises(Stop):
        asyncio.run(_attempt(journal, store, [[{"role": "user", "n": 1}], [{"role": "user"}]], 1))
    with pytest.raises(SessionHistoryError, match="position 0") as caught:
        asyncio.run(_attempt(journal, store, [[{"role": "user", "n": 3}]], None))
    assert store.items == [{"role": "user", "n": 1}]
    assert caught.value.next_steps


def test_outside_a_run_it_is_the_store() -> None:
    store = ListSession([])
    session = RecordedSession(store)
    asyncio.run(session.add_items([{"role": "user", "n": 1}]))
    assert asyncio.run(session.get_items(1)) == [{"role": "user", "n": 1}]
    assert asyncio.run(session.pop_item()) == {"role": "user", "n": 1}
    asyncio.run(session.clear_session())
    assert store.items == [] and session.session_id == "conv-1"
