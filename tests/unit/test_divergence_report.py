"""What a DivergenceError tells: the caller's file and line, the path diff, absent values."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.errors import DivergenceError
from redrive.replay import ABSENT, diff_values
from redrive.storage import MemoryJournal
from tests.conftest import Drive, Loop


def _refund_agent(drive: Drive, state: dict[str, Any]) -> Any:
    @drive.model(name="model:plan")
    def plan(text: str) -> str:
        return "refund"

    @drive.tool(restart_safe=False)
    def create_refund(order_id: str, amount: int) -> str:
        return "R-1"

    def loop(run: redrive.Run) -> Loop:
        if state["plan_first"]:
            yield plan("refund O-1")
        refund = yield create_refund("O-1", state["amount"])
        yield plan("done")
        return refund

    return loop


def test_a_step_of_another_kind_still_names_the_changed_argument(drive: Drive) -> None:
    """Issue 17 #8: where the journal has a model step and the loop asks for a tool whose
    argument changed, the diff is taken against the nearest recorded call of that tool and
    names ``$.amount`` (on main: ``diff=[]``, since the step kinds differ)."""
    journal = MemoryJournal()
    state: dict[str, Any] = {"amount": 5, "plan_first": True}
    loop = _refund_agent(drive, state)
    drive.run(journal, "r", loop)
    state.update(amount=6, plan_first=False)
    with pytest.raises(DivergenceError) as caught:
        drive.run(journal, "r", loop, live=False)
    err = caught.value
    assert (err.kind, err.found_kind) == ("model", "tool")
    assert err.diff == [("$.amount", 5, 6)]
    assert "nearest recorded tool 'create_refund' (seq 3" in str(err)
    assert "$.amount: 5 -> 6" in str(err)


@redrive.tool(restart_safe=False)
def _pay(order_id: str, amount: int) -> str:
    return "P-1"


def _pay_loop(amount: int) -> str:
    return _pay("O-1", amount)  # THE CALL


async def _apay(order_id: str, amount: int) -> str:
    return "P-1"


_apay_tool = redrive.tool(restart_safe=False, name="_pay")(_apay)


async def _apay_loop(amount: int) -> str:
    return await _apay_tool("O-1", amount)  # THE ASYNC CALL


def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(marker))


def test_the_error_names_the_callers_file_and_line() -> None:
    """Issue 17 #8: the error names the user's frame that made the drifted call."""
    journal = MemoryJournal()
    with redrive.run(journal, "r") as run:
        run.finish(_pay_loop(5))
    with pytest.raises(DivergenceError) as caught, redrive.run(journal, "r", live=False):
        _pay_loop(6)
    err = caught.value
    line = _line_of("# THE CALL")
    assert err.caller == f"tests/unit/test_divergence_report.py:{line} in _pay_loop"
    assert f"called from: {err.caller}" in str(err)
    assert pickle.loads(pickle.dumps(err)).caller == err.caller


def test_the_async_face_names_the_caller_too() -> None:
    """On the async face the step is matched off the event loop; the caller is still named."""
    journal = MemoryJournal()

    async def main(amount: int, live: bool) -> None:
        async with redrive.run(journal, "r", live=live) as run:
            run.finish(await _apay_loop(amount))

    asyncio.run(main(5, True))
    with pytest.raises(DivergenceError) as caught:
        asyncio.run(main(6, False))
    line = _line_of("# THE ASYNC CALL")
    assert caught.value.caller == f"tests/unit/test_divergence_report.py:{line} in _apay_loop"
    assert f"called from: {caught.value.caller}" in str(caught.value)


def test_absent_values_read_as_absent() -> None:
    """Issue 17 #8: a key or item missing on one side is ``ABSENT`` (repr ``<absent>``), not a
    bare ``object()``; it pickles as itself."""
    diff = diff_values({"a": 1, "items": [1]}, {"b": 2, "items": [1, 2]})
    assert diff == [("$.a", 1, ABSENT), ("$.b", ABSENT, 2), ("$.items[1]", ABSENT, 2)]
    assert repr(ABSENT) == "<absent>" and pickle.loads(pickle.dumps(ABSENT)) is ABSENT


