"""Request deltas (prefix references between model requests): type-strict detection,
and the journal keeps the request that was sent."""

from __future__ import annotations

import decimal
from typing import Any

import pytest

import redrive
from redrive.frames import PrefixRef
from redrive.replay._delta import compress, expand, expand_frames

D = decimal.Decimal


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ([{"flag": 1}, {"n": 2}], [{"flag": True}, {"n": 2}, {"n": 3}]),
        ([{"flag": 1}, {"n": 2}], [{"flag": 1.0}, {"n": 2}, {"n": 3}]),
        ([{"x": [0, [1]]}, "s"], [{"x": [0, [True]]}, "s", "t"]),
        ([{1: "a"}, "s"], [{True: "a"}, "s", "t"]),
        ([{"f": 0.0}, "s"], [{"f": -0.0}, "s", "t"]),
        ([[1, 2], "s"], [(1, 2), "s", "t"]),
        ([{"d": D("1")}, "s"], [{"d": 1}, "s", "t"]),
    ],
)
def test_prefix_detection_is_type_strict(before: list[Any], after: list[Any]) -> None:
    """A list whose old items changed only in type (1 -> True, 1 -> 1.0) is stored whole."""
    stored = compress({"messages": before}, {"messages": after})
    assert stored == {"messages": after}
    assert not isinstance(stored["messages"], PrefixRef)


def test_type_identical_prefix_is_still_compressed() -> None:
    """Items equal in type and value still become a prefix reference that expands exactly."""
    before = [{"flag": True, "x": [1, 2.5]}, {"n": 2}]
    after = [{"flag": True, "x": [1, 2.5]}, {"n": 2}, {"n": 3}]
    stored = compress({"messages": before}, {"messages": after})
    assert stored == {"messages": PrefixRef(2, [{"n": 3}])}
    assert expand({"messages": before}, stored) == {"messages": after}


def test_journal_keeps_the_request_that_was_sent_and_replays() -> None:
    """flag: 1 then flag: True is journaled as sent, and replay with an ignore rule matches."""
    journal = redrive.open_journal(":memory:")

    @redrive.model
    def llm(messages: list[dict[str, Any]]) -> str:
        return "ok"

    def loop() -> None:
        llm([{"flag": 1}, {"n": 2}])
        llm([{"flag": True}, {"n": 2}, {"n": 3}])

    with redrive.run(journal, "d1"):
        loop()
    stored = [
        data["args"]["messages"]
        for frame, data in expand_frames(journal.frames("d1"))
        if frame.kind == "model_request"
    ]
    assert stored[1][0]["flag"] is True
    policy = redrive.ReplayPolicy(ignore=("$..request_id",))
    with redrive.run(journal, "d1", live=False, replay=policy):
        loop()
