"""The lost-claim wait (``on_busy="wait"``, no lease) on both faces.

Workers that reach a step another worker claimed wait for its outcome and
then replay it. The wait does not hold the run's lock while it sleeps, and on
the async face it holds no I/O thread (see also ``test_async_face.py``).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.storage import MemoryJournal

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
            with redrive.run(journal, "shared", input="shared", **OPTIONS) as run:
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


def _async_race(losers: int) -> tuple[list[Any], list[str]]:
    journal = MemoryJournal()
    bodies: list[str] = []

    async def main() -> list[Any]:
        claimed, release = asyncio.Event(), asyncio.Event()

        @redrive.tool(restart_safe=False)
        async def charge(amount: int) -> str:
            bodies.append("charge")
            claimed.set()
            await release.wait()
            return f"charged {amount}"

        async def worker() -> str:
            async with redrive.run(journal, "shared", input="shared", **OPTIONS):
                return await charge(5)

        winner = asyncio.create_task(worker())
        await claimed.wait()
        tasks = [asyncio.create_task(worker()) for _ in range(losers)]
        await asyncio.sleep(0.05)
        release.set()
        return await asyncio.gather(winner, *tasks, return_exceptions=True)

    return asyncio.run(main()), bodies


@settings(max_examples=6, deadline=None)
@given(face=st.sampled_from(["sync", "async"]), losers=st.integers(1, 6))
def test_losers_wait_for_the_winners_outcome_and_replay_it(face: str, losers: int) -> None:
    """Every worker gets the winner's outcome; the body ran once, on either face."""
    outcomes, bodies = (_sync_race if face == "sync" else _async_race)(losers)
    assert sorted(map(str, outcomes)) == ["charged 5"] * (losers + 1)
    assert bodies == ["charge"]
