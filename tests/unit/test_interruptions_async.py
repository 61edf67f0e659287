"""A timeout or a job runner's cancel during a hanging async call leaves the run resumable.

DESIGN invariant 12, the async face (the other interruptions and an explicit cancel:
:mod:`tests.unit.test_interruptions`; every point a stop can land on:
:mod:`tests.unit.test_cancel_points`). ``asyncio.wait_for``, ``asyncio.timeout`` or
``task.cancel()`` stops the job 0.05 s in: inside the hanging call, or before it while
redrive awaits its journal work. A hanging call records whether the stop reached it, so a
lost cancel fails the test instead of sleeping out the hang and passing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import redrive
from redrive.frames import Kind
from redrive.storage import Journal, MemoryJournal
from tests.unit.test_async_face import SlowJournal
from tests.unit.test_interruptions import Provider, _status

#: How long a hanging call sleeps: far longer than any stop takes to reach it. A call that
#: wakes on its own records "slept through": the stop's cancel never reached it.
HANG = 10.0


def _hanging_job(
    journal: Journal, provider: Provider, hang: dict[str, bool], seen: list[str]
) -> Any:
    """An async job: charge_card, then a model call. The call ``hang`` maps to True
    ("tool" or "model") hangs, each time it runs until ``hang`` is cleared; ``seen`` gets
    "<call> cancelled" or "<call> slept through". Returns the job coroutine function."""

    async def hanging(call: str) -> None:
        if not hang.get(call):
            return
        try:
            await asyncio.sleep(HANG)
        except asyncio.CancelledError:
            seen.append(f"{call} cancelled")
            raise
        seen.append(f"{call} slept through")

    @redrive.tool(restart_safe=True)
    async def charge_card(cents: int) -> str:
        key = redrive.idempotency_key()
        assert key is not None
        provider.charge(key)
        await hanging("tool")
        return f"charged {cents}"

    @redrive.model
    async def ask(prompt: str) -> str:
        provider.model_calls += 1
        await hanging("model")
        return f"answer to {prompt}"

    async def job(order: str) -> Any:
        async with redrive.run(journal, f"job:{order}", input=order) as run:
            charged = await charge_card(500)
            return run.finish([charged, await ask("summarize")])

    return job


async def _wait_for(job: Callable[[str], Any]) -> Any:
    return await asyncio.wait_for(job("42"), 0.05)


async def _timeout(job: Callable[[str], Any]) -> Any:
    async with asyncio.timeout(0.05):
        return await job("42")


async def _runner_cancel(job: Callable[[str], Any]) -> Any:
    task = asyncio.create_task(job("42"))
    await asyncio.sleep(0.05)
    task.cancel()
    return await task


STOPS = {"wait_for": _wait_for, "asyncio.timeout": _timeout, "task.cancel": _runner_cancel}


@pytest.mark.parametrize("slow", [False, True], ids=["fast_journal", "slow_journal"])
@pytest.mark.parametrize("stop", list(STOPS))
@pytest.mark.parametrize("hangs", ["model", "tool"])
def test_a_timeout_or_runner_cancel_leaves_the_job_resumable(
    stop: str, hangs: str, slow: bool
) -> None:
    """wait_for, asyncio.timeout or task.cancel during a hanging model call or tool body:
    the run stays running and the queue's redelivery finishes it with one charge.

    The stop comes 0.05 s in: in the hanging call, or before it while redrive awaits its
    journal work (always so with a journal whose writes take longer, as on a loaded
    machine). Either way the call never sleeps through, and the redelivery (the hang
    disarmed) finishes the run."""
    journal = SlowJournal() if slow else MemoryJournal()
    provider, hang = Provider(), {hangs: True}
    seen: list[str] = []
    job = _hanging_job(journal, provider, hang, seen)
    expected: type[BaseException] = (
        asyncio.CancelledError if stop == "task.cancel" else TimeoutError
    )
    with pytest.raises(expected):
        asyncio.run(STOPS[stop](job))
    assert seen in ([f"{hangs} cancelled"], [])  # cut off in the call, or before it
    if slow:
        assert seen == []  # the tool's claim (an append) outlasts the stop: no call began
    assert _status(journal, "job:42") == "running"
    frames = [f.kind for f in journal.frames("job:42")]
    assert Kind.MODEL_REQUEST.value not in frames  # the cut-off model call is not recorded
    hang.clear()  # the redelivery does not hang, wherever the stop came
    assert asyncio.run(job("42")) == ["charged 500", "answer to summarize"]
    assert _status(journal, "job:42") == "succeeded"
    assert list(provider.charges.values()) == [1]
    assert not any("slept through" in what for what in seen)
