"""Frames and the canonical encoding (DESIGN invariant 8)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import math
import uuid
from typing import Any

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from redrive.frames import (
    GENESIS,
    Kind,
    call_key,
    canonical,
    decode,
    encode,
    make_frame,
    payload_problem,
)

from ..strategies import text, values


@given(values)
def test_same_value_same_bytes_and_key(value: Any) -> None:
    """Encoding a value twice gives the same bytes and the same key."""
    assert encode(value) == encode(value)
    assert call_key("tool", value) == call_key("tool", value)


@given(st.dictionaries(text, values, min_size=2, max_size=6), st.randoms())
def test_key_order_never_changes_the_key(mapping: dict[str, Any], rnd: Any) -> None:
    """Map key order does not change bytes or key."""
    items = list(mapping.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    assert encode(shuffled) == encode(mapping)
    assert call_key("t", shuffled) == call_key("t", mapping)


@given(st.lists(st.integers(), min_size=2, unique=True))
def test_list_order_changes_the_key(items: list[int]) -> None:
    """List order is significant."""
    assert call_key("t", items) != call_key("t", list(reversed(items)))


@given(values)
def test_decode_inverts_encode(value: Any) -> None:
    """decode(encode(x)) == x for the supported plain types."""
    assert decode(encode(value)) == value


def test_nested_key_order_inside_lists() -> None:
    """Maps nested in lists are sorted too."""
    assert encode([{"b": 1, "a": 2}]) == encode([{"a": 2, "b": 1}])


def test_float_forms() -> None:
    """-0.0 and 0.0 encode alike, every NaN encodes alike, ints and floats differ."""
    assert encode(-0.0) == encode(0.0)
    assert encode(float("nan")) == encode(-float("nan"))
    assert encode(1) != encode(1.0)
    assert encode(True) != encode(1)
    assert len(encode(0.5)) == 9  # always binary64
    assert math.isnan(decode(encode(float("nan"))))


def test_pinned_bytes() -> None:
    """The encoding is pinned: these bytes must never change (format version 1)."""
    value = {"b": [1, 2.5, "é"], "a": None, 3: b"\x00"}
    assert encode(value).hex() == "8303c40100a161c0a1629301cb4004000000000000a2c3a9"
    assert call_key("send_email", {"to": "a@b"}) == "665adf95e6d40f963e6e3e79f86ad203"
    assert len(call_key("x", 1)) == 32


def test_unicode_is_not_normalized_and_surrogates_refused() -> None:
    """NFC and NFD are different keys; lone surrogates are a TypeError with the path."""
    assert encode("\u00e9") != encode("e\u0301")
    with pytest.raises(TypeError, match=r"args\.s: string is not valid Unicode"):
        canonical({"s": "\ud800"}, "args")


class Color(enum.Enum):
    RED = "red"


@attrs.define
class Item:
    name: str
    when: Any


@dataclasses.dataclass
class Box:
    items: list[Item]


def test_rich_types() -> None:
    """Enums, attrs, dataclasses, tuples, sets, datetimes, UUIDs and decimals encode."""
    aware = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    value = {
        "color": Color.RED,
        "box": Box([Item("a", aware)]),
        "pair": (1, 2),
        "tags": {"b", "a"},
        "u": uuid.UUID(int=5),
        "d": decimal.Decimal("1.10"),
        "td": dt.timedelta(days=1, seconds=2),
        "big": 2**70,
    }
    out = decode(encode(value))
    assert out["color"] == "red"
    assert out["box"] == {"items": [{"name": "a", "when": aware}]}
    assert out["pair"] == [1, 2]
    assert out["tags"] == ["a", "b"]
    assert out["u"] == uuid.UUID(int=5)
    assert out["d"] == decimal.Decimal("1.10")
    assert out["td"] == dt.timedelta(days=1, seconds=2)
    assert out["big"] == 2**70
    assert encode({"tags": {"a", "b"}}) == encode({"tags": {"b", "a"}})


def test_unsupported_type_names_the_path() -> None:
    """Anything else is a TypeError naming the path."""
    with pytest.raises(TypeError, match=r"args\.items\[2\]\.when: cannot encode"):
        canonical({"items": [1, 2, Item("x", object())]}, "args")
    with pytest.raises(TypeError, match="map key"):
        canonical({(1, 2): 3}, "args")


def test_decode_rejects_garbage() -> None:
    """Malformed bytes give ValueError, never another exception."""
    for data in (b"", b"\xc1", encode([1, 2]) + b"\x00", b"\xd4\x63\x00", b"\x91" * 5000):
        with pytest.raises(ValueError):
            decode(data)


def test_frame_chain_links() -> None:
    """A frame's chain depends on the previous chain and on every field."""
    a = make_frame(
        run_id="r", seq=0, kind="run_start", name="run", payload={}, prev_chain=GENESIS, at=1.0
    )
    b = make_frame(
        run_id="r", seq=1, kind="note", name="n", payload={"x": 1}, prev_chain=a.chain, at=2.0
    )
    assert b.expected_chain(a.chain) == b.chain
    assert b.expected_chain(GENESIS) != b.chain
    changed = attrs.evolve(b, payload=encode({"x": 2}))
    assert changed.expected_chain(a.chain) != b.chain
    assert b.data() == {"x": 1}


class _Text(str):
    """A str subclass: a string to the schema, not of the exact type the one pass takes."""


_SCHEMA_FIELDS = [
    "turn", "step", "attempt", "read_only", "restart_safe", "partial", "blocked",
    "retryable", "idempotency_key", "event", "input_fp", "type", "module", "qualname",
    "entrypoint", "flags", "status", "error", "notes", "args", "other",
]  # fmt: skip
_SCHEMA_VALUES = st.one_of(
    st.integers(-2, 3),
    st.sampled_from([2**63 - 1, 2**63, True, False, None, 1.0, b"x", [], {}]),
    st.text(max_size=3),
    st.builds(_Text, st.text(max_size=3)),
)


@given(
    st.sampled_from([*(k.value for k in Kind), "error"]),
    st.dictionaries(st.sampled_from(_SCHEMA_FIELDS), _SCHEMA_VALUES, max_size=6),
)
@example("tool_start", {"turn": 2**63})  # one past the largest int
@example("model_request", {"turn": -1})
@example("note", {"step": True})
@example("tool_done", {"event": _Text("x")})  # a subclass: fine, by the ordered checks
def test_payload_problem_is_its_ordered_checks(kind: str, data: dict[str, Any]) -> None:
    """The one pass over a payload's fields finds a problem exactly where the ordered checks do.

    The kind: every frame kind with any mix of the checked fields, each holding
    an exact value, a near miss (a bool for an int, an int out of range) or a
    subclass, with the message of the first problem in the checks' order.
    """
    from redrive.frames import _ordered_problem

    assert payload_problem(kind, data) == _ordered_problem(kind, data)
