"""Issue 23 items 1, 3 and 6: replay policies, code changes and safe advice (CONTRACT C2-C6).

Item 1: a model step re-asked live takes the recorded one's place, so a tool the new
answer asks for with other arguments diverges before its body (no second refund).
Item 3: a step new code inserts before finished steps: a read-only one runs live under
continue_live / tool="lenient" and the finished steps replay; a side-effecting one stops
before its body; the error's ``next_steps`` never propose a fork that repeats a side effect.
Item 6: ``on_drift="continue_live"`` on the async face (an async SDK client) re-asks the
drifted model step, as the sync face does.

Every scenario runs on both faces and on a DuckDB file and ``:memory:`` journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive import NextStepAction
from redrive.replay import ReplayPolicy
from redrive.storage import MemoryJournal
from tests.conftest import Drive, Loop

CONTINUE = ReplayPolicy(on_drift="continue_live")


@pytest.fixture(params=["file", "memory"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A DuckDB journal: a file, or ``:memory:``."""
    if request.param == "memory":
        opened = redrive.open_journal(":memory:")
    else:
        opened = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(autouse=True)
def _short_sibling_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A single-flow loop has no sibling to wait for: keep the wait for one short."""
    monkeypatch.setattr("redrive.replay._state._SIBLING_WAIT", 0.05)


class Shop:
    """A model whose answer depends on its prompt, and tools that log their bodies."""

    def __init__(self, drive: Drive, *, fraud_read_only: bool = True) -> None:
        self.ledger: list[tuple[str, Any]] = []
        self.prompt = "v1"

        @drive.model
        def ask(system: str, text: str) -> dict[str, Any]:
            return {"amount": 5 if system == "v1" else 6, "text": text}

        @drive.tool(restart_safe=False)
        def refund(order: int, amount: int) -> str:
            self.ledger.append(("refund", (order, amount)))
            return f"refunded {amount}"

        @drive.tool(restart_safe=False)
        def reserve_stock(order: int) -> str:
            self.ledger.append(("reserve_stock", order))
            return "reserved"

        @drive.tool(read_only=fraud_read_only, restart_safe=False)
        def check_fraud(order: int) -> bool:
            self.ledger.append(("check_fraud", order))
            return False

        self.ask, self.refund = ask, refund
        self.reserve_stock, self.check_fraud = reserve_stock, check_fraud

    def count(self, name: str) -> int:
        return sum(1 for tool, _ in self.ledger if tool == name)


def _cut(drive: Drive, journal: Any, loop: Callable[[redrive.Run], Loop], tool: str) -> None:
    """Record ``loop`` until ``tool`` is recorded, then abandon the run (as a SIGKILL)."""
    drive.crash(journal, "r", "tool_recorded", tool, loop)


# -- item 1 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy",
    [
        ReplayPolicy(model="lenient", tool="strict"),
        ReplayPolicy(model="lenient", tool="lenient"),
        ReplayPolicy(model="lenient", tool="warn"),
        ReplayPolicy(on_drift="continue_live"),
        ReplayPolicy(tool="lenient", on_drift="continue_live"),
    ],
    ids=["lenient-strict", "lenient-lenient", "lenient-warn", "continue", "continue-lenient"],
)
def test_a_reasked_model_asking_another_refund_stops_before_the_body(
    drive: Drive, journal: Any, policy: ReplayPolicy
) -> None:
    """Item 1: the re-asked model now asks for refund(7, 6) where refund(7, 5) finished:
    DivergenceError at the refund, before its body; the ledger keeps one refund."""
    shop = Shop(drive)

    def loop(run: redrive.Run) -> Loop:
        plan = yield shop.ask(system=shop.prompt, text="order 7 arrived damaged")
        yield shop.refund(7, amount=plan["amount"])
        again = yield shop.ask(system=shop.prompt, text="refunded")
        return run.finish(again["text"])

    _cut(drive, journal, loop, "refund")
    assert shop.ledger == [("refund", (7, 5))]
    shop.prompt = "v2"
    with pytest.raises(redrive.DivergenceError) as info:
        drive.run(journal, "r", loop, replay=policy)
    assert shop.ledger == [("refund", (7, 5))]  # the body did not run again
    assert info.value.name == "refund" and info.value.found_name == "refund"
    assert info.value.reason != "unused_steps"  # at the call, not at the loop's end
    first = info.value.next_steps[0]
    assert first.action == NextStepAction.PERSON  # no fork would keep the refund once
    assert all(step.action != NextStepAction.FORK for step in info.value.next_steps)


# -- item 3 -----------------------------------------------------------------------------


def _checkout(shop: Shop, *, inserted: bool) -> Callable[[redrive.Run], Loop]:
    def loop(run: redrive.Run) -> Loop:
        yield shop.ask(system=shop.prompt, text="order 9")
        if inserted:
            yield shop.check_fraud(9)
        yield shop.reserve_stock(9)
        done = yield shop.ask(system=shop.prompt, text="reserved")
        return run.finish(done["text"])

    return loop


@pytest.mark.parametrize(
    "policy",
    [CONTINUE, ReplayPolicy(tool="lenient")],
    ids=["continue_live", "tool-lenient"],
)
def test_an_inserted_read_only_step_runs_live_and_the_finished_steps_replay(
    drive: Drive, journal: Any, policy: ReplayPolicy
) -> None:
    """Item 3 (a): new code inserts a read-only check before a finished side effect:
    under continue_live or tool="lenient" the check runs live, reserve_stock replays."""
    shop = Shop(drive)
    _cut(drive, journal, _checkout(shop, inserted=False), "reserve_stock")
    ran = drive.run(journal, "r", _checkout(shop, inserted=True), replay=policy)
    assert ran.run.status == "succeeded"
    assert shop.ledger == [("reserve_stock", 9), ("check_fraud", 9)]  # reserved once


@pytest.mark.parametrize(
    "policy",
    [
        ReplayPolicy(),
        CONTINUE,
        ReplayPolicy(tool="lenient"),
        ReplayPolicy.of("lenient"),
        ReplayPolicy(tool="warn", on_drift="continue_live"),
    ],
    ids=["strict", "continue_live", "tool-lenient", "lenient", "warn-continue"],
)
def test_an_inserted_side_effect_stops_before_its_body_with_safe_advice(
    drive: Drive, journal: Any, policy: ReplayPolicy
) -> None:
    """Item 3 (b, c): a side-effecting step inserted before a finished one stops before
    its body under every policy; the error proposes no fork that re-runs reserve_stock
    (a person decides, or the run finishes on its recorded code), and following its
    RESUME step (the recorded code) finishes the run with reserve_stock run once."""
    shop = Shop(drive, fraud_read_only=False)
    _cut(drive, journal, _checkout(shop, inserted=False), "reserve_stock")
    with pytest.raises(redrive.DivergenceError) as info:
        drive.run(journal, "r", _checkout(shop, inserted=True), replay=policy)
    assert shop.ledger == [("reserve_stock", 9)]
    steps = info.value.next_steps
    assert steps[0].action == NextStepAction.PERSON
    assert NextStepAction.FORK not in [s.action for s in steps]
    commands = steps[0].params["commands"]
    assert any(c.startswith("redrive") and "what-changed" in c for c in commands)
    assert any("cancel" in c and "--reason" in c for c in commands)
    resume = next(s for s in steps if s.action == NextStepAction.RESUME)
    assert resume.params == {"code": "recorded"}
    assert "What to do:" in info.value.message
    for step in steps:  # the message says what next_steps say
        assert step.text in info.value.message
    ran = drive.run(journal, "r", _checkout(shop, inserted=False), replay=policy)
    assert ran.run.status == "succeeded" and shop.count("reserve_stock") == 1


def test_a_fork_is_proposed_only_where_no_side_effect_follows(drive: Drive, journal: Any) -> None:
    """C5: a prompt change before any side effect may be forked; following the FORK step
    (and the POLICY step, on the original run) runs no side effect twice."""
    shop = Shop(drive)
    seen: list[str] = []

    def loop(run: redrive.Run) -> Loop:
        plan = yield shop.ask(system=shop.prompt, text="order 3")
        seen.append(plan["text"])
        return run.finish(plan["amount"])

    drive.crash(journal, "r", "model_recorded", "model:ask", loop)
    shop.prompt = "v2"
    with pytest.raises(redrive.DivergenceError) as info:
        drive.run(journal, "r", loop)
    actions = [s.action for s in info.value.next_steps]
    assert actions[0] == NextStepAction.FORK and NextStepAction.POLICY in actions
    fork = info.value.next_steps[0]
    redrive.fork(journal, "r", fork.params["before"], "r-forked")
    assert drive.run(journal, "r-forked", loop).value == 6
    policy = next(s for s in info.value.next_steps if s.action == NextStepAction.POLICY)
    options = policy.params["options"]
    ran = drive.run(journal, "r", loop, replay=ReplayPolicy(**options["replay"]))
    assert ran.value == 6 and shop.ledger == []


def test_a_side_effect_left_unasked_stops_the_end_with_person_advice(
    drive: Drive, journal: Any
) -> None:
    """C6: under tool="lenient" a finished side effect the new path never asks for
    still fails the run's end; the advice is a person's, not a fork."""
    shop = Shop(drive)
    _cut(drive, journal, _checkout(shop, inserted=False), "reserve_stock")

    def skipping(run: redrive.Run) -> Loop:
        yield shop.ask(system=shop.prompt, text="order 9")
        return run.finish("skipped")

    with pytest.raises(redrive.DivergenceError, match="more steps") as info:
        drive.run(journal, "r", skipping, replay=ReplayPolicy(tool="lenient"))
    assert info.value.next_steps[0].action == NextStepAction.PERSON
    assert shop.ledger == [("reserve_stock", 9)]


# -- item 6 -----------------------------------------------------------------------------


def _chat(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def _refund_call(call_id: str) -> dict[str, Any]:
    function = {"name": "refund", "arguments": json.dumps({"order": "A"})}
    call = {"id": call_id, "type": "function", "function": function}
    return _chat({"role": "assistant", "content": None, "tool_calls": [call]})


@pytest.mark.parametrize("how", ["policy", "env"])
def test_continue_live_on_the_async_face_reasks_the_drifted_model_step(
    journal: Any, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 6: an async SDK client, a prompt edited between a crash and the resume: under
    on_drift="continue_live" (a ReplayPolicy, or REDRIVE_ON_DRIFT) the first chat
    completion is re-asked, the refund is replayed, and the run finishes."""
    import openai

    from tests.sdkserver import Reply, serve

    effects: list[str] = []

    @redrive.tool(restart_safe=False)
    async def refund(order: str) -> dict[str, str]:
        effects.append(order)
        return {"refunded": order}

    async def handle(url: str, system: str, *, crash: bool, **options: Any) -> Any:
        client = redrive.wrap(openai.AsyncOpenAI(base_url=url, api_key="sk-x", max_retries=0))
        try:
            return await _conversation(client, system, crash=crash, **options)
        finally:
            await client.close()

    async def _conversation(client: Any, system: str, *, crash: bool, **options: Any) -> Any:
        async with redrive.run(journal, "sdk", **options) as run:
            messages: list[Any] = [
                {"role": "system", "content": system},
                {"role": "user", "content": "order A arrived damaged"},
            ]
            reply = await client.chat.completions.create(model="gpt-4o", messages=messages)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or []:
                result = await refund(**json.loads(call.function.arguments))  # type: ignore[union-attr]
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                )
            if crash:
                raise ConnectionError("the worker was cut off")  # resumable
            final = await client.chat.completions.create(model="gpt-4o", messages=messages)
            return run.finish(final.choices[0].message.content)

    with serve() as server:
        url = server.url + "/v1"
        server.add(Reply(body=_refund_call("c1")))
        with pytest.raises(ConnectionError):
            asyncio.run(handle(url, "v1: you refund orders", crash=True))
        server.add(
            Reply(body=_refund_call("c9")),
            Reply(body=_chat({"role": "assistant", "content": "Refunded A."})),
        )
        options: dict[str, Any] = {}
        if how == "policy":
            options["replay"] = CONTINUE
        else:
            monkeypatch.setenv("REDRIVE_ON_DRIFT", "continue_live")
        out = asyncio.run(handle(url, "v2: kindly", crash=False, **options))
        assert out == "Refunded A." and effects == ["A"] and len(server.requests) == 3
    assert redrive.run_fingerprint(journal, "sdk").reasked == (1,)


