"""The async face of a Run: journal work and waits never block the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redrive
from redrive.frames import Frame
from redrive.storage import MemoryJournal, verify_frames
from tests.handles import worker_handle
from tests.loopguard import guarded

#: A journal write that ran on the loop would stall it for SLOW s (a slow fsync). The tests
#: assert where that work runs (:mod:`tests.loopguard`), never how late the loop was.
SLOW = 0.2
T = TypeVar("T")


class SlowJournal(MemoryJournal):
    """A memory journal whose every append takes ``delay`` seconds, like a slow fsync."""

    def __init__(self, delay: float = SLOW) -> None:
        super().__init__()
        self.delay = delay

    def append(self, run_id: str, frames: Sequence[Frame], **options: Any) -> None:
        time.sleep(self.delay)
        super().append(run_id, frames, **options)


def run_guarded(work: Callable[[], Awaitable[T]]) -> tuple[list[str], T]:
    """Run ``work()`` with ``asyncio.run``; return the blocking calls made on the loop, and its
    result (:func:`tests.loopguard.guarded`)."""
    with guarded() as guard:
        result = asyncio.run(work())  # type: ignore[arg-type]
    return guard.on_loop, result


@redrive.model(name="model:slowpoke")
async def ask(question: str) -> str:
    await asyncio.sleep(0.001)
    return f"answer to {question}"


calls: list[str] = []


@redrive.tool(restart_safe=False)
async def send(to: str) -> str:
    calls.append(to)
    return f"sent to {to}"


async def _loop(journal: MemoryJournal, run_id: str, **options: Any) -> redrive.Run:
    async with redrive.run(journal, run_id, input=run_id, **options) as run:
        reply = await ask(run_id)
        await send(reply)
        run.finish(reply)
    return run


def test_slow_journal_writes_do_not_stall_the_loop() -> None:
    """Five runs on one loop over a journal whose appends take 200 ms: no stall of the loop."""
    journal = SlowJournal()

    async def work() -> list[redrive.Run]:
        return await asyncio.gather(*(_loop(journal, f"slow:{i}") for i in range(5)))

    on_loop, runs = run_guarded(work)
    assert [r.status for r in runs] == ["succeeded"] * 5
    assert on_loop == [], "blocking work ran on the event loop"


def test_lease_wait_does_not_stall_the_loop() -> None:
    """A worker waiting for another's lease (on_busy="wait") leaves the loop free for the holder."""
    journal = MemoryJournal()
    entered = asyncio.Event()
    options: dict[str, Any] = {"lease": 5.0, "on_busy": "wait", "busy_timeout": 10.0}

    async def loop(holds: bool) -> redrive.Run:
        if not holds:
            await entered.wait()
        handle = journal if holds else worker_handle(journal)
        async with redrive.run(handle, "leased", input="leased", **options) as run:
            if holds:
                entered.set()
                await asyncio.sleep(0.2)  # the waiter polls for the lease meanwhile
            reply = await ask("leased")
            run.finish(reply)
        return run

    async def work() -> list[redrive.Run]:
        return await asyncio.gather(loop(True), loop(False))

    calls.clear()
    on_loop, (first, second) = run_guarded(work)
    assert first.status == "succeeded" and first.live_steps == 1
    # the waiter entered after the holder ended: the run had already succeeded
    assert second.finished and second.live_steps == 0
    assert on_loop == [], "the lease wait blocked the event loop"


def test_two_tasks_of_one_run_journal_a_valid_chain_and_replay() -> None:
    """Two concurrent tool calls of one run (asyncio.gather) journal a valid chain and replay."""
    journal = SlowJournal(delay=0.01)
    calls.clear()

    async def loop(live: bool) -> list[str]:
        async with redrive.run(journal, "pair", input="pair", live=live) as run:
            answers = await asyncio.gather(send("a"), send("b"), ask("c"))
            return run.finish(list(answers))  # type: ignore[no-any-return]

    first = asyncio.run(loop(True))
    assert sorted(calls) == ["a", "b"]
    verify_frames(journal.frames("pair"), source="pair")
    assert asyncio.run(loop(False)) == first
    assert sorted(calls) == ["a", "b"]  # replayed: no body ran again


def test_settle_names_the_task_that_asked() -> None:
    """A before_next_step callback settles before the next step of its own task only."""
    journal = MemoryJournal()
    settled: list[str] = []

    async def main() -> None:
        async with redrive.run(journal, "settle", input=1) as run:
            started = asyncio.Event()
            mine_done = asyncio.Event()

            async def other() -> None:
                await started.wait()
                await send("other")  # another task's step: does not settle ours
                assert settled == []
                mine_done.set()

            async def mine() -> None:
                run.before_next_step(lambda: settled.append("mine"))
                started.set()
                await mine_done.wait()
                await send("mine")  # this task's next step: settles first

            await asyncio.gather(other(), mine())
            run.finish(settled)

    asyncio.run(main())
    assert settled == ["mine"]


def test_durable_faces_agree_on_a_finished_run() -> None:
    """Sync and async @durable both return a finished run's output without re-running it."""
    journal = MemoryJournal()
    bodies: list[str] = []

    @redrive.durable(journal, run_id="sync:{n}")
    def sync_job(n: int) -> int:
        bodies.append("sync")
        return n * 2

    @redrive.durable(journal, run_id="async:{n}")
    async def async_job(n: int) -> int:
        bodies.append("async")
        return n * 2

    assert sync_job(2) == sync_job(2) == 4
    assert asyncio.run(async_job(2)) == asyncio.run(async_job(2)) == 4
    assert bodies == ["sync", "async"]


def test_cancelling_a_lease_wait_leaves_the_holder_alone() -> None:
    """A task cancelled while it waits for a lease ends at once; the holder's run goes on."""
    journal = MemoryJournal()
    options: dict[str, Any] = {"lease": 5.0, "on_busy": "wait", "busy_timeout": 10.0}

    async def main() -> redrive.Run:
        async with redrive.run(journal, "held", input="held", **options) as run:
            waiter = asyncio.create_task(_loop(worker_handle(journal), "held", **options))
            await asyncio.sleep(0.1)  # the waiter is polling for the lease
            waiter.cancel()
            done, _ = await asyncio.wait([waiter], timeout=1.0)
            assert done and waiter.cancelled()
            run.finish(await ask("held"))
        return run

    run = asyncio.run(main())
    assert run.status == "succeeded"
    record = journal.get_run("held")
    assert record is not None and record.lease_owner is None


def test_a_forked_child_runs_async_steps_with_its_own_threads() -> None:
    """After fork, the child's async face does not wait on its parent's (absent) threads."""
    import os
    import warnings

    asyncio.run(_loop(MemoryJournal(), "parent"))  # the parent's I/O threads exist now
    with warnings.catch_warnings():  # Python 3.12+ warns on fork() with threads running
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by exit code
        code = 1
        try:
            run = asyncio.run(_loop(MemoryJournal(), "child"))
            code = 0 if run.status == "succeeded" else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while (found := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if found[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child hung waiting for its parent's I/O threads")
    assert os.waitstatus_to_exitcode(found[1]) == 0
