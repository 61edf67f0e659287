"""Concurrent callers are told apart by where they came from, not by arrival (CONTRACT C8).

A flow (an asyncio task, a thread of ``redrive.executor``) started by another
is named by its starter and the order the starter started it in; identical
requests of concurrent flows are matched by that name, so each caller gets
its own recorded answer whatever order the calls reach redrive in: in a cold
process (a first SDK call that awaits its platform detection) and a warm one,
and whatever each flow waited before its first call.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.frames import make_frame
from redrive.replay._flows import FlowTracker
from redrive.storage import Journal, MemoryJournal, RunRecord

ROOT = Path(__file__).resolve().parents[2]

# -- a cold process: the first-started task reaches redrive last, once ---------------------

#: Records or replays two tasks asking the model the same thing. The "SDK" call's first
#: use in a process awaits a probe first (as the OpenAI SDK's platform detection does in
#: a thread), so in a cold process the first-started task reaches redrive second.
_SCRIPT = """
import asyncio, json, sys
import redrive

mode, path, run_id = sys.argv[1:4]
counter = iter(range(100))
warmed = False


@redrive.model(name="model:chat")
async def chat(prompt: str) -> str:
    return f"{prompt}#{next(counter)}"


async def probe() -> None:
    global warmed
    if not warmed:
        warmed = True
        await asyncio.sleep(0.1)


async def sdk_call(prompt: str) -> str:
    await probe()  # slow only the first time in this process
    return await chat(prompt)


async def main() -> None:
    if mode == "replay-warm":
        await probe()  # this worker served a call before
    journal = redrive.open_journal(path)
    try:
        async with redrive.run(journal, run_id, live=mode == "record") as run:
            first, second = await asyncio.gather(sdk_call("hi"), sdk_call("hi"))
            run.finish({"first": first, "second": second})
    finally:
        journal.close()
    print(json.dumps({"first": first, "second": second}))


asyncio.run(main())
"""


def _in_fresh_process(script: Path, mode: str, journal: Path, run_id: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script), mode, str(journal), run_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


def test_identical_requests_replay_to_their_callers_across_cold_and_warm_processes(
    tmp_path: Path,
) -> None:
    """Recorded in a cold process (the first-started task asked second), replayed in warm and
    cold fresh processes: each task gets the answer it got live, in every process."""
    script = tmp_path / "agent.py"
    script.write_text(_SCRIPT)
    journal = tmp_path / "runs.duckdb"
    for attempt in range(3):
        run_id = f"cold-{attempt}"
        live = _in_fresh_process(script, "record", journal, run_id)
        # the cold path made the second-started task ask first (so, most often, it got
        # hi#0); on a warm replay the first-started one asks first
        assert sorted(live.values()) == ["hi#0", "hi#1"]
        for mode in ("replay-warm", "replay-cold"):
            assert _in_fresh_process(script, mode, journal, run_id) == live, mode


# -- random programs, random start delays that differ between record and replay ------------

Face = Literal["async", "threads"]
#: One call of a flow: its kind and which of two requests (shared by every flow).
Call = tuple[Literal["model", "lookup", "charge"], int]

_programs = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["model", "lookup", "charge"]), st.integers(0, 1)),
        min_size=1,
        max_size=3,
    ),
    min_size=2,
    max_size=4,
)
_delays = st.lists(st.integers(0, 6), min_size=4, max_size=4)


class _World:
    """Live answers, each unique, so a caller that gets another's answer shows."""

    def __init__(self) -> None:
        self.counter = itertools.count()
        self.lock = threading.Lock()

    def answer(self, what: str) -> str:
        with self.lock:
            return f"{what}#{next(self.counter)}"