# -- the kinds, as properties -------------------------------------------------------------

#: tool names: "se_*" are side-effecting (restart_safe=False), "ro_*" read-only
_TOOLS = ("se_a", "se_b", "ro_c", "ro_d")
_POLICIES = {
    "strict": ReplayPolicy(),
    "continue_live": CONTINUE,
    "lenient": ReplayPolicy.of("lenient"),
    "model-lenient": ReplayPolicy(model="lenient", tool="strict"),
    "tool-lenient": ReplayPolicy(tool="lenient"),
    "warn-continue": ReplayPolicy(model="warn", tool="warn", on_drift="continue_live"),
}


class Program:
    """A loop of (model step, tool call) pairs the test can change, and its side-effect log.

    ``calls[i]`` is the tool and argument of the i-th call (arguments are unique, so a
    side-effecting (tool, argument) seen twice in :attr:`ledger` is one operation run
    twice); ``prompts[i]`` is the system prompt of the model step before it. The ledger
    holds ``(tool, argument, side-effecting (tool, argument) pairs the loop had replayed
    or run before)`` for every body that ran.
    """

    def __init__(self, drive: Drive, calls: list[tuple[str, int]]) -> None:
        self.calls = list(calls)
        self.recorded = list(calls)  # the code the run was recorded with
        self.prompts = ["p"] * len(calls)
        self.ledger: list[tuple[str, int, frozenset[tuple[str, int]]]] = []
        self.asked: set[tuple[str, int]] = set()

        @drive.model
        def ask(system: str, n: int) -> str:
            return f"{system}:{n}"

        def make(name: str) -> Any:
            def body(arg: int) -> int:
                self.ledger.append((name, arg, frozenset(self.asked)))
                return arg

            return drive.tool(name=name, read_only=name.startswith("ro_"), restart_safe=False)(body)

        self.ask = ask
        self.tools = {name: make(name) for name in _TOOLS}

    def loop(self, run: redrive.Run) -> Loop:
        self.asked = set()
        for n, (name, arg) in enumerate(self.calls):
            yield self.ask(system=self.prompts[n], n=n)
            yield self.tools[name](arg)
            if name.startswith("se_"):
                self.asked.add((name, arg))
        return run.finish(len(self.calls))

    def side_effects(self) -> list[tuple[str, int]]:
        """The side-effecting bodies that ran, as (tool, argument)."""
        return [(name, arg) for name, arg, _ in self.ledger if name.startswith("se_")]

    def change(self, how: str, at: int, other: str) -> None:
        """Change the code: insert, drop, rename a call, change its argument or its prompt."""
        at = min(at, len(self.calls) - 1)
        name, arg = self.calls[at]
        if how == "insert":
            self.calls.insert(at, (other, 100 + at))
            self.prompts.insert(at, "p")
        elif how == "drop":
            if len(self.calls) > 1:
                del self.calls[at], self.prompts[at]
        elif how == "rename":
            if other == name:
                other = _TOOLS[(_TOOLS.index(name) + 1) % len(_TOOLS)]
            self.calls[at] = (other, arg)
        elif how == "args":
            self.calls[at] = (name, arg + 50)
        elif how == "prompt":
            self.prompts[at] = "p2"
        else:  # the model is re-asked and the call it leads to changes (item 1)
            self.prompts[at], self.calls[at] = "p2", (name, arg + 50)