@given(
    recorded=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 3), max_size=4),
    replayed=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 3), max_size=4),
)
def test_every_difference_is_a_path_with_absent_marking_a_missing_side(
    recorded: dict[str, int], replayed: dict[str, int]
) -> None:
    """For any two maps, the diff names exactly the keys whose values differ or exist on one
    side, with ABSENT (never a bare object) for the missing side."""
    diff = diff_values(recorded, replayed)
    expected = sorted(
        (f"$.{k}", recorded.get(k, ABSENT), replayed.get(k, ABSENT))
        for k in set(recorded) | set(replayed)
        if recorded.get(k, ABSENT) != replayed.get(k, ABSENT)
    )
    assert sorted(diff, key=lambda d: d[0]) == expected
    for _, a, b in diff:
        assert type(a) in (int, type(ABSENT)) and type(b) in (int, type(ABSENT))


def test_a_resume_under_a_lenient_model_rule_names_the_changed_tool_argument(
    drive: Drive,
) -> None:
    """Issue 17 #8, the resume case: model='lenient', tool='strict', after a crash the code no
    longer asks the first model step and calls the tool with another amount: the call, issued
    where the record has none, goes live, and the run's end names ``$.amount`` (on main it
    raised with ``diff=[]``)."""
    journal = MemoryJournal()
    state: dict[str, Any] = {"amount": 5, "plan_first": True}
    loop = _refund_agent(drive, state)
    drive.crash(journal, "r", "model_before", "model:plan", loop, occurrence=2)
    state["amount"] = 6
    policy = redrive.ReplayPolicy(model="lenient", tool="strict")

    def changed(run: redrive.Run) -> Loop:
        state["plan_first"] = False  # the new prompt: the recorded model step is not asked for
        return (yield from loop(run))

    frames = len(list(journal.frames("r")))
    with pytest.raises(DivergenceError) as caught:
        drive.run(journal, "r", changed, replay=policy)
    assert caught.value.diff == [("$.amount", 5, 6)]
    assert "$.amount: 5 -> 6" in str(caught.value)
    assert caught.value.reason == "step"
    assert len(list(journal.frames("r"))) == frames  # nothing went live


_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=8)}
)


@given(
    recorded=st.lists(_message, max_size=6),
    extra=st.lists(st.tuples(st.integers(min_value=0), _message), min_size=1, max_size=4),
)
def test_a_history_grown_by_any_inserted_turns_is_named(
    recorded: list[dict[str, str]], extra: list[tuple[int, dict[str, str]]]
) -> None:
    """Turns inserted anywhere in a recorded history are told as a grown list, with counts."""
    from redrive.replay._divergence import grown_list

    replayed = list(recorded)
    for at, message in extra:
        replayed.insert(at % (len(replayed) + 1), message)
    body = {"model": "m", "messages": recorded}
    found = grown_list({"body": body}, {"body": {**body, "messages": replayed}})
    assert found == ("$.body.messages", len(recorded), len(extra))
    assert grown_list({"body": body}, {"body": body}) is None  # the same request grew nothing


@given(recorded=st.lists(_message, min_size=1, max_size=6), data=st.data())
def test_a_history_with_a_changed_turn_is_not_told_as_grown(
    recorded: list[dict[str, str]], data: st.DataObject
) -> None:
    from redrive.replay._divergence import grown_list

    at = data.draw(st.integers(min_value=0, max_value=len(recorded) - 1))
    changed = {**recorded[at], "content": recorded[at]["content"] + "!"}
    replayed = [*recorded[:at], changed, *recorded[at + 1 :]]
    assert grown_list({"messages": recorded}, {"messages": replayed}) is None