def _loop(face: Face, world: _World, program: list[list[Call]], delays: list[int]) -> Any:
    """The loop: every flow started at once, each waits its delay (ms), then makes its calls."""
    if face == "async":
        steps: dict[str, Callable[[str], Any]] = {
            "model": redrive.model(name="model:chat")(_async(world)),
            "lookup": redrive.tool(name="lookup", read_only=True)(_async(world)),
            "charge": redrive.tool(name="charge", restart_safe=False)(_async(world)),
        }

        async def aflow(i: int) -> list[str]:
            await asyncio.sleep(delays[i] / 1000)
            return [await steps[kind](f"{kind}{which}") for kind, which in program[i]]

        async def amain() -> list[list[str]]:
            return list(await asyncio.gather(*(aflow(i) for i in range(len(program)))))

        return amain
    ssteps: dict[str, Callable[[str], Any]] = {
        "model": redrive.model(name="model:chat")(world.answer),
        "lookup": redrive.tool(name="lookup", read_only=True)(world.answer),
        "charge": redrive.tool(name="charge", restart_safe=False)(world.answer),
    }

    def sflow(i: int) -> list[str]:
        time.sleep(delays[i] / 1000)
        return [ssteps[kind](f"{kind}{which}") for kind, which in program[i]]

    async def smain() -> list[list[str]]:  # threads, from the sync face's block
        with redrive.executor(len(program)) as pool:
            futures = [pool.submit(sflow, i) for i in range(len(program))]
            return [f.result() for f in futures]

    return smain


def _async(world: _World) -> Callable[[str], Any]:
    async def call(what: str) -> str:
        await asyncio.sleep(0)
        return world.answer(what)

    return call


def _run(face: Face, journal: Journal, run_id: str, main: Any, **options: Any) -> Any:
    if face == "async":

        async def under_run() -> Any:
            async with redrive.run(journal, run_id, **options) as run:
                return run.finish(await main())

        return asyncio.run(under_run())
    with redrive.run(journal, run_id, **options) as run:
        coroutine = main()
        try:
            coroutine.send(None)
        except StopIteration as stop:
            return run.finish(stop.value)
        raise AssertionError("the threads' loop awaited something")


@pytest.mark.parametrize("face", ["async", "threads"])
@settings(max_examples=25)
@given(program=_programs, recorded=_delays, replayed=_delays)
def test_each_caller_gets_its_own_answer_whatever_its_flow_waited(
    face: Face, program: list[list[Call]], recorded: list[int], replayed: list[int]
) -> None:
    """Flows of identical requests started at once, each after a random delay (another one on
    replay): every caller gets the answer it got live, and nothing runs again."""
    journal = MemoryJournal()
    world = _World()
    run_id = f"d-{uuid.uuid4().hex}"
    live = _run(face, journal, run_id, _loop(face, world, program, recorded))
    again = _World()
    assert _run(face, journal, run_id, _loop(face, again, program, replayed), live=False) == live


# -- what is recorded, and runs recorded before spawn paths --------------------------------


def test_tasks_and_executor_threads_are_named_by_the_order_they_were_started() -> None:
    """Each task of a gather, and each executor thread, records the index it was started
    under (``spawn``); a flow's steps after its first completed one need none."""
    journal = MemoryJournal()
    chat = redrive.model(name="model:chat")(_async(_World()))
    lookup = redrive.tool(name="lookup", read_only=True)(lambda q: f"found {q}")

    async def flow(i: int) -> str:
        await asyncio.sleep((3 - i) / 1000)  # the last started asks first
        await chat("hi")
        return await chat("hi")

    async def main() -> None:
        async with redrive.run(journal, "s") as run:
            await asyncio.gather(*(flow(i) for i in range(3)))
            with redrive.executor(2) as pool:
                list(pool.map(lookup, ["a", "b"]))
            run.finish(None)

    asyncio.run(main())
    issued = [
        (f.name, f.data()["issue"].get("spawn"), f.data()["issue"]["parent"])
        for f in journal.frames("s")
        if f.kind in ("model_request", "tool_start")
    ]
    firsts = sorted(s for name, s, parent in issued if name == "model:chat" and parent == -1)
    assert firsts == [[0], [1], [2]]
    assert all(s is None for name, s, parent in issued if name == "model:chat" and parent >= 0)
    assert sorted(s for name, s, _ in issued if name == "lookup") == [[3], [4]]
    start = next(iter(journal.frames("s"))).data()
    assert start["flags"]["flows"] == "spawn"


