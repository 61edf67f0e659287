"""The lost-claim wait (``on_busy="wait"``, no lease) on both faces.

Workers that reach a step another worker claimed wait for its outcome and
then replay it. The wait does not hold the run's lock while it sleeps, and on
the async face it holds no I/O thread (see also ``test_async_face.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.storage import MemoryJournal
from tests.handles import worker_handle
from tests.unit.test_async_face import run_guarded

OPTIONS: dict[str, Any] = {"on_busy": "wait", "busy_timeout": 20.0}


def _sync_race(losers: int) -> tuple[list[Any], list[str]]:
    """A winner claims ``charge`` and holds it; ``losers`` threads reach it; then it ends."""
    journal = MemoryJournal()
    claimed, release = threading.Event(), threading.Event()
    bodies: list[str] = []

    @redrive.tool(restart_safe=False)
    def charge(amount: int) -> str:
        bodies.append("charge")
        claimed.set()
        release.wait(10)
        return f"charged {amount}"

    outcomes: list[Any] = []
    runs: list[redrive.Run] = []

    def worker() -> None:
        try:
            with redrive.run(worker_handle(journal), "shared", input="shared", **OPTIONS) as run:
                runs.append(run)
                outcomes.append(charge(5))
        except Exception as exc:  # pragma: no cover - reported by the assertion
            outcomes.append(exc)

    winner = threading.Thread(target=worker)
    winner.start()
    assert claimed.wait(10)
    threads = [threading.Thread(target=worker) for _ in range(losers)]
    for thread in threads:
        thread.start()
    while len(runs) < losers + 1:  # every loser is in its run (and soon waiting)
        threading.Event().wait(0.01)
    threading.Event().wait(0.1)
    # a waiting loser's run is not locked: another thread uses it meanwhile
    noted = threading.Thread(target=lambda: [r.note("meanwhile", 1) for r in runs[1:]])
    noted.start()
    noted.join(5)
    assert not noted.is_alive(), "a waiting worker holds its run's lock"
    release.set()
    for thread in [winner, *threads]:
        thread.join(30)
    return outcomes, bodies


def _async_race(
    losers: int, meanwhile: Callable[[], Awaitable[Any]] | None = None
) -> tuple[list[Any], list[str], Any, list[str]]:
    """The race on the async face; ``meanwhile()`` is awaited while the losers wait.

    Returns:
        ``(outcomes, bodies run, meanwhile's result, blocking calls made on the loop)``.
    """
    journal = MemoryJournal()
    bodies: list[str] = []

    async def main() -> tuple[list[Any], Any]:
        claimed, release = asyncio.Event(), asyncio.Event()

        @redrive.tool(restart_safe=False)
        async def charge(amount: int) -> str:
            bodies.append("charge")
            claimed.set()
            await release.wait()
            return f"charged {amount}"

        async def worker() -> str:
            async with redrive.run(worker_handle(journal), "shared", input="shared", **OPTIONS):
                return await charge(5)

        winner = asyncio.create_task(worker())
        await claimed.wait()
        tasks = [asyncio.create_task(worker()) for _ in range(losers)]
        await asyncio.sleep(0.3 if meanwhile is not None else 0.05)
        assert not any(t.done() for t in tasks)
        result = await asyncio.wait_for(meanwhile(), timeout=15) if meanwhile else None
        assert not any(t.done() for t in tasks)  # they still wait: the winner is busy
        release.set()
        return await asyncio.gather(winner, *tasks, return_exceptions=True), result

    on_loop, (outcomes, result) = run_guarded(main)
    record = journal.get_run("shared")
    assert record is not None and record.status == "succeeded"
    return outcomes, bodies, result, on_loop


@settings(max_examples=6, deadline=None)
@given(face=st.sampled_from(["sync", "async"]), losers=st.integers(1, 6))
def test_losers_wait_for_the_winners_outcome_and_replay_it(face: str, losers: int) -> None:
    """Every worker gets the winner's outcome; the body ran once, on either face."""
    if face == "sync":
        outcomes, bodies = _sync_race(losers)
    else:
        outcomes, bodies, _, _ = _async_race(losers)
    assert sorted(map(str, outcomes)) == ["charged 5"] * (losers + 1)
    assert bodies == ["charge"]


def test_ten_async_waiters_hold_no_thread_and_do_not_stall_the_loop() -> None:
    """Ten async workers waiting for another's claim hold no I/O thread (there are 8) and no
    loop time: another run on the same loop makes its 40 steps while they wait."""

    @redrive.tool(read_only=True)
    async def look(i: int) -> int:
        return i

    async def other() -> int:
        async with redrive.run(MemoryJournal(), "other", input="other") as run:
            total = sum([await look(i) for i in range(40)])
            run.finish(total)
        return total

    outcomes, bodies, total, on_loop = _async_race(10, other)
    assert total == sum(range(40))
    assert outcomes == ["charged 5"] * 11 and bodies == ["charge"]
    assert on_loop == [], "a waiter blocked the event loop"


def test_a_presumed_holder_that_does_not_finish_is_given_up_alike_on_both_faces() -> None:
    """A claim older than this execution whose holder stays silent past busy_timeout is
    settled as interrupted, with the same outcome on the sync and the async face."""
    journal = MemoryJournal()
    claimed, release = threading.Event(), threading.Event()

    @redrive.tool(restart_safe=False)
    def hold(amount: int) -> str:
        claimed.set()
        release.wait(10)
        return "held"

    @redrive.tool(restart_safe=False, name="hold")
    async def ahold(amount: int) -> str:
        return "never"  # pragma: no cover - the step is claimed by the holder

    def holder() -> None:
        with redrive.run(journal, "held", input="held"):
            hold(1)

    thread = threading.Thread(target=holder)
    thread.start()
    assert claimed.wait(10)
    patient = {**OPTIONS, "busy_timeout": 0.3}
    outcomes: list[str] = []
    try:
        try:
            with redrive.run(worker_handle(journal), "held", input="held", **patient):
                outcomes.append(repr(hold(1)))
        except Exception as exc:
            outcomes.append(type(exc).__name__)

        async def aworker() -> None:
            async with redrive.run(worker_handle(journal), "held", input="held", **patient):
                outcomes.append(repr(await ahold(1)))

        try:
            asyncio.run(aworker())
        except Exception as exc:
            outcomes.append(type(exc).__name__)
    finally:
        release.set()
        thread.join(10)
    assert len(outcomes) == 2 and outcomes[0] == outcomes[1], outcomes