def _check(program: Program, recorded: list[tuple[str, int]], since: int) -> None:
    """C4 over the ledger entries from ``since`` on: no recorded side effect runs again,
    and no new side effect runs before every recorded one was replayed."""
    new = program.ledger[since:]
    again = [(n, a) for n, a, _ in new if (n, a) in recorded]
    assert not again, f"a finished side effect ran again: {again}"
    for name, arg, asked in new:
        if name.startswith("se_"):
            waiting = set(recorded) - asked
            assert not waiting, f"{name}({arg}) ran while {sorted(waiting)} waited"


def _take(
    drive: Drive, journal: Any, program: Program, step: redrive.NextStep, policy: ReplayPolicy
) -> None:
    """Take one next step an error proposed (a fork, a policy, a resume on recorded code)."""
    with contextlib.suppress(redrive.ReplayError):
        if step.action == NextStepAction.FORK:
            redrive.fork(journal, "r", step.params["before"], f"fork-{step.params['before']}")
            drive.run(journal, f"fork-{step.params['before']}", program.loop, replay=policy)
        elif step.action == NextStepAction.POLICY:
            options = step.params["options"]
            drive.run(journal, "r", program.loop, replay=ReplayPolicy(**options["replay"]))
        elif step.action == NextStepAction.RESUME and step.params == {"code": "recorded"}:
            program.calls, program.prompts = list(program.recorded), ["p"] * len(program.recorded)
            drive.run(journal, "r", program.loop, replay=policy)