def _as_recorded_before_spawn_paths(journal: Journal, run_id: str, upto: int) -> MemoryJournal:
    """A copy of a run's first ``upto`` frames (left running) without the ``flows`` flag and
    the ``spawn`` fields, issue orders counted per parent in seq order: the arrival rule,
    as a run recorded before spawn paths has them."""
    old = MemoryJournal()
    chain, counts, frames = "0" * 32, {}, []
    for frame in list(journal.frames(run_id))[:upto]:
        payload = frame.data()
        if frame.kind == "run_start":
            del payload["flags"]["flows"]
        issue = payload.get("issue") if isinstance(payload, dict) else None
        if isinstance(issue, dict):
            issue.pop("spawn", None)
            key = (issue["parent"], frame.name)
            issue["occ"] = counts.get(key, 0)
            counts[key] = issue["occ"] + 1
        frames.append(
            make_frame(
                run_id=run_id,
                seq=frame.seq,
                kind=frame.kind,
                name=frame.name,
                key=frame.key,
                payload=payload,
                prev_chain=chain,
                at=frame.at,
            )
        )
        chain = frames[-1].chain
    record = journal.get_run(run_id)
    assert record is not None
    old.create_run(RunRecord(run_id=run_id, input_fp=record.input_fp), frames[0])
    old.append(run_id, frames[1:], expected_seq=1)
    return old


def test_a_run_recorded_before_spawn_paths_resumes_by_arrival() -> None:
    """A run without the ``flows`` flag keeps the arrival rule: its identical concurrent
    requests replay in the order the loop issues them, the steps it records on resume carry
    no spawn path, and the resumed run replays."""
    journal = MemoryJournal()
    answers = itertools.count()

    @redrive.model(name="model:chat")
    async def chat(prompt: str) -> str:
        return f"{prompt}#{next(answers)}"

    async def loop() -> list[str]:
        return [*await asyncio.gather(chat("hi"), chat("hi")), await chat("bye")]

    async def main() -> None:
        async with redrive.run(journal, "o") as run:
            live = run.finish(await loop())
        old = _as_recorded_before_spawn_paths(journal, "o", upto=5)  # two calls, no "bye"
        async with redrive.run(old, "o") as run:
            resumed = run.finish(await loop())
        assert resumed[:2] == live[:2] and resumed[2] == "bye#3"
        issues = [f.data()["issue"] for f in old.frames("o") if f.kind == "model_request"]
        assert [("spawn" in i, i["occ"]) for i in issues] == [(False, 0), (False, 1), (False, 2)]
        async with redrive.run(old, "o", live=False):
            assert await loop() == resumed

    asyncio.run(main())


def test_the_flow_tracker_names_children_by_start_order() -> None:
    """``start_child`` gives each child of a flow the next index under the flow's point; a
    flow that completed a step stands alone at it (an empty spawn path)."""
    import contextvars

    tracker = FlowTracker()
    token = tracker.bind()
    try:
        children = [contextvars.copy_context() for _ in range(2)]
        for child in children:
            tracker.start_child(child)
        issues = [child.run(tracker.issue, "m") for child in children]
        assert [(i.parent, i.spawn, i.occ) for i in issues] == [(-1, (0,), 0), (-1, (1,), 0)]
        children[1].run(tracker.completed, 5, model=True, turn=0)
        assert children[1].run(tracker.issue, "m").position == (5, (), 0)
        grandchild = children[1].copy()
        children[1].run(tracker.start_child, grandchild)
        assert grandchild.run(tracker.issue, "m").position == (5, (0,), 0)
        tracker.follow({})  # a run recorded before spawn paths: arrival order at a parent
        assert children[0].run(tracker.issue, "m").position == (-1, (), 0)
    finally:
        tracker.unbind(token)


