"""The validator's one-expression test of a frame's and a run row's own fields (issue 26 item 6)
is sufficient: whenever it passes, every field check of the full validator passes too.

Random fields, hostile ones included (bools for counts, NaN and infinite times,
lone surrogates, NUL, non-ASCII and over-long ids, upper-case hex, ``str``
subclasses, values of the wrong type): the fast test may send a well-formed field
to the full checks, never let through one they refuse.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from redrive.frames import Frame
from redrive.storage import RunRecord
from redrive.storage._validate import (
    _frame_field_problem,
    _frame_fields_fine,
    _row_field_problem,
    _row_fields_fine,
    run_problem,
)
from tests.conftest import examples


class _Str(str):
    """A str subclass (types are checked exactly by the fast test)."""


_HEX = "0123456789abcdef" * 2
_TEXTS = st.one_of(
    st.sampled_from(["run-1", "", "a\x00b", "\ud800", "é", "x" * 1024, "x" * 1025, _HEX]),
    st.sampled_from([_HEX.upper(), _HEX + "\n", _HEX[:31], _Str("run-1"), _Str(_HEX)]),
    st.text(max_size=8),
)
_NUMBERS = st.one_of(
    st.sampled_from([0, 1, 2**63 - 1, 2**63, -1, True, False, 0.0, -0.0, 1.5]),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 10**400]),
    st.integers(),
    st.floats(),
)
_ANY = st.one_of(_TEXTS, _NUMBERS, st.none(), st.binary(max_size=4), st.just(bytearray(b"x")))


_FRAME = {
    "run_id": st.sampled_from(["run-1", "r" * 1024]),
    "seq": st.integers(0, 2**63 - 1),
    "kind": st.sampled_from(["tool_start", "model_response", "note"]),
    "name": st.sampled_from(["t", "model:m", ""]),
    "key": st.sampled_from(["", _HEX]),
    "payload": st.just(b"\x80"),
    "chain": st.just(_HEX),
    "at": st.floats(0, 2e9),
    "epoch": st.integers(0, 2**63 - 1),
}
_ROW = {
    "run_id": _FRAME["run_id"],
    "status": st.sampled_from(["running", "succeeded"]),
    "next_seq": _FRAME["seq"],
    "last_chain": st.just(_HEX),
    "input_fp": st.sampled_from([_HEX, ""]),
    "entrypoint": st.sampled_from([None, "m:f"]),
    "created_at": _FRAME["at"],
    "updated_at": _FRAME["at"],
    "output": st.sampled_from([None, b"\x80", b"\xc1"]),
    "error": st.sampled_from([None, "boom", "a\x00b"]),
    "lease_owner": st.sampled_from([None, "w1"]),
    "lease_epoch": _FRAME["seq"],
    "lease_expires": st.sampled_from([None, 5.0]),
}


@st.composite
def _fields(draw: st.DrawFn, valid: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    """Well-formed fields, then one or two of them (maybe none) replaced by any value."""
    fields = {name: draw(strategy) for name, strategy in valid.items()}
    for name in draw(st.lists(st.sampled_from(sorted(valid)), max_size=2)):
        fields[name] = draw(_ANY)
    return fields


@settings(max_examples=examples(default=600, ci=600, thorough=20_000), deadline=None)
@given(fields=_fields(_FRAME))
def test_a_frame_the_fast_test_passes_passes_every_field_check(fields: dict[str, Any]) -> None:
    """_frame_fields_fine(frame) implies _frame_field_problem(frame) is None."""
    frame = Frame(**fields)
    if _frame_fields_fine(frame):
        assert _frame_field_problem(frame) is None


@settings(max_examples=examples(default=600, ci=600, thorough=20_000), deadline=None)
@given(fields=_fields(_ROW))
def test_a_run_row_the_fast_test_passes_passes_every_field_check(fields: dict[str, Any]) -> None:
    """_row_fields_fine(row) implies _row_field_problem(row) is None."""
    row = RunRecord(**fields)
    if _row_fields_fine(row):
        assert _row_field_problem(row) is None


def test_the_fast_tests_pass_the_common_frame_and_row() -> None:
    """The writer's common frame and row take the fast path (else it would save nothing)."""
    frame = Frame(
        run_id="r", seq=1, kind="note", name="n", key="", payload=b"\x80", chain=_HEX, at=1.5
    )
    assert _frame_fields_fine(frame)
    assert _row_fields_fine(RunRecord(run_id="r", last_chain=_HEX, input_fp=_HEX))
    # a finished run's row (a replayed recording's header): its output decodes
    done = RunRecord(run_id="r", status="succeeded", last_chain=_HEX, input_fp=_HEX, output=b"\x90")
    assert _row_fields_fine(done)
    assert not _row_fields_fine(attrs.evolve(done, output=b"\xc1"))  # not msgpack


