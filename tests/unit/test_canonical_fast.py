"""The plain fast path of the canonical encoder gives exactly what the full walk gives."""

from __future__ import annotations

import math
from typing import Any

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from redrive._canonical import _canonical, canonical, pack_tree

#: the values where a fast path is most likely to differ, drawn often
_EDGES = st.sampled_from(
    [-0.0, math.nan, -math.nan, math.inf, 2**64, -(2**63) - 1, True, "\ud800", "é", b""]
)
_LEAVES = (
    _EDGES
    | st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)  # also outside the 64-bit range (ext type)
    | st.floats(allow_nan=True)  # NaN and -0.0 have one canonical form
    | st.text()  # includes lone surrogates: not valid Unicode, a TypeError
    | st.binary(max_size=8)
)
_KEYS = st.sampled_from(["a", "b", 1, True, 2**64, "\ud800"]) | st.text(max_size=4)


def _trees(
    leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[Any], max_leaves: int
) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.tuples(inner, inner)
            | st.dictionaries(keys, inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


_TREES = _trees(_LEAVES, _KEYS, 12)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", pack_tree(fn())
    except TypeError as exc:
        return "error", str(exc)


@given(_TREES)
def test_the_fast_path_agrees_with_the_full_walk(tree: Any) -> None:
    """Same bytes, or the same error naming the same path (the kind: any plain tree)."""
    assert _outcome(lambda: canonical(tree, "args")) == _outcome(
        lambda: _canonical(tree, "args", 0)
    )


def test_nan_and_negative_zero_take_one_form_on_the_fast_path() -> None:
    """The fast path folds every NaN and -0.0 as the full walk does."""
    folded = canonical({"a": [float("-nan"), -0.0]})
    assert math.isnan(folded["a"][0]) and math.copysign(1.0, folded["a"][1]) == 1.0
    assert pack_tree(folded) == pack_tree(_canonical({"a": [math.nan, 0.0]}, "$", 0))


def test_deep_nesting_is_refused_with_its_path_through_the_fast_path() -> None:
    """Too deep a tree of plain types still raises the full walk's error."""
    tree: Any = "leaf"
    for _ in range(300):
        tree = [tree]
    try:
        canonical(tree, "args")
    except TypeError as exc:
        assert "nested deeper than 256" in str(exc) and str(exc).startswith("args")
    else:
        raise AssertionError("a 300-deep tree was accepted")


def test_a_map_key_that_is_not_unicode_is_a_type_error_naming_the_path() -> None:
    """Found by the property above: a lone-surrogate key crashed msgpack with UnicodeEncodeError."""
    import pytest

    from redrive._canonical import encode

    with pytest.raises(TypeError, match=r"^args\.a: map key .* is not valid Unicode"):
        encode({"a": {"\ud800": 1}}, "args")


# -- the compiled path (ormsgpack) against the pure-Python reference -------------------------


class _StrKey(str):
    """A str subclass (as a key it must not pass for a plain str)."""


def _hostile_leaves() -> st.SearchStrategy[Any]:
    import datetime as dt
    import decimal
    import enum
    import uuid

    import ormsgpack

    from tests import json_strategies as js
    from tests import strategies as ts

    class Color(enum.Enum):
        RED = "red"

    return (
        _LEAVES
        | ts.scalars
        | js.scalars
        | st.sampled_from(
            [
                ormsgpack.Ext(1, b"x"),  # the reference refuses it: so must the fast path
                Color.RED,
                (1, 2),
                {1, 2},
                decimal.Decimal("1.10"),
                dt.timedelta(seconds=3),
                uuid.UUID(int=5),
                bytearray(b"ab"),
                _StrKey("k"),
                2**63,
                -(2**63),
                2**64 - 1,
                5e-324,
                -5e-324,
                1e308,
                float("inf"),
                "\u0500\u01c0",  # UTF-8 bytes that are ext headers in msgpack
            ]
        )
    )


_HOSTILE_KEYS = _KEYS | st.sampled_from([_StrKey("a"), "\u0500", "é", "z", "A"])
_HOSTILE_TREES = _trees(_hostile_leaves(), _HOSTILE_KEYS, 16)


def _encoded(value: Any) -> tuple[str, Any]:
    from redrive._canonical import encode

    try:
        return "ok", encode(value)
    except TypeError as exc:
        return "error", str(exc)


def _msgpack(tree: Any) -> bytes:
    """The reference packing of a canonical tree: msgpack's (pack_tree's shortcut matches it)."""
    packed: bytes = msgpack.packb(tree, use_bin_type=True, use_single_float=False)
    return packed


def _reference(value: Any) -> tuple[str, Any]:
    from redrive._canonical import _canonical

    try:
        return "ok", _msgpack(_canonical(value, "$", 0))
    except TypeError as exc:
        return "error", str(exc)


@given(_HOSTILE_TREES)
def test_the_compiled_encoder_gives_the_reference_bytes_or_steps_aside(tree: Any) -> None:
    """ormsgpack's bytes, when it gives any, are the reference's; encode() agrees with it.

    The kind: any value, hostile ones included (ext objects, subclasses, -0.0,
    NaN, big ints, sets, non-ASCII keys, text whose UTF-8 holds msgpack ext bytes).
    """
    from redrive._canonical import call_key, hash_hex
    from redrive._canonical_fast import fast_encode

    expected = _reference(tree)
    fast = fast_encode(tree)
    if fast is not None:
        assert expected == ("ok", fast)
    assert _encoded(tree) == expected
    named = _reference(["tool", tree])
    if named[0] == "ok":
        assert call_key("tool", tree) == hash_hex(named[1])


def test_the_compiled_encoder_takes_the_common_frame() -> None:
    """A model request frame of plain data is packed by the compiled path (not refused)."""
    from benchmarks.workload import model_request
    from redrive._canonical_fast import fast_encode

    frame = {"kind": "model_request", "seq": 7, "payload": model_request(7), "t": 0.25}
    assert fast_encode(frame) == _reference(frame)[1]


def test_deep_nesting_through_the_compiled_path_matches_the_reference() -> None:
    """At and around the depth bound, encode() accepts and refuses what the reference does."""
    for depth in (250, 255, 256, 257, 258, 300):
        tree: Any = 0
        for _ in range(depth):
            tree = [tree]
        assert _encoded(tree) == _reference(tree), depth


def _packed(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:
        return "error", type(exc).__name__


@given(_HOSTILE_TREES | _HOSTILE_TREES.map(lambda v: _canonical_or(v)))
def test_packing_a_tree_gives_msgpacks_bytes(tree: Any) -> None:
    """pack_tree (ormsgpack where it can) gives msgpack's bytes, or fails where msgpack fails.

    The kind: raw hostile trees (tuples, subclasses, sets, NaN payloads, big
    ints, ext objects) and canonical trees (with msgpack ext values in them).
    """
    from redrive._canonical_fast import fast_pack

    fast = fast_pack(tree)
    expected = _packed(lambda: _msgpack(tree))
    if fast is not None:
        assert expected == ("ok", fast)
    assert _packed(lambda: pack_tree(tree)) == expected


def _canonical_or(value: Any) -> Any:
    try:
        return canonical(value, "$")
    except TypeError:
        return value


def test_packing_keeps_the_bits_of_every_nan_and_of_negative_zero() -> None:
    """Floats are packed bit for bit as msgpack packs them (quiet, signalling, signed NaNs)."""
    import struct

    bits = ["7ff8000000000001", "7ff0000000000001", "fff8000000000000", "8000000000000000"]
    tree = [struct.unpack(">d", bytes.fromhex(b))[0] for b in bits]
    assert pack_tree(tree) == _msgpack(tree)


def test_an_ext_value_of_any_length_is_refused_by_the_fast_path() -> None:
    """Each ext header form (fixext 1-16, ext 8/16/32) in the packed bytes refuses them.

    The kind: an ``ormsgpack.Ext`` a caller passed, which the reference refuses
    (``TypeError``), packed by ormsgpack under each of the eight header bytes
    (one at a time: the scan must refuse any one of them).
    """
    import ormsgpack
    import pytest

    from redrive._canonical import encode
    from redrive._canonical_fast import fast_encode

    for size in (1, 2, 4, 8, 16, 3, 300, 70_000):  # fixext 1, 2, 4, 8, 16; ext 8, 16, 32
        value = {"a": "plain text", "x": ormsgpack.Ext(5, b"v" * size)}
        assert fast_encode(value) is None, size
        with pytest.raises(TypeError):
            encode(value)


def test_ext_header_bytes_inside_bytes_or_text_keep_the_fast_path() -> None:
    """A value whose bytes or text hold ext header bytes is no ext value: the fast path packs it.

    A journal log record holds a frame's payload bytes, and every stored value
    (a tool's result) is an ext inside them: such records took the reference
    walk (about 10 µs per tool step) though they hold only plain types.
    """
    from redrive._canonical import _canonical, _packb
    from redrive._canonical_fast import fast_encode

    value = ["frames", [b"\x82\xa6result\xc8\x07\xe3\n" + b"x" * 2000, "\u0500\u01c0", 1.5]]
    reference = _packb(_canonical(value, "$", 0), use_bin_type=True, use_single_float=False)
    assert fast_encode(value) == reference
