"""The replay's read of a run's frames: its shortcuts give what the long way gives (issue 26).

A replay reads every recorded frame once: it checks its seq and chain, decodes
its payload and checks the payload's schema. The shortcuts held here:

* the chain hashed in one call (:func:`redrive.frames._chain_holds`) is
  :meth:`Frame.expected_chain`, for any frame (a field of an odd type takes the
  definition itself);
* a replay's chain check keeps no memo of the frames it lets go;
* a frame object that passed the journal's full check (held in its log) is
  decoded without a second depth walk or schema check; a frame read anew (a
  table row, a hostile one) still gets both, with the same errors.
"""

from __future__ import annotations

from typing import Any

import attrs
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import frames as frames_mod
from redrive._canonical_decode import decode, decode_checked
from redrive.errors import JournalCorruptError
from redrive.frames import GENESIS, ChainCheck, Frame, encode, make_frame
from redrive.replay import _steps
from redrive.replay._steps import StepReader
from redrive.storage import MemoryJournal, frame_problem, passed
from tests import strategies as s


@given(s.values)
def test_decode_checked_is_decode(value: Any) -> None:
    """Same value as :func:`decode` for every canonical encoding."""
    data = encode({"v": value})
    assert decode_checked(data) == decode(data)


@given(st.binary(max_size=64))
def test_decode_checked_raises_as_decode(data: bytes) -> None:
    """Bytes :func:`decode` refuses are refused with its very message."""
    try:
        expected = decode(data)
    except ValueError as exc:
        with pytest.raises(ValueError) as found:
            decode_checked(data)
        assert str(found.value) == str(exc)
    else:
        assert decode_checked(data) == expected


class _Seq(int):
    """An int subclass (ormsgpack refuses it: the chain takes the definition)."""


@given(
    st.text(max_size=8),
    st.integers(min_value=0, max_value=2**40),
    st.sampled_from(["note", "tool_done", "model_request"]),
    st.floats(allow_nan=False, allow_infinity=False) | st.integers(-5, 5),
    st.binary(max_size=64),
)
def test_chain_in_one_call_is_the_definition(
    run_id: str, seq: int, kind: str, at: float, payload: bytes
) -> None:
    """``_chain_holds`` agrees with ``expected_chain`` on right and wrong chains."""
    for seq_value in (seq, _Seq(seq)):
        frame = Frame(
            run_id=run_id,
            seq=seq_value,
            kind=kind,
            name="n",
            key="",
            payload=payload,
            chain="",
            at=at,
        )
        good = frame.expected_chain(GENESIS)
        assert frames_mod._chain_holds(attrs.evolve(frame, chain=good), GENESIS)
        assert not frames_mod._chain_holds(attrs.evolve(frame, chain="0" * 32), GENESIS) or (
            good == "0" * 32
        )


def _run_frames(n: int = 3) -> list[Frame]:
    out: list[Frame] = []
    prev = GENESIS
    for seq in range(n):
        frame = make_frame(
            run_id="r",
            seq=seq,
            kind="note",
            name="n",
            payload={"text": f"{seq}"},
            prev_chain=prev,
        )
        out.append(frame)
        prev = frame.chain
    return out


def test_a_replay_check_keeps_no_memo_of_frames_it_lets_go() -> None:
    """remember=False (the step reader's) stores nothing; the default remembers the frame."""
    fresh = [attrs.evolve(f) for f in _run_frames()]  # copies: not built here
    before = len(frames_mod._MADE)
    check = ChainCheck("r", remember=False)
    for frame in fresh:
        check.check(frame)
    assert len(frames_mod._MADE) == before
    reader = StepReader("r")  # a replay's reader checks as remember=False does
    for frame in fresh:
        reader.feed(frame)
    assert len(frames_mod._MADE) == before
    check = ChainCheck("r")
    for frame in fresh:
        check.check(frame)
    assert len(frames_mod._MADE) == before + len(fresh)


def test_a_fresh_frame_with_a_broken_chain_is_refused() -> None:
    """The one-call hash still finds an altered payload (seq and last good seq named)."""
    fresh = [attrs.evolve(f) for f in _run_frames()]
    fresh[1] = attrs.evolve(fresh[1], payload=encode({"text": "edited"}))
    reader = StepReader("r")
    reader.feed(fresh[0])
    with pytest.raises(JournalCorruptError) as found:
        reader.feed(fresh[1])
    assert found.value.seq == 1 and found.value.last_good_seq == 0
    assert found.value.reason == "chain"


def test_a_frame_that_passed_is_read_without_a_second_schema_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Held frames skip payload_problem; copies of them (read anew) are checked, same data."""
    journal = MemoryJournal()
    with redrive.run(journal, "held"):
        redrive.now()
        redrive.uuid4()
    held = list(journal.frames("held"))
    assert all(passed(f) for f in held)
    seen: list[str] = []
    real = _steps.payload_problem

    def counting(kind: str, data: Any) -> str | None:
        seen.append(kind)
        return real(kind, data)

    monkeypatch.setattr(_steps, "payload_problem", counting)
    reader = StepReader("held")
    got = [reader._payload(f) for f in held]
    assert seen == []
    copies = [attrs.evolve(f) for f in held]
    assert not any(passed(f) for f in copies)
    again = [StepReader("held")._payload(f) for f in copies]
    assert seen == [f.kind for f in copies]
    assert got == again


def test_a_hostile_payload_read_anew_is_still_refused() -> None:
    """A row whose payload breaks its kind's schema: JournalCorruptError naming the field."""
    frame = make_frame(
        run_id="r", seq=0, kind="note", name="n", payload={"text": "x"}, prev_chain=GENESIS
    )
    bad = msgpack.packb({"turn": "three"})
    hostile = attrs.evolve(frame, payload=bad, chain="")
    hostile = attrs.evolve(hostile, chain=hostile.expected_chain(GENESIS))
    assert frame_problem(hostile) is not None and not passed(hostile)
    with pytest.raises(JournalCorruptError, match="turn: expected an int"):
        StepReader("r").feed(hostile)
