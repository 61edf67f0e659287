"""Concurrent steps replay each outcome to the caller that received it (DESIGN invariant 11).

A loop runs several flows at once (asyncio tasks, or threads with a copied
context); each flow makes a few model and tool calls whose live answers come
back in a random order. Replaying the run hands every caller the outcome it
got live, whatever the order the calls completed in, for identical and
distinct requests, models and tools mixed; a run killed at a random frame and
resumed hands back what was recorded and replays as it ran.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import itertools
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import redrive
from redrive.errors import DivergenceError
from redrive.frames import Frame, make_frame
from redrive.replay import ReplayPolicy
from redrive.replay._cursor import Cursor
from redrive.replay._flows import Issue
from redrive.storage import Journal, copy_run
from tests.conftest import Drive, Loop

Face = Literal["async", "threads"]
#: One call of a flow: ("model", prompt) or ("tool", query), and its live latency in ms.
Call = tuple[str, int, int]
#: A program: the calls of each flow, all flows run at once.
Program = list[list[Call]]

_calls = st.tuples(
    st.sampled_from(["model", "tool"]),
    st.integers(0, 1),  # few prompts/queries: identical requests are common
    st.integers(0, 3),
)
programs: st.SearchStrategy[Program] = st.lists(
    st.lists(_calls, min_size=1, max_size=3), min_size=2, max_size=4
)


class World:
    """The live model and tool, each answer unique, each after its own latency."""

    def __init__(self) -> None:
        self.counter = itertools.count()
        self.lock = threading.Lock()
        self.live_calls = 0

    def answer(self, what: str) -> str:
        with self.lock:
            self.live_calls += 1
            return f"{what}#{next(self.counter)}"


def _request(flow: int, call: Call, *, distinct: bool) -> str:
    """The prompt or query of ``call``: shared by every flow unless ``distinct``."""
    kind, which, _ = call
    return f"{kind}{which}" + (f"@{flow}" if distinct else "")


def _loop(
    face: Face, world: World, program: Program, *, distinct: bool, staggered: bool = False
) -> Callable[[], Any]:
    """The loop of ``program`` for ``face``: returns each flow's answers, in flow order.

    ``staggered`` (threads): a thread makes its first call once the thread
    before it has its first answer, so threads issue from the run's start in
    a known order (their later calls run at once, in any order).
    """
    if face == "async":

        @redrive.model
        async def chat(prompt: str, latency: int) -> str:
            await asyncio.sleep(latency / 1000)
            return world.answer(prompt)

        @redrive.tool(read_only=True)
        async def lookup(query: str, latency: int) -> str:
            await asyncio.sleep(latency / 1000)
            return world.answer(query)

        async def aflow(i: int) -> list[str]:
            got = []
            for call in program[i]:
                step = chat if call[0] == "model" else lookup
                got.append(await step(_request(i, call, distinct=distinct), call[2]))
            return got

        async def amain() -> list[list[str]]:
            return list(await asyncio.gather(*(aflow(i) for i in range(len(program)))))

        return amain

    @redrive.model
    def schat(prompt: str, latency: int) -> str:
        time.sleep(latency / 1000)
        return world.answer(prompt)

    @redrive.tool(read_only=True)
    def slookup(query: str, latency: int) -> str:
        time.sleep(latency / 1000)
        return world.answer(query)

    def sflow(i: int, started: list[threading.Event]) -> list[str]:
        got = []
        try:
            for n, call in enumerate(program[i]):
                if staggered and n == 0 and i > 0:
                    started[i - 1].wait(timeout=30)
                step = schat if call[0] == "model" else slookup
                got.append(step(_request(i, call, distinct=distinct), call[2]))
                started[i].set()
        finally:
            started[i].set()  # a failing thread never holds the next one back
        return got

    def smain() -> list[list[str]]:
        started = [threading.Event() for _ in program]
        with concurrent.futures.ThreadPoolExecutor(len(program)) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, sflow, i, started)
                for i in range(len(program))
            ]
            return [f.result() for f in futures]

    return smain


def _run(face: Face, journal: Journal, run_id: str, main: Callable[[], Any], **options: Any) -> Any:
    """Run ``main`` in ``redrive.run(journal, run_id)`` (async face: under ``asyncio.run``).

    Returns what ``main`` returned: what the loop's callers got, live or replayed (not
    ``run.finish``'s return, which for a finished run replayed is the recorded output).
    """
    if face == "async":

        async def under_run() -> Any:
            async with redrive.run(journal, run_id, **options) as run:
                got = await main()
                run.finish(got)
                return got

        return asyncio.run(under_run())
    with redrive.run(journal, run_id, **options) as run:
        got = main()
        run.finish(got)
        return got


def _record_and_replay(face: Face, journal: Journal, program: Program, *, distinct: bool) -> None:
    """Record ``program``, replay it strictly (and from its ``.rdj`` export): every caller
    gets its own recorded outcome."""
    world = World()
    main = _loop(face, world, program, distinct=distinct)
    run_id = f"c-{uuid.uuid4().hex}"
    live = _run(face, journal, run_id, main)
    calls = world.live_calls
    assert calls == sum(len(flow) for flow in program)
    assert _run(face, journal, run_id, main, live=False) == live
    assert world.live_calls == calls  # nothing called again
    # the same from an .rdj export (the file a production run travels in)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.rdj"
        redrive.export_run(journal, run_id, path)
        exported = redrive.open_journal(str(path))
        try:
            assert _run(face, exported, run_id, main, live=False) == live
        finally:
            exported.close()
    assert world.live_calls == calls


def _resume_after_kill(
    face: Face, journal: Journal, program: Program, cut: int, *, distinct: bool = True
) -> None:
    """Kill the recorded run at frame ``cut``, resume it, replay it: callers keep their outcomes."""
    world = World()
    main = _loop(face, world, program, distinct=distinct, staggered=True)
    run_id = f"c-{uuid.uuid4().hex}"
    killed = f"killed-{run_id}"
    live = _run(face, journal, run_id, main)
    frames = list(journal.frames(run_id))
    cut = 1 + cut % (len(frames) - 1)  # keep run_start; drop at least run_end
    copy_run(journal, run_id, journal, upto=cut, new_id=killed)
    kept = {
        frame.data()["result"] if frame.kind == "tool_done" else frame.data()["response"]
        for frame in frames[:cut]
        if frame.kind in ("tool_done", "model_response")
    }
    resumed = _run(face, journal, killed, main)
    for was, now in zip(itertools.chain(*live), itertools.chain(*resumed), strict=True):
        if was in kept:  # recorded before the kill: the same caller gets it back
            assert now == was
    calls = world.live_calls
    assert _run(face, journal, killed, main, live=False) == resumed
    assert world.live_calls == calls


@pytest.fixture(params=["memory", "duckdb"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """A memory journal, then a DuckDB file journal."""
    if request.param == "memory":
        yield redrive.open_journal(":memory:")
        return
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    yield journal
    journal.close()


#: The journals the properties run on (Postgres: see the ``postgres`` test below).
BACKENDS = ["memory", "duckdb"]


def _journals(backend: str) -> Iterator[Journal]:
    """A fresh journal of ``backend`` for one example (Hypothesis reruns the test body)."""
    if backend == "memory":
        yield redrive.open_journal(":memory:")
        return
    with tempfile.TemporaryDirectory() as tmp:
        journal = redrive.open_journal(str(Path(tmp) / "runs.duckdb"))
        try:
            yield journal
        finally:
            journal.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("face", ["async", "threads"])
@settings(max_examples=25)
@given(program=programs, data=st.data())
def test_concurrent_calls_replay_to_their_callers(
    backend: str, face: Face, program: Program, data: st.DataObject
) -> None:
    """N concurrent flows with random completion orders replay each outcome to its caller.

    Asyncio tasks share identical requests (their issue order is the order the
    loop starts them); threads, whose issue order is the scheduler's, send
    requests distinct per flow.
    """
    distinct = face == "threads" or data.draw(st.booleans(), label="distinct")
    for journal in _journals(backend):
        _record_and_replay(face, journal, program, distinct=distinct)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("face", ["async", "threads"])
@settings(max_examples=25)
@given(program=programs, cut=st.integers(0, 10_000), distinct=st.booleans())
# found by the thorough profile: the kill lost flow 1's second call; on resume flow 1 took
# flow 2's recorded second answer (recorded after flow 2's first step) and flow 2 went live
@example(
    program=[
        [("model", 0, 0), ("model", 0, 0)],
        [("model", 0, 1)] * 2,
        [("model", 0, 0), ("model", 0, 1)],
    ],
    cut=10,
    distinct=False,
)
# the kill left flow 1's lookup in flight and flow 0's unasked: the one recorded lookup is
# flow 1's, not whoever asks for it first
@example(
    program=[
        [("model", 0, 0), ("model", 0, 1), ("tool", 1, 0)],
        [("model", 0, 0), ("model", 0, 0), ("tool", 1, 0)],
    ],
    cut=230,
    distinct=False,
)
def test_concurrent_calls_resume_after_a_kill(
    backend: str, face: Face, program: Program, cut: int, distinct: bool
) -> None:
    """A concurrent run of model and tool calls killed at a random frame resumes with every
    recorded outcome kept, and replays as it resumed.

    Model requests and tool claims record where they were issued, so a flow
    past its record goes live while other flows' steps are still replayed.
    Asyncio tasks may share identical requests; threads start their first
    calls in order and send requests distinct per flow: threads racing to
    issue from one point are told apart by the order they issue in, which a
    resumed run's threads may not repeat.
    """
    distinct = face == "threads" or distinct
    for journal in _journals(backend):
        _resume_after_kill(face, journal, program, cut, distinct=distinct)


@pytest.mark.postgres
@pytest.mark.parametrize("face", ["async", "threads"])
@settings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=programs, cut=st.integers(0, 10_000))
def test_concurrent_calls_on_postgres(
    pg_url: str, pg_schema: str, face: Face, program: Program, cut: int
) -> None:
    """The same properties on a Postgres journal, over a few examples (one schema, run ids
    unique per example)."""
    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(pg_url, schema=pg_schema)
    try:
        _record_and_replay(face, journal, program, distinct=face == "threads")
        _resume_after_kill(face, journal, program, cut)
    finally:
        journal.close()


# -- the reported cases -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["model", "tool"])
def test_identical_requests_answered_out_of_order(journal: Journal, kind: str) -> None:
    """Two identical requests (model calls, or calls of a side-effecting tool), the first sent
    answered last, replay to their own callers."""
    answers = iter(["A-slow", "B-fast"])

    async def answer(prompt: str) -> str:
        answer = next(answers)
        await asyncio.sleep(0.02 if answer == "A-slow" else 0)
        return answer

    chat = redrive.model(answer) if kind == "model" else redrive.tool(restart_safe=False)(answer)

    async def loop() -> dict[str, str]:
        first, second = await asyncio.gather(chat("hi"), chat("hi"))
        return {"task1": first, "task2": second}

    async def main() -> None:
        async with redrive.run(journal, "r") as run:
            assert run.finish(await loop()) == {"task1": "A-slow", "task2": "B-fast"}
        for options in ({"live": False, "replay": "strict"}, {"live": False, "replay": "lenient"}):
            async with redrive.run(journal, "r", **options):  # type: ignore[arg-type]
                assert await loop() == {"task1": "A-slow", "task2": "B-fast"}

    asyncio.run(main())


@pytest.mark.parametrize("face", ["async", "threads"])
@pytest.mark.parametrize("kind", ["model", "tool"])
def test_identical_requests_asked_in_another_order_on_replay(
    journal: Journal, face: Face, kind: str
) -> None:
    """Two flows send one identical request; live, the flow that first waits on a slow step
    sends it last; on replay that step answers at once and it sends first: each still gets
    its own recorded answer (a model call, or a side-effecting tool's result)."""
    answers = itertools.count()

    def ask_body(query: str) -> str:
        return f"{query}#{next(answers)}"

    # live, the slow flow's step ends only after the other flow asked (an event, not a
    # race of sleeps, so a loaded machine cannot swap them); on replay it answers at once
    other_asked = threading.Event()

    def prepare_body(what: str) -> str:
        assert other_asked.wait(30), "the other flow never asked"
        return f"prepared {what}"

    ask_spec = (
        redrive.model(name="model:ask") if kind == "model" else redrive.tool(restart_safe=False)
    )
    if face == "async":

        async def aask(query: str) -> str:
            return ask_body(query)

        asked = asyncio.Event()

        async def aprepare(what: str) -> str:
            await asyncio.wait_for(asked.wait(), 30)
            return f"prepared {what}"

        ask_a = ask_spec(aask)
        prepare_a = redrive.tool(read_only=True)(aprepare)

        async def slow_flow() -> list[str]:
            return [await prepare_a("x"), await ask_a("q")]

        async def other_flow() -> list[str]:
            await asyncio.sleep(0.02)  # other work, not a step
            answer = [await ask_a("q")]
            asked.set()
            return answer

        async def aloop() -> list[list[str]]:
            return list(await asyncio.gather(slow_flow(), other_flow()))

        main: Callable[[], Any] = aloop
    else:
        ask_s = ask_spec(ask_body)
        prepare_s = redrive.tool(read_only=True)(prepare_body)

        def sslow() -> list[str]:
            return [prepare_s("x"), ask_s("q")]

        def sother() -> list[str]:
            time.sleep(0.02)  # other work, not a step
            answer = [ask_s("q")]
            other_asked.set()
            return answer

        def sloop() -> list[list[str]]:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                futures = [pool.submit(contextvars.copy_context().run, f) for f in (sslow, sother)]
                return [f.result() for f in futures]

        main = sloop
    live = _run(face, journal, "o", main)
    assert live == [["prepared x", "q#1"], ["q#0"]]
    for rule in ("strict", "lenient"):
        assert _run(face, journal, "o", main, live=False, replay=rule) == live


@pytest.mark.parametrize("face", ["async", "threads"])
def test_model_and_tools_in_flight_together(journal: Journal, face: Face) -> None:
    """A model call issued with two tool calls replays whatever order they completed in."""
    effects: list[str] = []

    def tool_a_body() -> str:
        time.sleep(0.02)
        return "a"

    def send_email_body(to: str) -> str:
        time.sleep(0.01)
        effects.append(to)
        return f"sent {to}"

    if face == "async":

        @redrive.tool(read_only=True)
        async def tool_a() -> str:
            return await asyncio.to_thread(tool_a_body)

        @redrive.tool(restart_safe=False)
        async def send_email(to: str) -> str:
            return await asyncio.to_thread(send_email_body, to)

        @redrive.model
        async def summarize(text: str) -> str:
            await asyncio.sleep(0.03)  # answered after both tools started and finished
            return f"summary of {text}"

        async def aloop() -> list[str]:
            return list(await asyncio.gather(tool_a(), summarize("x"), send_email("bo")))

        main: Callable[[], Any] = aloop
    else:
        stool_a = redrive.tool(read_only=True)(tool_a_body)
        ssend = redrive.tool(restart_safe=False)(send_email_body)

        def summarize_body(text: str) -> str:
            time.sleep(0.03)  # answered after both tools started and finished
            return f"summary of {text}"

        ssummarize = redrive.model(name="model:summarize")(summarize_body)

        def sloop() -> list[str]:
            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                futures = [
                    pool.submit(contextvars.copy_context().run, stool_a),
                    pool.submit(contextvars.copy_context().run, ssummarize, "x"),
                    pool.submit(contextvars.copy_context().run, ssend, "bo"),
                ]
                return [f.result() for f in futures]

        main = sloop
    live = _run(face, journal, "g", main)
    assert _run(face, journal, "g", main, live=False) == live
    assert effects == ["bo"]


# -- the run flag: new runs' steps record where they were issued ------------------------------


def _killed_record(flag: str) -> list[Frame]:
    """A run of one tool call, killed before its end (no ``run_end``), its ``run_start``
    flagged ``turns: flag``; under an older flag its tool claims carry no ``issue``."""
    journal = redrive.open_journal(":memory:")
    lookup = redrive.tool(read_only=True)(lambda q: f"found {q}")
    with redrive.run(journal, "k"):
        lookup("a")
    frames, chain = [], "0" * 32
    for frame in list(journal.frames("k"))[:-1]:
        payload = frame.data()
        if frame.kind == "run_start":
            assert payload["flags"]["turns"] == "causal"  # what a new run records
            payload["flags"]["turns"] = flag
        elif frame.kind == "tool_start":
            assert payload["issue"] == {"parent": -1, "occ": 0, "after": []}
            if flag != "causal":
                del payload["issue"]
        frames.append(
            make_frame(
                run_id="k",
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
    return frames


@pytest.mark.parametrize("flag", ["causal", "model-response"])
def test_a_tool_goes_live_past_its_flows_record_only_in_causal_runs(flag: str) -> None:
    """A tool step asked where no step of its flow is recorded, while another flow's step is
    still to replay: past its flow's record (go live) in a run flagged ``causal``; in a run
    recorded before the flag (tool claims without positions) the strict rule stays."""
    cursor = Cursor("k", iter(_killed_record(flag)), ReplayPolicy.of("strict"))
    elsewhere = Issue(turn=0, parent=7, occ=0, after=())
    assert cursor.frontier("tool", "<lambda>", elsewhere) is (flag == "causal")
    assert not cursor.frontier("tool", "<lambda>", Issue(turn=0, parent=-1, occ=0, after=()))


# -- turns: the order a flow's own steps keep -------------------------------------------------


def test_a_model_step_still_follows_the_tools_its_flow_completed(drive: Drive) -> None:
    """Strict replay diverges when the loop now asks the model before a tool it called first."""
    journal = redrive.open_journal(":memory:")
    lookup = drive.tool(lambda q: f"found {q}", read_only=True)
    think = drive.model(lambda prompt: f"thought about {prompt}")

    def before(run: redrive.Run) -> Loop:
        found = yield lookup("a")
        return (yield think(found))

    def after(run: redrive.Run) -> Loop:
        thought = yield think("found a")
        return thought, (yield lookup("a"))

    drive.run(journal, "t", before)
    with pytest.raises(DivergenceError) as info:
        drive.run(journal, "t", after)
    error = info.value
    assert (error.kind, error.name, error.found_kind) == ("tool", "<lambda>", "model")


def test_sibling_tasks_issue_in_the_turn_they_were_started_in(journal: Journal) -> None:
    """A task's turn counts the model steps on its own causal path, not its siblings'."""

    @redrive.model
    async def plan(goal: str) -> str:
        return f"plan for {goal}"

    @redrive.tool(read_only=True)
    async def fetch(page: int) -> str:
        return f"page {page}"

    async def planner() -> str:
        await plan("x")
        return await fetch(1)

    async def late() -> str:
        await asyncio.sleep(0.02)  # live: the sibling's model call completed by now
        return await fetch(2)

    async def loop() -> list[str]:
        return list(await asyncio.gather(planner(), late()))

    async def main() -> None:
        async with redrive.run(journal, "s") as run:
            run.finish(await loop())
        async with redrive.run(journal, "s", live=False):
            assert await loop() == ["page 1", "page 2"]

    asyncio.run(main())
    turns = {
        (frame.name, frame.data()["args"].get("page")): frame.data()["turn"]
        for frame in journal.frames("s")
        if frame.kind in ("tool_start", "model_request")
    }
    assert turns == {("model:plan", None): 0, ("fetch", 1): 1, ("fetch", 2): 0}
