"""The record path's shortcuts (issue 26) give the verdicts of the full checks.

Issue 26 (record path): the chain of a frame :func:`make_frame` built is not hashed a
second time when the journal checks it after the chain it was built on; a run row that
passed :func:`run_problem` is not checked again; the hex rule is a regular expression;
the scrubber's test for signed content spells its field table out.
Each shortcut must give the verdict of the full check, for every value.
"""

from __future__ import annotations

import pickle
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from redrive import _signed
from redrive.frames import GENESIS, ChainCheck, Frame, Kind, make_frame
from redrive.storage import RunRecord, _validate, run_problem
from tests.conftest import examples

_HEX = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)
_PAYLOADS = st.dictionaries(
    st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=40), st.none()), max_size=4
)


def _made(prev: str, payload: dict[str, Any], seq: int = 3) -> Frame:
    return make_frame(
        run_id="r", seq=seq, kind=Kind.NOTE, name="n", payload=payload, prev_chain=prev
    )


@settings(max_examples=examples(default=60, ci=120, thorough=1000), deadline=None)
@given(prev=st.one_of(st.just(GENESIS), _HEX), other=_HEX, payload=_PAYLOADS)
def test_a_made_frame_passes_the_chain_check_exactly_when_a_copy_does(
    prev: str, other: str, payload: dict[str, Any]
) -> None:
    """After the chain it was made on it passes; after any other it fails, as a copy does."""
    frame = _made(prev, payload)
    copy = pickle.loads(pickle.dumps(frame))  # equal, never made here: hashed in full
    assert copy == frame and copy is not frame
    for after in (prev, other):
        made = ChainCheck("r", next_seq=3, prev_chain=after).problem(frame)
        full = ChainCheck("r", next_seq=3, prev_chain=after).problem(copy)
        assert made == full
        assert (made is None) == (after == prev)


@settings(max_examples=examples(default=40, ci=80, thorough=500), deadline=None)
@given(prev=_HEX, payload=_PAYLOADS, changed=st.binary(min_size=1, max_size=8))
def test_a_changed_copy_of_a_made_frame_fails_its_chain_check(
    prev: str, payload: dict[str, Any], changed: bytes
) -> None:
    """A frame made, then copied with other content (attrs.evolve), is hashed and refused."""
    frame = _made(prev, payload)
    altered = attrs.evolve(frame, payload=frame.payload + changed)
    assert ChainCheck("r", next_seq=3, prev_chain=prev).problem(frame) is None
    found = ChainCheck("r", next_seq=3, prev_chain=prev).problem(altered)
    assert found is not None and found[0] == "chain"


def _hex32_rule(value: Any) -> bool:
    """The rule as it was written first: a str of 32 characters, each a lowercase hex digit."""
    return isinstance(value, str) and len(value) == 32 and set(value) <= set("0123456789abcdef")


@settings(max_examples=examples(default=100, ci=200, thorough=2000), deadline=None)
@given(
    st.one_of(
        _HEX,
        _HEX.map(lambda h: h + "\n"),
        _HEX.map(str.upper),
        st.text(alphabet="0123456789abcdefABCDEF\n \x00g", min_size=30, max_size=34),
        st.text(max_size=40),
        st.binary(min_size=32, max_size=32),
        st.integers(),
        st.none(),
    )
)
def test_the_hex_check_is_the_set_rule(value: Any) -> None:
    """``_hex32`` accepts exactly what the set rule accepts (no trailing newline, no capitals)."""
    assert (_validate._hex32(value) is None) == _hex32_rule(value)


_TEXTS = st.one_of(st.text(max_size=12), st.just("a\x00b"), st.just("\ud800"), st.integers())
_COUNTS = st.one_of(st.integers(min_value=-2, max_value=2**64), st.booleans(), st.text(max_size=3))
_TIMES = st.one_of(st.floats(), st.integers(min_value=-(2**70), max_value=2**70), st.none())


@st.composite
def rows(draw: st.DrawFn) -> RunRecord:
    """Run rows, most of them well-formed, some with one hostile field."""
    row = RunRecord(run_id="r", last_chain=GENESIS, created_at=1.0, updated_at=2.0)
    field, values = draw(
        st.sampled_from(
            [
                ("run_id", st.one_of(st.just("r"), _TEXTS)),
                ("status", st.sampled_from(["running", "succeeded", "bogus", ""])),
                ("next_seq", _COUNTS),
                ("last_chain", st.one_of(_HEX, _TEXTS)),
                ("input_fp", _TEXTS),
                ("updated_at", _TIMES),
                ("output", st.one_of(st.none(), st.binary(max_size=6))),
                ("error", st.one_of(st.none(), _TEXTS)),
                ("lease_epoch", _COUNTS),
                ("lease_expires", _TIMES),
            ]
        )
    )
    changes: dict[str, Any] = {field: draw(values)}
    return attrs.evolve(row, **changes)


@settings(max_examples=examples(default=100, ci=200, thorough=2000), deadline=None)
@given(rows())
def test_a_row_gets_the_same_verdict_every_time_and_only_a_passing_row_is_remembered(
    row: RunRecord,
) -> None:
    """The first verdict is the full check's; a second look gives it again (cache or not)."""
    _validate._ROWS_PASSED.discard(id(row))
    first = run_problem(row)
    assert _validate._ROWS_PASSED.holds(id(row), row) == (first is None)
    assert run_problem(row) == first
    assert run_problem(attrs.evolve(row)) == first  # a new object: checked in full


@settings(max_examples=examples(default=100, ci=200, thorough=2000), deadline=None)
@given(
    st.dictionaries(
        st.one_of(
            st.sampled_from([*_signed.SIGNED_FIELDS, "type", "Encrypted_content", "signature"]),
            st.text(max_size=6),
            st.integers(),
        ),
        st.one_of(st.sampled_from(sorted(_signed.SIGNED_TYPES)), st.text(max_size=6), st.none()),
        max_size=4,
    )
)
def test_signed_is_the_rule_of_its_tables(node: dict[Any, Any]) -> None:
    """The scrubber's fast ``signed`` says what its tables say (SIGNED_TYPES, SIGNED_FIELDS)."""
    kind = node.get("type")
    rule = (type(kind) is str and kind in _signed.SIGNED_TYPES) or any(
        field in node for field in _signed.SIGNED_FIELDS
    )
    assert _signed.signed(node) == rule
