"""The record path's CPU per step (issue 26 item 6, "Steps"): its shortcuts keep every verdict.

The journal checks every frame appended to it; a frame the journal writer
built from a canonical tree is remembered as passing when cheap tests on that
tree prove the full check would pass (:func:`passed_as_built`), so the bytes
just packed are not decoded again. A frame from anywhere else (a copy, an
import, a hostile caller) is checked in full. Checks an object passed are
remembered by identity in :class:`Remembered`, never for an equal or a dead object.
"""

from __future__ import annotations

import gc
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive._canonical import canonical
from redrive._identity import Remembered
from redrive.frames import GENESIS, Frame, Kind, decode, make_frame
from redrive.storage import MemoryJournal, _validate
from redrive.storage._validate import frame_problem, passed_as_built
from tests.conftest import examples

_FIELDS = ("turn", "step", "attempt", "partial", "read_only", "type", "event", "status")
_HOSTILE = st.one_of(
    st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 + 1, -1, True, False, None, 1.5]),
    st.sampled_from(["succeeded", "bogus", "", {"type": "E"}, [], ["n"], {"notes": 3}]),
    st.text(max_size=6),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
)
_ERRORS = st.one_of(
    _HOSTILE,
    st.fixed_dictionaries(
        {},
        optional={"type": _HOSTILE, "module": _HOSTILE, "qualname": _HOSTILE, "notes": _HOSTILE},
    ),
)


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """Payload maps whose checked fields hold well-formed or hostile values."""
    out: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(_FIELDS), max_size=4, unique=True)):
        out[name] = draw(_HOSTILE)
    if draw(st.booleans()):
        out["error"] = draw(_ERRORS)
    if draw(st.booleans()):
        out["entrypoint"] = draw(st.one_of(st.none(), st.text(max_size=4), st.integers()))
    if draw(st.booleans()):
        out["flags"] = draw(st.one_of(st.just({}), st.just([]), st.text(max_size=3)))
    out["args"] = draw(st.recursive(st.text(max_size=5), lambda c: st.lists(c, max_size=3)))
    return out


@settings(max_examples=examples(default=150, ci=300, thorough=3000), deadline=None)
@given(
    kind=st.sampled_from([k.value for k in Kind]),
    name=st.sampled_from(["apply_change", "model:x", "a\x00b", "é", ""]),
    payload=payloads(),
)
def test_a_frame_is_remembered_as_built_only_when_the_full_check_passes(
    kind: str, name: str, payload: dict[str, Any]
) -> None:
    """Whenever the shortcut remembers a built frame, a copy of it passes the full check."""
    tree = canonical(payload, "payload")
    frame = make_frame(
        run_id="r", seq=3, kind=kind, name=name, payload=tree, prev_chain=GENESIS, tree=True
    )
    copy = pickle.loads(pickle.dumps(frame))  # equal, never remembered: checked in full
    full = frame_problem(copy)
    if passed_as_built(frame, tree):
        assert full is None
        assert frame_problem(frame) is None
    else:
        assert frame_problem(frame) == full  # not remembered: the full check's verdict


def test_a_common_built_frame_is_remembered() -> None:
    """A writer's usual frame (plain payload, ASCII fields) takes the shortcut."""
    tree = canonical({"args": {"ref": "7"}, "turn": 0, "read_only": False}, "payload")
    frame = make_frame(
        run_id="r", seq=1, kind=Kind.TOOL_START, name="t", payload=tree, prev_chain=GENESIS
    )
    assert passed_as_built(frame, tree)
    assert _validate._PASSED.holds(id(frame), frame)


def test_a_too_deep_payload_is_not_remembered() -> None:
    """More map or array headers than the depth limit: the decoder's own walk decides."""
    tree = canonical({"args": [[i] for i in range(300)]}, "payload")
    frame = make_frame(
        run_id="r", seq=1, kind=Kind.NOTE, name="n", payload=tree, prev_chain=GENESIS
    )
    assert not passed_as_built(frame, tree)
    assert frame_problem(frame) is None  # checked in full, and fine


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Record every payload the validator decodes (into the list returned)."""
    decoded: list[bytes] = []

    def counting(data: bytes) -> Any:
        decoded.append(data)
        return decode(data)

    monkeypatch.setattr("redrive.storage._validate.decode", counting)
    return decoded


def test_the_journal_does_not_decode_the_writers_frames_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model step and a side-effecting tool step append frames the journal does not decode."""
    decoded = _count_decodes(monkeypatch)

    @redrive.model(name="model:stub")
    def model(request: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": "ok " + request["messages"][-1]["content"]}

    @redrive.tool(name="apply", restart_safe=False)
    def tool(ref: str) -> dict[str, Any]:
        return {"ok": True, "ref": ref}

    journal = MemoryJournal()
    with redrive.run(journal, "r1", model_commit="write"):
        model({"messages": [{"role": "user", "content": "hi"}]})
        tool("1")
    kinds = [f.kind for f in journal.frames("r1")]
    assert Kind.MODEL_RESPONSE.value in kinds and Kind.TOOL_DONE.value in kinds
    step_payloads = {
        f.payload for f in journal.frames("r1") if f.kind not in ("run_start", "run_end")
    }
    assert not step_payloads & set(decoded)


def test_a_foreign_frame_is_checked_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of a built frame (what an import or a file reader hands over) is decoded."""
    tree = canonical({"args": {"ref": "7"}, "turn": 0}, "payload")
    frame = make_frame(
        run_id="r", seq=1, kind=Kind.TOOL_START, name="t", payload=tree, prev_chain=GENESIS
    )
    assert passed_as_built(frame, tree)
    decoded = _count_decodes(monkeypatch)
    copy: Frame = pickle.loads(pickle.dumps(frame))
    assert frame_problem(copy) is None
    assert decoded == [frame.payload]


class _Thing:
    """An object that takes weak references."""


def test_remembered_holds_the_very_object_while_it_lives() -> None:
    """An equal or another object under the same key is not held; a dead one is not either."""
    memo: Remembered[_Thing] = Remembered()
    a, b = _Thing(), _Thing()
    memo.add("k", a)
    assert memo.holds("k", a)
    assert not memo.holds("k", b)
    assert not memo.holds("other", a)
    del a
    gc.collect()
    assert not memo.holds("k", b)  # a reused key (an id) never answers for a new object
    memo.discard("k")
    assert len(memo) == 0


def test_remembered_drops_the_entries_of_dead_objects() -> None:
    """An object's entry goes when the object does: the table holds the live ones only."""
    memo: Remembered[_Thing] = Remembered()
    live = [_Thing() for _ in range(10)]
    for i, thing in enumerate(live):
        memo.add(("live", i), thing)
    for i in range(5000):
        memo.add(i, _Thing())  # each dies at once
    assert len(memo) == 10
    assert len(memo._keys) == 10
    assert all(memo.holds(("live", i), thing) for i, thing in enumerate(live))
    replaced = _Thing()
    memo.add(("live", 0), replaced)  # a key stored again: the new object answers
    assert memo.holds(("live", 0), replaced) and not memo.holds(("live", 0), live[0])
    del live[0]
    gc.collect()
    assert memo.holds(("live", 0), replaced)  # the old object's death leaves the new entry
