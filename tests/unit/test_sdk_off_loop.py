"""A wrapped async SDK client does its journal I/O off the event loop, streams included.

The journal here blocks in every call until a watchdog task on the event loop
has ticked twice since the call began: were a call made on the loop's thread,
the watchdog could not tick and the call would stall (it is counted instead).
So the proof needs no timing assertion; the worst loop lag is kept for a look.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive.storage.memory import MemoryJournal
from tests.sdkserver import Reply, ScriptServer, serve
from tests.unit.test_sdk_anthropic import MESSAGE
from tests.unit.test_sdk_anthropic import STREAM as ANTHROPIC_STREAM
from tests.unit.test_sdk_openai import CHAT, MESSAGES
from tests.unit.test_sdk_openai import STREAM as OPENAI_STREAM


class GatedJournal(MemoryJournal):
    """A memory journal whose calls wait for the event loop to make progress (a slow fsync).

    Attributes:
        loop_thread: the event loop's thread id (set by the test).
        on_loop: the names of the journal calls made on the loop's thread.
        gated: how many calls waited for the watchdog (and saw it tick).
        ticks: the watchdog's ticks so far.
    """

    def __init__(self) -> None:
        super().__init__()
        self.loop_thread: int | None = None
        self.on_loop: list[str] = []
        self.gated = 0
        self.stalled = 0
        self.ticks = 0
        self.cond = threading.Condition()

    def tick(self) -> None:
        """One watchdog tick: the loop ran."""
        with self.cond:
            self.ticks += 1
            self.cond.notify_all()

    def _gate(self, name: str) -> None:
        if self.loop_thread is None:
            return
        if threading.get_ident() == self.loop_thread:
            self.on_loop.append(name)  # waiting here would wait for ourselves
            return
        with self.cond:
            start = self.ticks
            if self.cond.wait_for(lambda: self.ticks >= start + 2, timeout=10):
                self.gated += 1
            else:
                self.stalled += 1

    def append(self, *args: Any, **kwargs: Any) -> None:
        """Wait for the loop to tick twice, then append."""
        self._gate("append")
        super().append(*args, **kwargs)

    def get_run(self, run_id: str) -> Any:
        """Note a read on the loop's thread."""
        if self.loop_thread == threading.get_ident():
            self.on_loop.append("get_run")
        return super().get_run(run_id)

    def frames(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        """Note each frame read on the loop's thread (the frames are read lazily)."""
        for frame in super().frames(*args, **kwargs):
            if self.loop_thread == threading.get_ident():
                self.on_loop.append("frames")
            yield frame


@asynccontextmanager
async def watchdog(journal: GatedJournal) -> AsyncIterator[list[float]]:
    """Tick on the loop every millisecond; yield a list that ends holding the worst lag (s)."""
    journal.loop_thread = threading.get_ident()
    worst = [0.0]
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst[0] = max(worst[0], time.perf_counter() - before - 0.001)
            journal.tick()

    task = asyncio.create_task(watch())
    try:
        yield worst
    finally:
        stop.set()
        await task
        journal.loop_thread = None


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


async def _openai_loop(client: openai.AsyncOpenAI) -> list[Any]:
    chat = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)  # type: ignore[arg-type]
    stream = await client.chat.completions.create(
        model="gpt-4o",
        messages=MESSAGES,  # type: ignore[arg-type]
        stream=True,
    )
    chunks = [chunk.model_dump() async for chunk in stream]
    return [chat.model_dump(), chunks]


async def _anthropic_loop(client: anthropic.AsyncAnthropic) -> list[Any]:
    message = await client.messages.create(
        model="claude-test-model",
        max_tokens=64,
        messages=MESSAGES,  # type: ignore[arg-type]
    )
    async with client.messages.stream(
        model="claude-test-model",
        max_tokens=64,
        messages=MESSAGES,  # type: ignore[arg-type]
    ) as stream:
        final = await stream.get_final_message()
    return [message.model_dump(), final.model_dump()]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_wrapped_async_client_never_does_journal_io_on_the_loop(
    server: ScriptServer, provider: str
) -> None:
    """Recording and replaying (a call and a stream) do every journal call off the event loop."""
    journal = GatedJournal()
    if provider == "openai":
        server.add(Reply(body=CHAT), Reply(chunks=OPENAI_STREAM))
        client: Any = redrive.wrap(
            openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
        )
        loop = _openai_loop
    else:
        server.add(Reply(body=MESSAGE), Reply(chunks=ANTHROPIC_STREAM))
        client = redrive.wrap(
            anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=server.url, max_retries=0)
        )
        loop = _anthropic_loop

    async def scenario() -> tuple[list[Any], list[Any], float]:
        async with watchdog(journal) as worst:
            # model_commit="each": every model step is appended (and synced) as it ends
            async with redrive.run(journal, "r1", model_commit="each") as run:
                live = await loop(client)
            assert run.live_steps == 2
            async with redrive.run(journal, "r1", model_commit="each") as again:
                replayed = await loop(client)
            assert again.replayed_steps == 2
        await client.close()
        return live, replayed, worst[0]

    live, replayed, worst = asyncio.run(scenario())
    assert replayed == live
    assert len(server.requests) == 2  # the replay sent nothing
    assert journal.on_loop == []
    assert journal.stalled == 0 and journal.gated >= 3  # the loop ticked while it appended
    print(f"the loop's worst lateness: {worst * 1e3:.1f} ms")  # for a look (-s), not asserted


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(take=st.integers(0, len(OPENAI_STREAM) - 1))
def test_a_stream_closed_early_is_journaled_off_the_loop(server: ScriptServer, take: int) -> None:
    """A stream the loop closes after ``take`` chunks is journaled (partial) off the event loop,
    and its replay hands back the same chunks."""
    journal = GatedJournal()
    server.add(Reply(chunks=OPENAI_STREAM))
    client = redrive.wrap(
        openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
    )

    async def loop() -> list[Any]:
        stream = await client.chat.completions.create(
            model="gpt-4o",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
        )
        seen = []
        async for chunk in stream:
            if len(seen) == take:
                break
            seen.append(chunk.model_dump())
        await stream.close()
        return seen

    async def scenario() -> tuple[list[Any], list[Any]]:
        async with watchdog(journal):
            async with redrive.run(journal, "s", model_commit="each"):
                live = await loop()
            async with redrive.run(journal, "s", model_commit="each"):
                replayed = await loop()
        await client.close()
        return live, replayed

    live, replayed = asyncio.run(scenario())
    assert replayed == live and len(live) == take
    assert journal.on_loop == [] and journal.stalled == 0
