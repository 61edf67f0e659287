"""A timeout or a runner's cancel reaches an async run wherever it lands (DESIGN invariant 12).

One attempt of an async job (a model call, a tool call, a model call) is stopped at
one chosen point: inside one of the journal calls redrive makes around the steps
(the run's opening and lease, a tool's claim, a result's or a model response's
write, the closing), or inside a model call or the tool body (async on the loop,
or sync on a thread through ``asyncio.to_thread``). The stop is an
``asyncio.timeout`` expiring there, or the job runner's ``task.cancel()``.

Wherever it lands, the stop surfaces at once (``TimeoutError`` or
``CancelledError``): no call that hangs sleeps through it and no async call
begins after it. The run stays resumable with a consistent journal: a tool
claimed (``tool_start`` journaled) without an outcome is in flight, so the
redelivery runs it again when it is restart-safe (one charge: its idempotency
key is kept) and refuses it otherwise; a model call cut off is not recorded.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.frames import Frame, Kind
from redrive.replay._lease import LeaseKeeper
from redrive.storage import MemoryJournal, RunRecord
from tests.conftest import examples

#: How long a hanging call waits: far longer than a stop takes to reach it. A call that
#: wakes on its own records "slept through": the stop never reached it.
HANG = 10.0

#: The calls of the job, in order, and what the job returns.
CALLS = ("plan", "charge", "summarize")
OUTPUT = ["answer to plan", "charged 500", "answer to summarize"]


class PointJournal(MemoryJournal):
    """A memory journal that calls ``at_call(name)`` first in each call a run makes on it."""

    def __init__(self) -> None:
        super().__init__()
        self.at_call: Callable[[str], None] | None = None

    def _point(self, name: str) -> None:
        if self.at_call is not None:
            self.at_call(name)

    def get_run(self, run_id: str) -> RunRecord | None:
        self._point("get_run")
        return super().get_run(run_id)

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        self._point("create_run")
        return super().create_run(record, first)

    def append(self, run_id: str, frames: Sequence[Frame], **options: Any) -> None:
        self._point("append")
        super().append(run_id, frames, **options)

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        self._point("acquire_lease")
        return super().acquire_lease(run_id, owner, ttl)

    def renew_lease(self, run_id: str, owner: str, epoch: int, ttl: float) -> None:
        self._point("renew_lease")
        super().renew_lease(run_id, owner, epoch, ttl)

    def release_lease(self, run_id: str, owner: str, epoch: int) -> None:
        self._point("release_lease")
        super().release_lease(run_id, owner, epoch)


class Point:
    """Where one attempt's stop lands: the ``at``-th journal call (from 0), or in call ``at``.

    ``None`` stops nothing. ``seen`` lists what the calls saw: "<call> cancelled",
    "<call> released", "<call> slept through", "<call> began after the stop".
    """

    def __init__(self, at: int | str | None) -> None:
        self.at = at
        self.journal_calls = 0
        self.seen: list[str] = []
        self.issued = threading.Event()  # set on the loop once the stop is issued there
        self.release = threading.Event()  # lets a hanging call on a thread go on
        self._issue: Callable[[], object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    def arm(self, issue: Callable[[], object]) -> None:
        """Issue the stop with ``issue()`` (on the running loop) when the point is reached."""
        self._issue, self._loop = issue, asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def journal_call(self, name: str) -> None:
        """A journal call begins (on any thread): the ``at``-th one issues the stop first."""
        index, self.journal_calls = self.journal_calls, self.journal_calls + 1
        if index == self.at:
            self._stop()

    async def on_loop(self, call: str) -> None:
        """Inside an async call: the stop's own call issues it, then hangs until cancelled."""
        self._began(call)
        if call != self.at:
            return
        self._stop()
        try:
            await asyncio.sleep(HANG)
        except asyncio.CancelledError:
            self.seen.append(f"{call} cancelled")
            raise
        self.seen.append(f"{call} slept through")

    def on_thread(self, call: str) -> None:
        """Inside a sync call on a thread: as :meth:`on_loop`, hanging until released."""
        self._began(call)
        if call != self.at:
            return
        self._stop()
        self.seen.append(f"{call} {'released' if self.release.wait(HANG) else 'slept through'}")

    def _began(self, call: str) -> None:
        if self.issued.is_set():
            self.seen.append(f"{call} began after the stop")

    def _stop(self) -> None:
        """Issue the stop on the loop; off the loop, wait until it is issued (the work it
        interrupts finishes after the stop, as a slow write would)."""
        assert self._issue is not None and self._loop is not None
        if threading.get_ident() == self._loop_thread:
            self._fire()
            return
        self._loop.call_soon_threadsafe(self._fire)
        assert self.issued.wait(HANG), "the loop never issued the stop"

    def _fire(self) -> None:
        assert self._issue is not None and self._loop is not None
        self._issue()  # a timeout expiring now cancels in the loop's next round: after it,
        self._loop.call_soon(self.issued.set)  # the stop is issued


