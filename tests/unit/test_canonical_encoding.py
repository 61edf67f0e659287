"""Canonical encoding: equal values encode alike (decimals), and map keys that would
collide or overflow are a TypeError naming the path."""

from __future__ import annotations

import decimal
import enum

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redrive.frames import call_key, canonical, decode, encode

D = decimal.Decimal


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
