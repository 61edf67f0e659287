"""Hostile bytes only ever give ValueError; equal values encode alike; deltas are type-strict."""

from __future__ import annotations

import contextlib
import decimal
import enum
import subprocess
import sys
from typing import Any

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import redrive
from redrive.frames import MAX_DEPTH, PrefixRef, call_key, canonical, decode, encode
from redrive.replay._delta import compress, expand, expand_frames

D = decimal.Decimal


def _prefix(count: int, tail: list[Any]) -> msgpack.ExtType:
    return msgpack.ExtType(9, msgpack.packb([count, tail]))


def _nested_prefixes(depth: int) -> bytes:
    tail: list[Any] = []
    for _ in range(depth):
        tail = [_prefix(0, tail)]
    return msgpack.packb(_prefix(0, tail))  # type: ignore[no-any-return]


def test_deep_prefix_nesting_is_a_value_error_not_a_crash() -> None:
    """A 1.4 KB value nesting ext 9 in ext 9 200 times raises ValueError (it used to segfault)."""
    script = (
        "import sys\n"
        "from redrive.frames import decode\n"
        "try:\n"
        "    decode(sys.stdin.buffer.read())\n"
        "except ValueError as exc:\n"
        "    print('ValueError', exc)\n"
    )
    for depth in (200, 3000):
        done = subprocess.run(
            [sys.executable, "-c", script],
            input=_nested_prefixes(depth),
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (depth, done.returncode, done.stderr[-500:])
        assert done.stdout.startswith(b"ValueError"), done.stdout


def test_prefix_inside_prefix_is_refused() -> None:
    """Even one ext 9 inside another is refused: redrive never writes that shape."""
    with pytest.raises(ValueError, match="prefix reference inside a prefix reference"):
        decode(_nested_prefixes(1))
    assert decode(_nested_prefixes(0)) == PrefixRef(0, [])


def test_depth_is_counted_through_prefix_references() -> None:
    """Nesting inside a prefix reference's tail counts toward the 256-level limit."""
    deep: Any = 0
    for _ in range(MAX_DEPTH - 5):
        deep = [deep]
    value = {"a": {"b": {"c": {"d": {"e": {"f": {"g": _prefix(0, [deep])}}}}}}}
    with pytest.raises(ValueError, match="nested deeper"):
        decode(msgpack.packb(value))
    assert decode(msgpack.packb({"m": _prefix(1, [deep])}))["m"].count == 1


@pytest.mark.parametrize(
    ("code", "data"),
    [
        (8, msgpack.packb([10**12, 0, 0])),  # timedelta OverflowError
        (8, msgpack.packb([1.5, 0, 0])),  # not ints
        (8, msgpack.packb([True, 0, 0])),
        (8, msgpack.packb([1, 2])),
        (8, b"\x93\x01\x02"),
        (7, b"9" * 5000),  # too many digits
        (7, b"12x"),
        (6, b"1e99999999999999999999999"),  # InvalidOperation
        (6, b"\xff"),  # UnicodeDecodeError
        (5, b"short"),
        (1, b"2026-13-45"),
        (4, b"25:00"),
        (9, msgpack.packb([-1, []])),
        (9, msgpack.packb([True, []])),
        (9, msgpack.packb([1, {}])),
        (9, msgpack.packb([1])),
        (9, b"\xc1"),
        (42, b""),
    ],
)
def test_hostile_ext_payloads_give_value_error(code: int, data: bytes) -> None:
    """Each malformed ext payload (overflow, bad text, wrong shape) is a ValueError."""
    with pytest.raises(ValueError, match=f"ext type {code}"):
        decode(msgpack.packb([msgpack.ExtType(code, data)]))


_ext_codes = st.integers(min_value=0, max_value=12) | st.just(127)
_int64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_plain = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=8),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def _hostile_ext(draw: st.DrawFn, depth: int = 0) -> msgpack.ExtType:
    code = draw(_ext_codes)
    inner: Any = draw(_plain)
    if depth < 3 and draw(st.booleans()):
        inner = [
            draw(st.integers(min_value=-2, max_value=5)),
            [draw(_hostile_ext(depth + 1)), inner],
        ]
    triple = st.lists(_int64 | st.floats() | st.booleans(), min_size=3, max_size=3)
    data = draw(
        st.one_of(
            st.binary(max_size=40),
            st.just(msgpack.packb(inner)),
            st.builds(msgpack.packb, triple),  # timedelta-shaped (days, seconds, micros)
            st.text(max_size=12).map(str.encode),  # decimal, big int, iso text
        )
    )
    return msgpack.ExtType(code, data)


