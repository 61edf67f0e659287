"""The ext-free shortcut of :func:`redrive._stored.unpack_value` gives what the full walk gives."""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from redrive._canonical_types import MAX_DEPTH
from redrive._stored import _leaf_hook, _revive, encode_value, unpack_value
from tests.unit.test_handed_values import handed_values


def _reference(data: bytes) -> Any:
    """The full path: tuples from msgpack, every ext through the leaf hook, then the revive walk."""
    tree = msgpack.unpackb(
        data, raw=False, strict_map_key=False, ext_hook=_leaf_hook, use_list=False
    )
    return _revive(tree, 0)


def _outcome(fn: Any, data: bytes) -> tuple[str, str]:
    try:
        value = fn(data)
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {exc}"
    return "ok", f"{type(value).__name__}: {value!r}"


@given(handed_values)
def test_any_handed_value_unpacks_as_the_full_walk_unpacks_it(value: Any) -> None:
    """The kind: every stored value (with ext parts or without) comes back the same."""
    data = encode_value(value)
    assert _outcome(unpack_value, data) == _outcome(_reference, data)


_msgpack_int = st.integers(-(2**63), 2**64 - 1)  # what msgpack can pack at all
_plain = st.recursive(
    st.none() | st.booleans() | _msgpack_int | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3) | _msgpack_int | st.tuples(_msgpack_int), inner)
    ),
    max_leaves=10,
)


@given(_plain)
def test_hostile_plain_bytes_unpack_or_fail_as_the_full_walk(tree: Any) -> None:
    """Arbitrary msgpack (array map keys included): the same value or the same error."""
    data = msgpack.packb(tree, use_bin_type=True)  # a tuple key packs as an array
    assert _outcome(unpack_value, data) == _outcome(_reference, data)


@given(st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3), st.sampled_from(["list", "dict", "leaf"]))
def test_nesting_at_the_limit_is_judged_as_the_full_walk_judges_it(depth: int, inner: str) -> None:
    """At and around 256 levels, empty or holding a leaf: accepted or refused alike."""
    node: Any = {"k": 1} if inner == "dict" else [] if inner == "list" else [1]
    for _ in range(depth):
        node = [node]
    data = msgpack.packb(node, use_bin_type=True)
    assert _outcome(unpack_value, data) == _outcome(_reference, data)


def _walked(value: Any) -> tuple[str, Any]:
    """The full encoding walk (the definition): ``_value_tree`` then ``pack_tree``."""
    from redrive._canonical import pack_tree
    from redrive._stored import _value_tree

    try:
        return "ok", pack_tree(_value_tree(value, "$", 0))
    except TypeError as exc:
        return "error", type(exc).__name__


def _encoded(value: Any) -> tuple[str, Any]:
    try:
        return "ok", encode_value(value)
    except TypeError as exc:
        return "error", type(exc).__name__


_json_like = st.recursive(
    st.none()
    | st.booleans()
    | _msgpack_int
    | st.integers()
    | st.floats()
    | st.text()
    | st.binary()
    | st.characters(categories=["Cs"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=10,
)


@given(handed_values | _json_like)
def test_encode_value_gives_the_bytes_of_the_full_walk(value: Any) -> None:
    """The compiled shortcut of encode_value (exact plain types) packs what the walk packs."""
    assert _encoded(value) == _walked(value)


def test_a_plain_value_is_encoded_without_the_walk(monkeypatch: Any) -> None:
    """A tool result of plain data (the common case) is packed once, by compiled code."""
    import redrive._stored as stored

    def no_walk(*args: Any) -> Any:
        raise AssertionError("walked")

    monkeypatch.setattr(stored, "_value_tree", no_walk)
    value = {"ok": True, "ref": "000000001", "detail": "x" * 2000, "n": [1, 2.5, None, b"b"]}
    assert msgpack.unpackb(encode_value(value), raw=False) == value
