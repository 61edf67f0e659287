"""Calls in a thread pool with copied contexts: siblings that share a flow, resumed in any order.

A pool that copies the caller's context for each call (``pool.submit(
contextvars.copy_context().run, ...)``, ``loop.run_in_executor`` with a copy,
LangChain's ``ContextThreadPoolExecutor`` under a sync ``ToolNode``) starts
threads redrive does not see start: every call carries a silent copy of its
starter's flow, and their steps take positions at one point in the order they
arrive. Each call here waits for a person's approval (``Pending``) before it
draws (a side effect, logged in a file outside the run); each delivery
approves more calls and runs every approved call again, so a resumed call
replays its draw while a newly approved one draws live. When the new call
reaches its draw first (the recorded siblings are slow), its position is the
one a sibling's draw was recorded at: it must go live, not be read as that
draw's drift (it was, before shared flows: ``DivergenceError``). A drifted
call in such a pool still diverges, and nothing is drawn twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import redrive
from redrive.errors import DivergenceError
from redrive.replay import suspend
from tests.conftest import examples

T = TypeVar("T")
Face = Literal["sync", "async"]
#: A script: the calls' count, the batches of calls each delivery approves (in order),
#: and each delivery's delay (ms) before each call's draw.
Script = tuple[int, list[list[int]], list[list[int]]]


class Pending(Exception):
    """A call waits for its approval."""


class Desk:
    """The approvals, the per-call delays of this delivery, and the draw log (a file)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.approved: set[str] = set()
        self.delays: dict[str, float] = {}
        self.args: dict[str, str] = {}  # a call's draw argument, when the code changed it

    def drawn(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def _loop(desk: Desk, journal: Any, run_id: str, k: int, face: Face) -> Any:
    """One delivery: plan ``k`` shapes (a model step), then each call in the pool."""

    @redrive.model
    def plan(count: int) -> list[str]:
        return [f"s{i}" for i in range(count)]

    @redrive.tool(restart_safe=False)
    def draw(shape: str) -> str:
        with desk.log.open("a") as log:
            log.write(f"{shape}\n")
        return f"drew {shape}"

    def call(shape: str) -> str:
        if shape not in desk.approved:
            raise Pending(shape)
        time.sleep(desk.delays.get(shape, 0.0))
        return draw(desk.args.get(shape, shape))

    def outcome(results: list[Any], run: Any) -> Any:
        failed = [r for r in results if isinstance(r, BaseException) and not isinstance(r, Pending)]
        if failed:
            raise failed[0]
        waiting = [r.args[0] for r in results if isinstance(r, Pending)]
        if waiting:
            raise suspend(f"waiting for approval of {waiting}")
        return run.finish(results)

    if face == "sync":
        with redrive.run(journal, run_id) as run:
            shapes = plan(k)
            with concurrent.futures.ThreadPoolExecutor(k) as pool:
                futures = [pool.submit(contextvars.copy_context().run, call, s) for s in shapes]
                results = [f.exception() or f.result() for f in futures]
            outcome(results, run)
        return run

    async def go() -> Any:
        async with redrive.run(journal, run_id) as run:
            shapes = plan(k)
            loop = asyncio.get_running_loop()
            with concurrent.futures.ThreadPoolExecutor(k) as pool:
                pending = [
                    loop.run_in_executor(pool, contextvars.copy_context().run, call, s)
                    for s in shapes
                ]
                results = await asyncio.gather(*pending, return_exceptions=True)
            outcome(list(results), run)
        return run

    return asyncio.run(go())


def _deliver_all(tmp: Path, script: Script, face: Face) -> None:
    """Deliver the job once per approval batch; every shape drawn once, the run finished."""
    k, batches, delays = script
    desk = Desk(tmp / f"draws-{uuid.uuid4().hex}.log")
    journal = redrive.open_journal(str(tmp / f"runs-{uuid.uuid4().hex}.duckdb"))
    run_id = "job:shapes"
    try:
        run = None
        for n, batch in enumerate(batches):
            desk.approved |= {f"s{i}" for i in batch}
            desk.delays = {f"s{i}": ms / 1000 for i, ms in enumerate(delays[n])}
            run = _loop(desk, journal, run_id, k, face)
            last = n == len(batches) - 1
            assert run.status == ("succeeded" if last else "suspended")
            assert sorted(desk.drawn()) == sorted(desk.approved)  # each approved shape once
        assert run is not None and run.output == [f"drew s{i}" for i in range(k)]
        # the finished run replays whole, drawing nothing
        desk.delays = {}
        replayed = _loop(desk, journal, run_id, k, face)
        assert replayed.output == run.output
        assert sorted(desk.drawn()) == [f"s{i}" for i in range(k)]
    finally:
        journal.close()


def approval_batches(draw: Callable[..., Any], items: Sequence[T]) -> list[list[T]]:
    """Draw ``items`` in a random order, cut into non-empty batches (one per delivery)."""
    order = list(draw(st.permutations(items)))
    cuts = draw(st.lists(st.integers(1, len(items) - 1), max_size=len(items) - 1))
    bounds = [0, *sorted(set(cuts)), len(order)]
    return [order[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def scripts(draw: Callable[..., Any]) -> Script:
    """k calls (2-4), a random approval order cut into deliveries, random draw delays."""
    k = draw(st.integers(2, 4))
    batches = approval_batches(draw, range(k))
    delays = draw(
        st.lists(
            st.lists(st.sampled_from([0, 5, 40]), min_size=k, max_size=k),
            min_size=len(batches),
            max_size=len(batches),
        )
    )
    return k, batches, delays


#: the reported order: s0 drawn first; on the resume s0 is slow, so s1 and s2 (never
#: drawn) reach their draws before s0 asks again for its recorded one
SLOW_RECORDED: Script = (3, [[0], [1, 2]], [[0, 0, 0], [150, 0, 0]])


@pytest.mark.parametrize("face", ["sync", "async"])
def test_new_calls_that_overtake_a_recorded_sibling_go_live(tmp_path: Path, face: Face) -> None:
    """The reported shape outside LangGraph: a new call first at the point goes live."""
    _deliver_all(tmp_path, SLOW_RECORDED, face)


@pytest.mark.parametrize("face", ["sync", "async"])
@settings(
    max_examples=examples(default=12, ci=12, thorough=200),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=scripts())
@example(script=SLOW_RECORDED)
@example(script=(4, [[3], [0, 2], [1]], [[0, 0, 0, 0], [0, 0, 0, 40], [40, 0, 40, 40]]))
def test_shared_pool_calls_resumed_in_any_order_draw_each_once(
    tmp_path: Path, face: Face, script: Script
) -> None:
    """Any approval order and delays: every shape drawn once, the last delivery finishes."""
    _deliver_all(tmp_path, script, face)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_drifted_call_in_the_pool_still_diverges_and_draws_nothing(
    tmp_path: Path, face: Face
) -> None:
    """Shared flows wait for siblings; a call whose arguments changed is still a divergence."""
    desk = Desk(tmp_path / "draws.log")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    try:
        desk.approved = {"s0"}
        assert _loop(desk, journal, "job:drift", 2, face).status == "suspended"
        desk.approved = {"s0", "s1"}
        desk.args = {"s0": "s0-bigger"}  # the code now draws s0 with other arguments
        with pytest.raises(DivergenceError) as err:
            _loop(desk, journal, "job:drift", 2, face)
        assert "draw" in str(err.value)
        assert "s0-bigger" not in desk.drawn() and desk.drawn().count("s0") == 1
    finally:
        journal.close()


def test_a_step_from_a_silent_copy_of_a_flow_is_issued_shared() -> None:
    """A flow's owner issues its own steps; a thread carrying a copy of its context that
    redrive did not see start (a pool, ``asyncio.to_thread``) issues shared steps; a child
    redrive started (``start_child``: tasks, ``redrive.executor``) is nobody's copy."""
    from redrive.replay._flows import FlowTracker

    tracker = FlowTracker()

    def in_copy(pool: concurrent.futures.ThreadPoolExecutor) -> bool:
        return pool.submit(contextvars.copy_context().run, tracker.issue, "draw").result().shared

    def complete_then_issue(pool: concurrent.futures.ThreadPoolExecutor) -> tuple[bool, bool]:
        # a copy that completed a step owns the flow it stands at from then on
        tracker.completed(7, model=False, turn=0)
        return tracker.issue("draw").shared, in_copy(pool)

    token = tracker.bind()
    try:
        assert not tracker.issue("draw").shared
        with (
            concurrent.futures.ThreadPoolExecutor(1) as pool,
            concurrent.futures.ThreadPoolExecutor(1) as inner,
        ):
            assert in_copy(pool)
            child = contextvars.copy_context()
            tracker.start_child(child)
            assert not pool.submit(child.run, tracker.issue, "draw").result().shared
            own, copied = pool.submit(
                contextvars.copy_context().run, complete_then_issue, inner
            ).result()
            assert (own, copied) == (False, True)
    finally:
        tracker.unbind(token)

    async def on_loop() -> tuple[bool, bool]:
        token = tracker.bind()  # the run entered in this task: the task owns the root flow
        try:
            mine = tracker.issue("draw").shared
            theirs = (await asyncio.to_thread(tracker.issue, "draw")).shared
            return mine, theirs
        finally:
            tracker.unbind(token)

    assert asyncio.run(on_loop()) == (False, True)