@settings(max_examples=300, deadline=None)
@example(msgpack.packb(msgpack.ExtType(8, msgpack.packb([10**12, 0, 0]))))
@example(msgpack.packb(msgpack.ExtType(8, msgpack.packb([2**63, 0, 0]))))
@example(msgpack.packb(msgpack.ExtType(6, b"1e999999999999999999999")))
@example(_nested_prefixes(2))
@given(
    st.one_of(
        st.binary(max_size=64), st.builds(msgpack.packb, st.lists(_hostile_ext(), max_size=3))
    )
)
def test_decode_of_any_bytes_gives_a_value_or_value_error(data: bytes) -> None:
    """Random bytes and hostile ext values decode or raise ValueError, nothing else."""
    with contextlib.suppress(ValueError):
        decode(data)


def test_equal_decimals_encode_alike() -> None:
    """Decimals that are equal give the same bytes, zeros and NaNs included, without raising."""
    assert encode(D("1.0")) == encode(D("1.00")) == encode(D("1"))
    assert encode(D("100")) == encode(D("1E+2")) == encode(D("100.000"))
    assert encode(D("0")) == encode(D("-0")) == encode(D("0E-9")) == encode(D("-0.000"))
    assert encode(D("NaN")) == encode(D("-NaN")) == encode(D("sNaN")) == encode(D("NaN123"))
    assert encode(D("Infinity")) != encode(D("-Infinity"))
    assert call_key("t", {"x": D("1.0")}) == call_key("t", {"x": D("1.00")})
    assert encode(D("1.1")) != encode(D("1.01"))
    assert decode(encode(D("-12.3400"))) == D("-12.34")
    assert decode(encode(D("sNaN"))).is_qnan()
    # Pinned: ext 6 carrying the normalized text.
    assert encode(D("1.10")) == msgpack.packb(msgpack.ExtType(6, b"1.1"))
    assert encode(D("-100")) == msgpack.packb(msgpack.ExtType(6, b"-1E+2"))
    assert encode(D("Infinity")) == msgpack.packb(msgpack.ExtType(6, b"Infinity"))


@settings(max_examples=200, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False), st.integers(0, 12))
def test_decimal_bytes_ignore_trailing_zeros_and_context(value: D, zeros: int) -> None:
    """Scaling the coefficient by 10**k keeps the bytes; the decimal context never matters."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    padded = D((sign, (*digits, *([0] * zeros)), exponent - zeros))
    assert padded == value
    assert encode(padded) == encode(value)
    with decimal.localcontext(decimal.Context(prec=2, capitals=0)):
        assert encode(padded) == encode(value)
    assert decode(encode(value)) == value


class Letter(enum.Enum):
    A = "a"


class Number(enum.Enum):
    ONE = 1


def test_colliding_map_keys_are_a_type_error_naming_the_path() -> None:
    """An enum key that becomes the same key as another is refused, not silently dropped."""
    with pytest.raises(TypeError, match=r"args\.m: map keys .* both encode as 'a'"):
        canonical({"m": {Letter.A: 1, "a": 2}}, "args")
    with pytest.raises(TypeError, match=r"args\[0\]: map keys .* both encode as 1"):
        canonical([{1: "x", Number.ONE: "y"}], "args")
    assert canonical({Letter.A: 1, "b": 2}) == {"a": 1, "b": 2}


def test_out_of_range_int_keys_are_a_type_error_naming_the_path() -> None:
    """Int map keys beyond 64 bits raise the documented TypeError, not OverflowError."""
    with pytest.raises(TypeError, match=r"args\.m: map key 1180591620717411303424 is outside"):
        encode({"m": {2**70: 1}}, "args")
    with pytest.raises(TypeError, match="outside the 64-bit range"):
        encode({-(2**63) - 1: 1})
    assert decode(encode({2**64 - 1: 1, -(2**63): 2})) == {2**64 - 1: 1, -(2**63): 2}


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
