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
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive import NextStepAction
from redrive.replay import ReplayPolicy
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
                result = await refund(**json.loads(call.function.arguments))
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
