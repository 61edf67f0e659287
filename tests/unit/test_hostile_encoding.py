"""Decoding hostile bytes (deep or nested prefix references, bad ext payloads, any bytes)
only ever gives a value or ValueError."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from typing import Any

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from redrive.frames import MAX_DEPTH, PrefixRef, decode
from tests.conftest import examples


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


@settings(max_examples=examples(default=60, ci=120, thorough=2000), deadline=None)
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


def _decoded(data: bytes) -> tuple[str, str]:
    try:
        return "ok", repr(decode(data))
    except ValueError as exc:
        return "error", str(exc)


def _walked(data: bytes) -> tuple[str, str]:
    """The reference: decode, then always walk the tree for its depth."""
    import msgpack

    from redrive._canonical_decode import _check_depth, _ext_hook

    try:
        value = msgpack.unpackb(
            data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
        )
        _check_depth(value)
    except ValueError as exc:
        return "error", str(exc)
    return "ok", repr(value)


@given(
    st.integers(MAX_DEPTH - 4, MAX_DEPTH + 4),
    st.sampled_from(["list", "dict", "prefix"]),
    st.text(max_size=300),
)
def test_depth_is_judged_as_a_full_walk_judges_it(depth: int, inner: str, filler: str) -> None:
    """decode skips the depth walk only where it cannot find anything: same value, same error.

    The kind: nesting around the bound, through maps, arrays and prefix
    references, next to text whose UTF-8 holds the header bytes that are counted.
    """
    node: Any = [filler]
    for level in range(depth):
        node = {"k": node, "t": filler} if inner == "dict" and level % 2 else [node]
    if inner == "prefix":  # ext 9: [count, tail]
        node = msgpack.ExtType(9, msgpack.packb([0, [node]], use_bin_type=True))
    data = msgpack.packb({"pad": filler, "top": node}, use_bin_type=True)
    assert _decoded(data) == _walked(data)


@example(MAX_DEPTH, "list", 2 * MAX_DEPTH, "a")  # at the bound: walked, no error
@example(MAX_DEPTH + 1, "dict", 2 * MAX_DEPTH, "a")  # past it: walked, the error
@example(MAX_DEPTH, "prefix", 2 * MAX_DEPTH, "é")
@example(MAX_DEPTH + 1, "list", 1, "a")  # short text: header bytes counted, then walked
@given(
    st.integers(MAX_DEPTH - 2, MAX_DEPTH + 2),
    st.sampled_from(["list", "dict", "prefix"]),
    st.integers(0, 3 * MAX_DEPTH),
    st.sampled_from(["a", "é", "\u0080"]),
)
def test_depth_beside_long_text_is_judged_as_a_full_walk_judges_it(
    depth: int, inner: str, pad: int, char: str
) -> None:
    """A few containers beside long text are walked at once: the same value, the same error.

    The kind: nesting around the bound next to text long enough (``pad`` times
    16 characters) that decode walks the tree instead of counting header bytes
    first, or just too short for that.
    """
    node: Any = ["x"]
    for level in range(depth):
        node = {"k": node} if inner == "dict" and level % 2 else [node]
    if inner == "prefix":  # ext 9: [count, tail]
        node = msgpack.ExtType(9, msgpack.packb([0, [node]], use_bin_type=True))
    data = msgpack.packb({"pad": char * 16 * pad, "top": node}, use_bin_type=True)
    assert _decoded(data) == _walked(data)


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_a_payload_nested_past_the_unpacker_names_why(depth: int) -> None:
    """msgpack's StackError has no message; the refusal still says why (it ended in ': ')."""
    from redrive._canonical_decode import decode

    data = b"\x91" * depth + b"\xc0"  # arrays of one, nested `depth` deep, around nil
    with pytest.raises(ValueError) as caught:
        decode(data)
    reason = str(caught.value).rsplit(":", 1)[-1].strip()
    assert reason, f"empty reason in {str(caught.value)!r}"