_calls = st.lists(st.sampled_from(_TOOLS), min_size=1, max_size=4).map(
    lambda names: [(name, n) for n, name in enumerate(names)]
)


@given(
    face=st.sampled_from(["sync", "async"]),
    duck=st.booleans(),
    calls=_calls,
    crash_at=st.integers(min_value=1, max_value=4),
    how=st.sampled_from(["insert", "drop", "rename", "args", "prompt", "reasked"]),
    at=st.integers(min_value=0, max_value=3),
    other=st.sampled_from(_TOOLS),
    policy=st.sampled_from(sorted(_POLICIES)),
    pick=st.integers(min_value=0, max_value=3),
)
@settings(deadline=None)
def test_property_no_policy_runs_a_finished_side_effect_again(
    face: str,
    duck: bool,
    calls: list[tuple[str, int]],
    crash_at: int,
    how: str,
    at: int,
    other: str,
    policy: str,
    pick: int,
) -> None:
    """Kind of items 1 and 3 (C2, C4, C5, C6): a run cut after a tool step, resumed on
    changed code (a call inserted, dropped, renamed, with other arguments, a prompt
    changed, a re-asked model leading to another call) under any policy, on either face:
    no side-effecting body runs twice, none runs while a recorded one waits unreplayed,
    and every next step its error proposes (a fork, a policy) keeps both when taken."""
    drive = Drive(face)  # type: ignore[arg-type]
    journal = redrive.open_journal(":memory:") if duck else MemoryJournal()
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore", redrive.ReplayDriftWarning)  # model="warn" replays
        patch.setattr("redrive.replay._state._SIBLING_WAIT", 0.01)
        program = Program(drive, calls)
        crash_at = min(crash_at, len(calls))
        drive.crash(
            journal,
            "r",
            "tool_recorded",
            calls[crash_at - 1][0],
            program.loop,
            occurrence=sum(1 for n, _ in calls[:crash_at] if n == calls[crash_at - 1][0]),
        )
        recorded = program.side_effects()
        assert len(recorded) == len(set(recorded))
        program.change(how, at, other)
        chosen = _POLICIES[policy]
        since = len(program.ledger)
        try:
            drive.run(journal, "r", program.loop, replay=chosen)
        except redrive.DivergenceError as exc:
            _check(program, recorded, since)
            steps = exc.next_steps
            assert steps, "a divergence proposes next steps"
            if recorded:
                forks = [s for s in steps if s.action == NextStepAction.FORK]
                for fork in forks:  # a fork never drops a recorded side effect
                    assert fork.params["before"] > max(
                        s.seq for s in _recorded_side_effects(journal)
                    )
            # the steps are alternatives: take one of those a program can take
            takeable = [s for s in steps if s.action != NextStepAction.PERSON]
            if takeable:
                before = len(program.ledger)
                _take(drive, journal, program, takeable[pick % len(takeable)], chosen)
                _check(program, recorded, before)
        except redrive.ReplayError:
            pass
        _check(program, recorded, since)
        assert len(program.side_effects()) == len(set(program.side_effects()))
    journal.close()


