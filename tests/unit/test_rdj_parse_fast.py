"""The ``.rdj`` reader's one-expression parse of a frame record is the ordered checks' twin.

:func:`redrive.storage.rdj._format.parse_frame` takes the usual record (exact
types, every field in range) by one expression and sends anything else to the
ordered checks, which name the problem. Random records, hostile fields included
(bools, ints for times, NaN, upper-case hex, ``str`` subclasses, short arrays):
the fast path returns exactly the frame the ordered checks build, and never
accepts a record they refuse.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redrive.frames import Frame
from redrive.storage.rdj._format import _parse_frame_checked, parse_frame
from tests.conftest import examples


class _Str(str):
    """A str subclass (the fast path checks exact types)."""


_HEX = "0123456789abcdef" * 2
_VALID: list[st.SearchStrategy[Any]] = [
    st.integers(0, 2**63),  # seq
    st.sampled_from(["tool_start", "model_response", "note", "run_end"]),  # kind
    st.sampled_from(["t", "model:m", ""]),  # name
    st.sampled_from(["", _HEX]),  # key
    st.binary(max_size=4),  # payload
    st.just(_HEX),  # chain
    st.floats(0, 2e9),  # at
    st.integers(0, 2**63),  # epoch
]
_ANY = st.one_of(
    st.sampled_from([True, False, -1, 0, 1.5, float("nan"), float("inf"), None, b"x"]),
    st.sampled_from(["", "nope", _HEX.upper(), _HEX[:31], _HEX + "\n", _Str(_HEX), _Str("t")]),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def _records(draw: st.DrawFn) -> Any:
    """A record body as decoded: well-formed fields, then some replaced, or cut short."""
    fields = [draw(strategy) for strategy in _VALID]
    for index in draw(st.lists(st.integers(0, 7), max_size=2)):
        fields[index] = draw(_ANY)
    cut = draw(st.sampled_from([8, 8, 8, 7, 9]))
    return [*fields, 0][:cut]


def _checked(data: Any) -> Frame | str:
    try:
        return _parse_frame_checked("run-1", data)
    except (TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=examples(default=600, ci=600, thorough=20_000), deadline=None)
@given(data=_records())
def test_the_fast_parse_builds_what_the_ordered_checks_build(data: Any) -> None:
    """parse_frame(data) equals the ordered checks' frame, or raises as they do."""
    want = _checked(data)
    if isinstance(want, Frame):
        assert parse_frame("run-1", data) == want
    else:
        with pytest.raises((TypeError, ValueError)) as caught:
            parse_frame("run-1", data)
        assert f"{caught.type.__name__}: {caught.value}" == want


def test_the_usual_record_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record as redrive writes it never reaches the ordered checks (else nothing is saved)."""
    import redrive.storage.rdj._format as fmt

    def refuse(run_id: str, data: Any) -> Frame:
        raise AssertionError(f"the ordered checks ran for {data!r}")

    monkeypatch.setattr(fmt, "_parse_frame_checked", refuse)
    frame = fmt.parse_frame("run-1", [3, "tool_start", "lookup", _HEX, b"\x80", _HEX, 0.0, 0])
    assert (frame.seq, frame.kind, frame.key, frame.at) == (3, "tool_start", _HEX, 0.0)