def test_a_loop_task_factory_keeps_working_and_is_put_back() -> None:
    """A task factory the application installed still makes the run's tasks (which get their
    spawn index), and is the loop's factory again once the run's block ends."""
    journal = MemoryJournal()
    chat = redrive.model(name="model:chat")(_async(_World()))
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__name__", "?"))
        return asyncio.Task(coro, loop=loop, **kwargs)

    async def ask() -> str:
        return await chat("hi")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(factory)
        async with redrive.run(journal, "f") as run:
            assert loop.get_task_factory() is not factory
            run.finish(await asyncio.gather(ask(), ask()))
        assert loop.get_task_factory() is factory

    asyncio.run(main())
    assert made.count("ask") == 2  # (asyncio.run makes its own shutdown tasks after)
    spawns = [
        f.data()["issue"].get("spawn") for f in journal.frames("f") if f.kind == "model_request"
    ]
    assert sorted(spawns) == [[0], [1]]


def _numbered(answers: Iterator[int]) -> Callable[[str], Awaitable[str]]:
    """An async "model" answering ``prompt#n``, ``n`` drawn from ``answers``."""

    async def chat(prompt: str) -> str:
        return f"{prompt}#{next(answers)}"

    return chat


def test_a_call_moved_before_a_batch_of_identical_requests_diverges() -> None:
    """A main-flow call inserted before a batch of identical requests never takes a batch
    member's recorded answer (they are told apart by the flow that started them, CONTRACT
    C8): with the batch's records still waiting, a strict resume diverges before any call
    goes live, and the recorded code resumes as before."""
    journal = MemoryJournal()
    answers = itertools.count()
    chat = redrive.model(name="model:chat")(_numbered(answers))

    async def batch() -> list[str]:
        return list(await asyncio.gather(chat("hi"), chat("hi")))

    async def moved() -> list[str]:
        return [await chat("hi"), *await batch(), await chat("bye")]

    async def main() -> None:
        async with redrive.run(journal, "o") as run:
            recorded = run.finish(await batch())
        end = next(f.seq for f in journal.frames("o") if f.kind == "run_end")
        redrive.fork(journal, "o", end, "cut")  # the run as a kill after the batch leaves it
        for _ in range(2):
            with pytest.raises(redrive.DivergenceError):
                async with redrive.run(journal, "cut"):
                    await moved()
        assert next(answers) == 2  # nothing went live
        async with redrive.run(journal, "cut") as run:
            resumed = run.finish([*await batch(), await chat("bye")])
        assert resumed == [*recorded, "bye#3"]

    asyncio.run(main())


def test_a_parent_is_held_while_any_flow_stands_at_it_equal_flows_included() -> None:
    """Two flows that completed the same step are equal values, yet each is counted: the
    parent's counts stay while either stands there and go once both are collected."""
    import contextvars
    import gc

    tracker = FlowTracker()
    token = tracker.bind()
    try:
        flows = [contextvars.copy_context() for _ in range(2)]
        for i in range(2):
            flows[i].run(tracker.completed, 7, model=False, turn=0)
        assert flows[0].run(tracker.here) == flows[1].run(tracker.here)
        flows[0].run(tracker.issue, "t")
        assert tracker.may_still_issue(7, (), "t", 1)  # a flow stands at 7: it may ask again
        del flows[0]
        gc.collect()
        tracker.issue("t")  # drains what was collected
        assert tracker.may_still_issue(7, (), "t", 1)  # the other flow still stands there
        del flows[0]
        gc.collect()
        tracker.issue("t")
        assert not tracker.may_still_issue(7, (), "t", 1)  # no flow stands at 7 any more
    finally:
        tracker.unbind(token)
