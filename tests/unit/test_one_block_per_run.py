"""Two live blocks on one run in one process are refused or serialized (issue 12, #8).

Before: a second ``with redrive.run(journal, run_id)`` on a run already open
in the process took the first block's running tool steps for interrupted
ones; under ``on_in_flight="tell_model"`` it journaled them as
not-safely-resumable while their bodies ran, and the real results were
dropped. Now the second block raises ``RunBusyError`` (reason ``open_here``,
naming where the first is open) or, with ``on_busy="wait"``, opens once the
first ended. Threads from ``redrive.executor()`` and tasks created inside a
block still join it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Literal

import pytest

import redrive
from redrive.storage import MemoryJournal


def _outcomes(journal: MemoryJournal, run_id: str) -> list[Any]:
    return [
        f.data().get("result")
        for f in journal.frames(run_id)
        if f.kind == "tool_done" and isinstance(f.data().get("result"), dict)
    ]


@pytest.mark.parametrize("on_busy", ["raise", "wait"])
def test_second_block_in_another_thread(on_busy: str) -> None:
    """A block in another thread while the first runs a tool body: refused, or opened after it."""
    journal = MemoryJournal()
    started, release = threading.Event(), threading.Event()
    bodies: list[int] = []

    @redrive.tool(restart_safe=False)
    def refund(amount: int) -> dict[str, int]:
        bodies.append(amount)
        started.set()
        release.wait(10)
        return {"refunded": amount}

    def first() -> None:
        with redrive.run(journal, "r8", on_in_flight="tell_model") as run:
            run.finish(refund(5))

    holder = threading.Thread(target=first, name="first-block")
    holder.start()
    assert started.wait(10)
    options: dict[str, Any] = {"on_in_flight": "tell_model", "on_busy": on_busy}
    try:
        if on_busy == "raise":
            with (
                pytest.raises(redrive.RunBusyError) as caught,
                redrive.run(journal, "r8", **options),
            ):
                pass  # pragma: no cover - the block does not open
            err = caught.value
            assert err.reason is redrive.RunBusyReason.OPEN_HERE
            assert err.run_id == "r8" and err.where is not None
            assert "thread 'first-block'" in err.where and "test_one_block_per_run.py" in err.where
            assert "already open in this process" in str(err)
        else:
            release.set()  # the second block waits for the first to end, then replays it
            with redrive.run(journal, "r8", **options) as again:
                assert again.finished
                assert again.finish(refund(5)) == {"refunded": 5}
    finally:
        release.set()
        holder.join(10)
    assert bodies == [5]
    assert _outcomes(journal, "r8") == [{"refunded": 5}]  # no not-safely-resumable outcome
    assert journal.get_run("r8").status == "succeeded"  # type: ignore[union-attr]


def test_nested_block_on_the_same_run_is_refused_at_once() -> None:
    """A nested block on the same run in the same thread: refused even with on_busy='wait'."""
    journal = MemoryJournal()
    with redrive.run(journal, "nest") as run:
        with (
            pytest.raises(redrive.RunBusyError, match="nested block") as caught,
            redrive.run(journal, "nest", on_busy="wait", busy_timeout=30),
        ):
            pass  # pragma: no cover
        assert caught.value.reason is redrive.RunBusyReason.OPEN_HERE
        run.finish(1)
    assert run.status == "succeeded"


@pytest.mark.parametrize("lease", [None, 30.0])
@pytest.mark.parametrize("on_busy", ["raise", "wait"])
def test_second_block_in_another_task(
    on_busy: Literal["raise", "wait"], lease: float | None
) -> None:
    """Two asyncio tasks on the same run: the second is refused, or waits (lease or not)."""
    journal = MemoryJournal()
    bodies: list[int] = []

    async def main() -> list[Any]:
        started, release = asyncio.Event(), asyncio.Event()

        @redrive.tool(restart_safe=False)
        async def refund(amount: int) -> dict[str, int]:
            bodies.append(amount)
            started.set()
            await release.wait()
            return {"refunded": amount}

        async def block(name: str) -> Any:
            async with redrive.run(
                journal, "t8", on_in_flight="tell_model", on_busy=on_busy, lease=lease
            ) as run:
                return run.finish(await refund(5))

        first = asyncio.create_task(block("first"), name="first-task")
        await started.wait()
        second = asyncio.create_task(block("second"), name="second-task")
        await asyncio.sleep(0.05)
        release.set()
        return list(await asyncio.gather(first, second, return_exceptions=True))

    first, second = asyncio.run(main())
    assert first == {"refunded": 5}
    if on_busy == "raise":
        assert isinstance(second, redrive.RunBusyError), second
        assert second.reason is redrive.RunBusyReason.OPEN_HERE
        assert second.where is not None and "asyncio task 'first-task'" in second.where
    else:
        assert second == {"refunded": 5}  # replayed after the first block ended
    assert bodies == [5]
    assert _outcomes(journal, "t8") == [{"refunded": 5}]


def test_executor_threads_and_tasks_still_join_the_block() -> None:
    """redrive.executor() threads and tasks created in the block join it (no second block)."""
    journal = MemoryJournal()

    @redrive.tool(read_only=True)
    def look(n: int) -> int:
        return n * 2

    with redrive.run(journal, "joined") as run, redrive.executor(2) as pool:
        results = list(pool.map(look, [1, 2, 3]))
        run.finish(results)
    assert results == [2, 4, 6]

    @redrive.tool(read_only=True)
    async def alook(n: int) -> int:
        return n * 3

    async def main() -> list[int]:
        found: list[int] = []
        async with redrive.run(journal, "ajoined") as arun:
            found = list(await asyncio.gather(*(alook(i) for i in range(3))))
            arun.finish(found)
        return found

    assert asyncio.run(main()) == [0, 3, 6]


def test_blocks_on_different_runs_or_replay_only_are_not_refused() -> None:
    """Other run ids, and replay-only blocks (which write nothing), open alongside."""
    journal = MemoryJournal()
    with redrive.run(journal, "a") as a:
        a.finish(1)
    with redrive.run(journal, "a", live=True) as live_a, redrive.run(journal, "b") as b:
        with redrive.run(journal, "a", live=False) as replay_a:
            assert replay_a.output == 1
        b.finish(2)
        assert live_a.finished


# -- outside reports -----------------------------------------------------------------------


def test_concurrent_calls_with_one_id_run_the_body_once() -> None:
    """DBOS dbos-transact-py#544: concurrent calls with one workflow id all ran the body.

    Here two concurrent calls of a durable function with one run id: the second
    waits for the first block (on_busy="wait") and hands back its recorded output.
    """
    journal = MemoryJournal()
    effects: list[int] = []

    @redrive.tool(restart_safe=False)
    async def insert(num: int) -> int:
        effects.append(num)
        await asyncio.sleep(0.05)
        return num

    @redrive.durable(journal, run_id="insert:{num}", on_busy="wait")
    async def workflow(num: int) -> int:
        result: int = await insert(num)
        return result

    async def main() -> list[int]:
        return list(await asyncio.gather(workflow(14), workflow(14)))

    assert asyncio.run(main()) == [14, 14]
    assert effects == [14]


def test_a_duplicate_id_leaves_the_first_block_durable() -> None:
    """DBOS dbos-transact-ts#725: a second start with the same id broke the first one's
    durability and gave an obscure error. Here the second block is refused with a clear
    error and the first completes, its journal whole."""
    journal = MemoryJournal()
    release = threading.Event()

    @redrive.tool(restart_safe=False)
    def background(steps: int) -> int:
        release.wait(10)
        return steps

    def first() -> None:
        with redrive.run(journal, "task-1") as run:
            run.finish(background(3))

    holder = threading.Thread(target=first)
    holder.start()
    try:
        while (found := journal.get_run("task-1")) is None or found.next_seq < 2:
            threading.Event().wait(0.01)
        with (
            pytest.raises(redrive.RunBusyError, match="already open in this process"),
            redrive.run(journal, "task-1"),
        ):
            pass  # pragma: no cover
    finally:
        release.set()
        holder.join(10)
    record = journal.get_run("task-1")
    assert record is not None and record.status == "succeeded"
    assert [f.kind for f in journal.frames("task-1")] == [
        "run_start",
        "tool_start",
        "tool_done",
        "run_end",
    ]
