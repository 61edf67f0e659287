"""The plain fast path of the canonical encoder gives exactly what the full walk gives."""

from __future__ import annotations

import math
from typing import Any

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
_TREES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_KEYS, inner, max_size=4)
    ),
    max_leaves=12,
)


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