def _recorded_side_effects(journal: Any) -> list[Any]:
    from redrive.replay._steps import iter_steps

    steps = iter_steps(journal.frames("r"), "r", verify=False)
    return [s for s in steps if s.kind == "tool" and s.name.startswith("se_")]


class Recorder:
    """A loop that opens model steps through the recorder handles, as an SDK client does.

    ``program`` is a list of ``"m"`` (a model step: ``begin_model`` then ``record``, or
    their async forms) and ``"t"`` (a side-effecting tool) steps; ``prompts[i]`` is the
    i-th model step's prompt. The run stops (resumably) after ``stop`` steps.
    """

    def __init__(self, program: list[str]) -> None:
        self.program = program
        self.prompts = ["p"] * len(program)
        self.ledger: list[int] = []

        @redrive.tool(restart_safe=False)
        def act(n: int) -> int:
            self.ledger.append(n)
            return n

        @redrive.tool(restart_safe=False, name="act")
        async def aact(n: int) -> int:
            self.ledger.append(n)
            return n

        self.act, self.aact = act, aact

    def sync(self, journal: Any, stop: int, **options: Any) -> str:
        with redrive.run(journal, "h", **options) as run:
            for n, kind in enumerate(self.program):
                if n == stop:
                    raise ConnectionError("cut off")
                if kind == "m":
                    step = run.begin_model("model:x", {"prompt": self.prompts[n], "n": n})
                    if not step.recorded:
                        step.record({"answer": n})
                else:
                    self.act(n)
            run.finish("done")
        return run.status

    async def _async(self, journal: Any, stop: int, **options: Any) -> str:
        async with redrive.run(journal, "h", **options) as run:
            for n, kind in enumerate(self.program):
                if n == stop:
                    raise ConnectionError("cut off")
                if kind == "m":
                    step = await run.abegin_model("model:x", {"prompt": self.prompts[n], "n": n})
                    if not step.recorded:
                        await step.arecord({"answer": n})
                else:
                    await self.aact(n)
            run.finish("done")
        return run.status

    def face(self, face: str, journal: Any, stop: int, **options: Any) -> str:
        """Run the loop on ``face``; the outcome's name (a status or an error class)."""
        try:
            if face == "sync":
                return self.sync(journal, stop, **options)
            return asyncio.run(self._async(journal, stop, **options))
        except (ConnectionError, redrive.ReplayError) as exc:
            return type(exc).__name__