@settings(max_examples=examples(default=600, ci=600, thorough=20_000), deadline=None)
@given(
    before=_fields(_ROW),
    moved=st.dictionaries(st.sampled_from(sorted(_ROW)), _ANY, max_size=3),
)
def test_a_row_moved_on_from_a_passed_row_passes_only_when_every_check_does(
    before: dict[str, Any], moved: dict[str, Any]
) -> None:
    """passed_as_moved(after, before) implies run_problem(after) finds nothing.

    ``before`` is checked first (only a passed row counts); ``after`` changes up
    to three fields to any value (hostile ones included), as an append's row
    changes ``next_seq``, ``last_chain`` and ``updated_at``.
    """
    from redrive.storage._validate import passed_as_moved

    row = RunRecord(**before)
    after = attrs.evolve(row, **moved)
    if run_problem(row) is None and passed_as_moved(after, row):
        assert _row_field_problem(after) is None


def test_an_append_checks_the_row_it_moves_on_without_the_full_field_test(
    monkeypatch: Any,
) -> None:
    """The row after an append of checked frames is not put through the field test again."""
    from redrive.frames import GENESIS, make_frame
    from redrive.storage import _validate
    from redrive.storage._checks import appended
    from redrive.storage._validate import run_problem

    row = RunRecord(run_id="r", last_chain=GENESIS, input_fp=_HEX, created_at=1.0, updated_at=1.0)
    assert run_problem(row) is None
    frame = make_frame(run_id="r", seq=0, kind="note", name="n", payload={}, prev_chain=GENESIS)
    calls: list[RunRecord] = []
    real = _validate._row_fields_fine
    monkeypatch.setattr(_validate, "_row_fields_fine", lambda r: calls.append(r) or real(r))
    after = appended(row, "r", [frame], expected_seq=0, update=None, epoch=None)
    assert after.next_seq == 1 and calls == [] and run_problem(after) is None


#: any value a hostile file's field could decode to
_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=examples(default=200, ci=200, thorough=5_000), deadline=None)
@given(
    field=st.sampled_from(sorted(_ROW)),
    value=_ANY,
)
def test_a_row_field_of_any_shape_is_a_problem_or_fine_never_a_crash(
    field: str, value: Any
) -> None:
    """A run row read from a hostile file may hold any value in any field (a list as its
    status): the full check names a problem or passes it, and never raises."""
    row = attrs.evolve(RunRecord(run_id="r", last_chain=_HEX, input_fp=_HEX), **{field: value})
    problem = run_problem(row)
    assert problem is None or problem.startswith(f"{field}:"), problem


@settings(max_examples=examples(default=200, ci=200, thorough=5_000), deadline=None)
@given(field=st.sampled_from(sorted(_FRAME)), value=_ANY)
def test_a_frame_field_of_any_shape_is_a_problem_or_fine_never_a_crash(
    field: str, value: Any
) -> None:
    """A frame read from a hostile file may hold any value in any field (a list as its kind):
    the full check names a problem or passes it, and never raises."""
    frame = Frame(
        run_id="r", seq=1, kind="note", name="n", key="", payload=b"\x80", chain=_HEX, at=1.5
    )
    problem = _frame_field_problem(attrs.evolve(frame, **{field: value}))
    assert problem is None or problem.startswith(f"{field}:"), problem
