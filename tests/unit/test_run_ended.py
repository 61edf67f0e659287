"""A run that has ended accepts nothing (issue 12, #7).

After a run's ``with`` / ``async with`` block exits, every step, note and
write of that Run raises ``RunEndedError``, from any thread or asyncio task
(one that outlived the block, or ``run.note()`` after it): nothing runs and
nothing is appended after ``run_end``, so the run's record stays as it ended.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.storage import MemoryJournal
from tests.conftest import Drive, Loop

Op = Literal["tool", "model", "note", "now", "uuid4"]
Ending = Literal["succeeded", "resumable", "failed"]


def _frames(journal: MemoryJournal, run_id: str) -> list[tuple[int, str, str]]:
    return [(f.seq, f.kind, f.name) for f in journal.frames(run_id)]


def test_note_after_the_block_raises(drive: Drive) -> None:
    """``run.note()`` after the block: ``RunEndedError`` naming the run and seq; nothing written."""
    journal = MemoryJournal()

    @drive.tool(read_only=True)
    def lookup(q: str) -> str:
        return q.upper()

    def loop(run: redrive.Run) -> Loop:
        result = yield lookup("a")
        run.finish(result)
        return result

    ran = drive.run(journal, "noted", loop)
    before = _frames(journal, "noted")
    assert before[-1][1] == "run_end"
    with pytest.raises(redrive.RunEndedError) as caught:
        ran.run.note("late", {"x": 1})
    err = caught.value
    assert err.run_id == "noted" and err.seq == before[-1][0] + 1
    assert err.status == "succeeded" and err.step == "note 'late'"
    assert "after the run's block ended" in str(err) and "run_end is seq" in str(err)
    assert isinstance(err, RuntimeError)
    assert _frames(journal, "noted") == before
    assert journal.get_run("noted").status == "succeeded"  # type: ignore[union-attr]


def test_note_after_an_interrupted_block_raises(drive: Drive) -> None:
    """A block that ended resumable (a retryable error) accepts nothing either."""
    journal = MemoryJournal()

    def loop(run: redrive.Run) -> Loop:
        raise ConnectionError("network down")
        yield  # pragma: no cover

    with pytest.raises(ConnectionError):
        drive.run(journal, "stopped", loop)
    run = drive.last_run
    assert run is not None
    before = _frames(journal, "stopped")
    with pytest.raises(redrive.RunEndedError, match="resumable from seq"):
        run.note("late", 1)
    assert _frames(journal, "stopped") == before


def test_thread_that_outlives_its_run_gets_the_error() -> None:
    """A thread (with the run's context) calling a tool after the block: refused, body not run."""
    journal = MemoryJournal()
    gate = threading.Event()
    bodies: list[str] = []
    outcome: list[BaseException | str] = []

    @redrive.tool(restart_safe=False)
    def refund(amount: int) -> str:
        bodies.append("refund")
        return f"refunded {amount}"

    def late() -> None:
        gate.wait(10)
        try:
            outcome.append(refund(5))
        except BaseException as exc:
            outcome.append(exc)

    with redrive.run(journal, "threaded") as run:
        ctx = contextvars.copy_context()
        worker = threading.Thread(target=ctx.run, args=(late,), name="late-worker")
        worker.start()
        run.finish("done")
    before = _frames(journal, "threaded")
    gate.set()
    worker.join(10)
    assert bodies == []
    [err] = outcome
    assert isinstance(err, redrive.RunEndedError), err
    assert err.thread == "late-worker" and err.step == "tool 'refund'"
    assert "thread 'late-worker'" in str(err) and "nothing ran" in str(err)
    assert _frames(journal, "threaded") == before
    assert journal.get_run("threaded").status == "succeeded"  # type: ignore[union-attr]


def test_body_that_finishes_after_the_block_is_not_journaled() -> None:
    """A body still running when the block ends: its result write raises; nothing after run_end."""
    journal = MemoryJournal()
    started, release = threading.Event(), threading.Event()
    outcome: list[BaseException | str] = []

    @redrive.tool(restart_safe=False)
    def charge(amount: int) -> str:
        started.set()
        release.wait(10)
        return f"charged {amount}"

    def call() -> None:
        try:
            outcome.append(charge(3))
        except BaseException as exc:
            outcome.append(exc)

    with redrive.run(journal, "midbody") as run:
        ctx = contextvars.copy_context()
        worker = threading.Thread(target=ctx.run, args=(call,))
        worker.start()
        assert started.wait(10)
        run.finish("left early")
    before = _frames(journal, "midbody")
    assert before[-1][1] == "run_end"
    release.set()
    worker.join(10)
    [err] = outcome
    assert isinstance(err, redrive.RunEndedError), err
    assert "tool_done 'charge'" in str(err)
    # the body ran: the error says so, and that the step stays in flight (not "nothing ran")
    assert "nothing ran" not in str(err) and "the call it answers had run" in str(err)
    assert "in flight" in str(err)
    assert _frames(journal, "midbody") == before


def test_task_that_outlives_its_run_gets_the_error() -> None:
    """An asyncio task created in the block and run after it: refused, body not run."""
    journal = MemoryJournal()
    bodies: list[str] = []

    @redrive.tool(restart_safe=False)
    async def refund(amount: int) -> str:
        bodies.append("refund")
        return f"refunded {amount}"

    async def main() -> tuple[BaseException | str, list[tuple[int, str, str]]]:
        gate = asyncio.Event()

        async def late() -> str:
            await gate.wait()
            result: str = await refund(5)
            return result

        async with redrive.run(journal, "tasked") as run:
            task = asyncio.create_task(late(), name="late-task")
            await asyncio.sleep(0)
            run.finish("done")
        before = _frames(journal, "tasked")
        gate.set()
        [found] = await asyncio.gather(task, return_exceptions=True)
        return found, before

    found, before = asyncio.run(main())
    assert isinstance(found, redrive.RunEndedError), found
    assert "task 'late-task'" in str(found)
    assert bodies == []
    assert _frames(journal, "tasked") == before


# -- the kind: any operation, scheduled after the end, from threads or tasks ---------------


class _Program:
    """Tools, a model and values for one face, counting what ran."""

    def __init__(self, face: str) -> None:
        self.ran: list[str] = []
        ran = self.ran

        if face == "sync":

            @redrive.tool(restart_safe=False)
            def act(n: int) -> int:
                ran.append("tool")
                return n

            @redrive.model
            def think(prompt: str) -> str:
                ran.append("model")
                return prompt

            self.act: Callable[[int], Any] = act
            self.think: Callable[[str], Any] = think
        else:

            @redrive.tool(restart_safe=False)
            async def aact(n: int) -> int:
                ran.append("tool")
                return n

            @redrive.model
            async def athink(prompt: str) -> str:
                ran.append("model")
                return prompt

            self.act = aact
            self.think = athink

    def call(self, run: redrive.Run, op: Op, i: int) -> Any:
        """Make one operation (a coroutine to await on the async face for tool/model)."""
        if op == "tool":
            return self.act(i)
        if op == "model":
            return self.think(f"p{i}")
        if op == "note":
            return run.note(f"n{i}", i)
        if op == "now":
            return redrive.now()
        return redrive.uuid4()


def _end_block(ending: Ending) -> None:
    if ending == "resumable":
        raise ConnectionError("the block stops, resumable")
    if ending == "failed":
        raise ValueError("the block fails")


def _sync_case(ops: list[Op], ending: Ending) -> tuple[list[Any], list[str], MemoryJournal]:
    journal, program = MemoryJournal(), _Program("sync")
    gate = threading.Event()
    outcomes: list[Any] = [None] * len(ops)
    threads: list[threading.Thread] = []

    def later(run: redrive.Run, op: Op, i: int) -> None:
        gate.wait(10)
        try:
            outcomes[i] = program.call(run, op, i)
        except BaseException as exc:
            outcomes[i] = exc

    try:
        with redrive.run(journal, "p") as run:
            program.act(-1)  # a step inside the block, so the run has content
            for i, op in enumerate(ops):
                ctx = contextvars.copy_context()
                thread = threading.Thread(target=ctx.run, args=(later, run, op, i))
                thread.start()
                threads.append(thread)
            _end_block(ending)
    except (ConnectionError, ValueError):
        pass
    before = [f.seq for f in journal.frames("p")]
    program.ran.clear()
    gate.set()
    for thread in threads:
        thread.join(10)
    assert [f.seq for f in journal.frames("p")] == before
    return outcomes, program.ran, journal


def _async_case(ops: list[Op], ending: Ending) -> tuple[list[Any], list[str], MemoryJournal]:
    journal, program = MemoryJournal(), _Program("async")

    async def main() -> list[Any]:
        gate = asyncio.Event()

        async def later(run: redrive.Run, op: Op, i: int) -> Any:
            await gate.wait()
            made = program.call(run, op, i)
            return await made if asyncio.iscoroutine(made) else made

        tasks: list[asyncio.Task[Any]] = []
        try:
            async with redrive.run(journal, "p") as run:
                await program.act(-1)
                tasks = [asyncio.create_task(later(run, op, i)) for i, op in enumerate(ops)]
                await asyncio.sleep(0)
                _end_block(ending)
        except (ConnectionError, ValueError):
            pass
        before = [f.seq for f in journal.frames("p")]
        program.ran.clear()
        gate.set()
        found = await asyncio.gather(*tasks, return_exceptions=True)
        assert [f.seq for f in journal.frames("p")] == before
        return list(found)

    return asyncio.run(main()), program.ran, journal


OPS = st.sampled_from(["tool", "model", "note", "now", "uuid4"])


@pytest.mark.parametrize("face", ["sync", "async"])
@given(
    ops=st.lists(OPS, min_size=1, max_size=5),
    ending=st.sampled_from(["succeeded", "resumable", "failed"]),
)
def test_anything_after_the_end_is_refused(face: str, ops: list[Op], ending: Ending) -> None:
    """Property: any operation scheduled after the block ended raises; nothing runs or lands."""
    case = _sync_case if face == "sync" else _async_case
    outcomes, ran, journal = case(ops, ending)
    assert all(isinstance(o, redrive.RunEndedError) for o in outcomes), outcomes
    assert ran == []
    record = journal.get_run("p")
    assert record is not None
    expected = {"succeeded": "succeeded", "resumable": "paused", "failed": "failed"}[ending]
    assert record.status == expected
    assert {o.status for o in outcomes} == {expected}