def _positions(journal: Any) -> list[tuple[str, int, Any]]:
    frames = [f for f in journal.frames("h") if f.kind in ("model_request", "tool_start")]
    return [(f.kind, f.data()["turn"], f.data().get("issue")) for f in frames]


@given(
    program=st.lists(st.sampled_from(["m", "t"]), min_size=1, max_size=6),
    stop=st.integers(min_value=1, max_value=6),
    changed=st.integers(min_value=0, max_value=5),
    how=st.sampled_from(["policy", "env"]),
)
@settings(deadline=None)
def test_property_both_faces_record_and_continue_live_alike(
    program: list[str], stop: int, changed: int, how: str
) -> None:
    """Kind of item 6 (C3): the sync and the async face of the recorder handles record
    the same issue positions and turns, and a run cut off, its prompt edited, and
    resumed under on_drift="continue_live" (a ReplayPolicy or REDRIVE_ON_DRIFT) ends
    the same on both faces, every side effect run once."""
    outcomes = {}
    with pytest.MonkeyPatch.context() as patch:
        for face in ("sync", "async"):
            journal = MemoryJournal()
            loop = Recorder(program)
            first = loop.face(face, journal, stop % len(program))  # cut before the end
            recorded = _positions(journal)
            loop.prompts[min(changed, len(program) - 1)] = "p2"
            if how == "env":
                patch.setenv("REDRIVE_ON_DRIFT", "continue_live")
                options: dict[str, Any] = {}
            else:
                options = {"replay": CONTINUE}
            second = loop.face(face, journal, len(program), **options)
            patch.delenv("REDRIVE_ON_DRIFT", raising=False)
            assert len(loop.ledger) == len(set(loop.ledger)), loop.ledger
            outcomes[face] = (first, recorded, second, sorted(loop.ledger))
    assert outcomes["sync"] == outcomes["async"]
    assert outcomes["sync"][2] == "succeeded"


def test_next_steps_and_the_message_say_the_same_and_pickle() -> None:
    """with_next_steps replaces the message's advice by the steps' text (one rendering),
    and the steps survive a pickle round trip and to_fields()."""
    import pickle

    err = redrive.DivergenceError("run 'r' diverged\nWhat to do: the old advice", run_id="r")
    steps = (
        redrive.NextStep(NextStepAction.PERSON, "look first", {"commands": ["redrive show r"]}),
        redrive.NextStep(
            NextStepAction.RESUME, "resume on the recorded code", {"code": "recorded"}
        ),
    )
    assert err.with_next_steps(steps) is err
    assert err.message == (
        "run 'r' diverged\nWhat to do:\n  1. look first\n  2. resume on the recorded code"
    )
    assert str(err) == err.message and err.to_fields()["next_steps"] == steps
    again = pickle.loads(pickle.dumps(err))
    assert again.next_steps == steps and again.message == err.message
    assert err.with_next_steps(()).message == "run 'r' diverged"