def _job(
    journal: PointJournal, point: Point, charges: Counter[str], *, thread: bool, safe: bool
) -> Callable[..., Any]:
    """The job: ask("plan"), charge_card(500) (async, or sync via to_thread), ask("summarize")."""

    @redrive.model
    async def ask(prompt: str) -> str:
        await point.on_loop(prompt)
        return f"answer to {prompt}"

    def charged(cents: int) -> str:
        key = redrive.idempotency_key()
        assert key is not None
        charges[key] += 0 if key in charges else 1  # the provider dedupes on the key
        return f"charged {cents}"

    @redrive.tool(restart_safe=safe, name="charge_card")
    async def charge_async(cents: int) -> str:
        result = charged(cents)
        await point.on_loop("charge")
        return result

    @redrive.tool(restart_safe=safe, name="charge_card")
    def charge_sync(cents: int) -> str:
        result = charged(cents)
        point.on_thread("charge")
        return result

    async def charge(cents: int) -> str:
        if thread:
            return await asyncio.to_thread(charge_sync, cents)
        return await charge_async(cents)

    async def job(**options: Any) -> Any:
        async with redrive.run(journal, "job:1", input="1", **options) as run:
            plan = await ask("plan")
            paid = await charge(500)
            return run.finish([plan, paid, await ask("summarize")])

    return job


async def _attempt(job: Callable[..., Any], point: Point, stop: str, **options: Any) -> Any:
    """One attempt of ``job`` stopped at ``point`` by ``stop``; a hanging thread goes on after."""
    try:
        if stop == "asyncio.timeout":
            async with asyncio.timeout(None) as timeout:
                loop = asyncio.get_running_loop()
                point.arm(lambda: timeout.reschedule(loop.time()))
                return await job(**options)
        task = asyncio.create_task(job(**options))
        point.arm(task.cancel)
        return await task
    finally:
        point.release.set()  # (asyncio.run then waits for the thread to end)


def _count_calls(thread: bool, safe: bool, options: dict[str, Any]) -> int:
    """How many journal calls an undisturbed attempt makes."""
    journal, point = PointJournal(), Point(None)
    journal.at_call = point.journal_call
    job = _job(journal, point, Counter(), thread=thread, safe=safe)
    assert asyncio.run(_attempt(job, point, "task.cancel", **options)) == OUTPUT
    return point.journal_calls


@pytest.mark.parametrize("lease", ["none", "held", "unsure"])
@pytest.mark.parametrize("thread", [False, True], ids=["async_tool", "thread_tool"])
@pytest.mark.parametrize("stop", ["asyncio.timeout", "task.cancel"])
@settings(max_examples=examples(default=20, ci=40, thorough=200))
@given(safe=st.booleans(), model_commit=st.sampled_from(["write", "group", "each"]), data=st.data())
def test_a_stop_reaches_the_run_wherever_it_lands(
    stop: str, thread: bool, lease: str, safe: bool, model_commit: str, data: st.DataObject
) -> None:
    """The stop surfaces at once wherever it lands, and the run stays resumable (see the
    module docstring). ``lease``: none; held (not renewed before a body); or unsure (as when
    the loop comes back late to the task: the lease is renewed right after the claim and
    again, in an await of its own, between the claim and the body)."""
    # a lease long enough that its renewer never renews during an example
    options = {"model_commit": model_commit, "lease": None if lease == "none" else 300.0}
    if lease != "unsure":
        _stop_once(stop, thread, safe, options, data)
        return
    fence = LeaseKeeper.fence

    def late_fence(keeper: LeaseKeeper, seq: int, name: str) -> int | None:
        keeper._held_until = 0.0  # the lease is due: the fence renews it (a journal call)
        return fence(keeper, seq, name)

    with (
        mock.patch.object(LeaseKeeper, "surely_held", lambda _: False),
        mock.patch.object(LeaseKeeper, "fence", late_fence),
    ):
        _stop_once(stop, thread, safe, options, data)


def _stop_once(
    stop: str, thread: bool, safe: bool, options: dict[str, Any], data: st.DataObject
) -> None:
    """One example of the property above."""
    calls = _count_calls(thread, safe, options)
    at: int | str = data.draw(st.sampled_from([*CALLS, *range(calls)]), label="at")
    journal, point, charges = PointJournal(), Point(at), Counter[str]()
    journal.at_call = point.journal_call
    job = _job(journal, point, charges, thread=thread, safe=safe)
    with pytest.raises(TimeoutError if stop == "asyncio.timeout" else asyncio.CancelledError):
        asyncio.run(_attempt(job, point, stop, **options))
    journal.at_call = None
    assert point.issued.is_set()
    assert not [s for s in point.seen if "slept through" in s]  # no hang outlived the stop
    late = [s for s in point.seen if s.endswith("began after the stop")]
    # no async call begins once stopped; a tool step on a thread goes on (not cancellable)
    assert late in ([], ["charge began after the stop"]) if thread else late == []
    kinds = Counter(f.kind for f in journal.frames("job:1"))
    status = _status(journal)
    assert status == ("succeeded" if kinds[Kind.RUN_END.value] else "running")
    assert kinds[Kind.MODEL_REQUEST.value] == kinds[Kind.MODEL_RESPONSE.value]  # none cut off
    ended = kinds[Kind.TOOL_DONE.value] + kinds[Kind.TOOL_ERROR.value]
    assert kinds[Kind.TOOL_START.value] <= 1 and ended <= kinds[Kind.TOOL_START.value]
    in_flight = kinds[Kind.TOOL_START.value] > ended
    redelivery = _job(journal, Point(None), charges, thread=thread, safe=safe)
    if in_flight and not safe:
        with pytest.raises(redrive.SideEffectRetryBlockedError):
            asyncio.run(redelivery(**options))
        assert _status(journal) == "running"
        return
    assert asyncio.run(redelivery(**options)) == OUTPUT
    assert _status(journal) == "succeeded"
    assert list(charges.values()) == [1]  # one charge: every attempt kept the key


def _status(journal: MemoryJournal) -> str:
    record = journal.get_run("job:1")
    assert record is not None
    return record.status
