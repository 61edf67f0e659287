"""The canonical encoder's bytes are frozen: ``encode`` against a copy of the old implementation.

The oracle below is the encoder as it was before the step-cost work (issue 14,
item 5), copied verbatim and renamed ``_old_*`` (the leaf helpers it calls are
unchanged and imported). For arbitrary values the current :func:`encode`
gives the same bytes, or raises the same error type.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import math
import uuid
from collections.abc import Mapping
from typing import Any

import attrs
import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from redrive._canonical import (
    _EXT_BIGINT,
    _EXT_DATE,
    _EXT_DATETIME_AWARE,
    _EXT_DATETIME_NAIVE,
    _EXT_DECIMAL,
    _EXT_PREFIX,
    _EXT_STORED,
    _EXT_TIME,
    _EXT_TIMEDELTA,
    _EXT_UUID,
    _INT_MIN,
    _UINT_MAX,
    MAX_DEPTH,
    PrefixRef,
    StoredValue,
    _decimal_text,
    _ext,
    _is_unicode,
    _key_order,
    _NotPlain,
    _path_key,
    canonical,
    encode,
    pack_tree,
)
from tests.conftest import examples

# -- the oracle: redrive/_canonical.py at commit 2456847, verbatim but for the names ----------


def _old_plain(value: Any, depth: int) -> Any:
    """The canonical tree of a value made only of exact plain types, or raise _NotPlain.

    The common case of :func:`canonical` (a request or a payload: dicts with
    str keys, lists, str, int, float, bool, None, bytes), walked without
    building error paths, which :func:`canonical` only needs for an error.
    Everything else (subclasses, enums, big ints, a string that is not valid
    Unicode, too deep, mixed key types) raises :class:`_NotPlain` and takes the
    full walk, which gives the same result or the error naming the path.
    """
    kind = type(value)
    if kind is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _NotPlain from None
        return value
    if kind is dict:
        if depth >= MAX_DEPTH:
            raise _NotPlain
        depth += 1
        out = {}
        try:
            keys = sorted(value)
        except TypeError:
            raise _NotPlain from None
        for k in keys:
            if type(k) is not str or not (k.isascii() or _is_unicode(k)):
                raise _NotPlain
            v = value[k]
            t = type(v)
            if (t is str and v.isascii()) or t is bool or v is None:
                out[k] = v
            else:
                out[k] = _old_plain(v, depth)
        return out
    if kind is list or kind is tuple:
        if depth >= MAX_DEPTH:
            raise _NotPlain
        depth += 1
        return [v if (type(v) is str and v.isascii()) else _old_plain(v, depth) for v in value]
    if kind is int:
        if _INT_MIN <= value <= _UINT_MAX:
            return value
        raise _NotPlain
    if kind is float:
        if value != value:
            return math.nan
        return 0.0 if value == 0.0 else value
    if kind is bool or value is None or kind is bytes:
        return value
    raise _NotPlain


def _old_canonical(value: Any, path: str = "$", _depth: int = 0) -> Any:
    """Return ``value`` as a tree of canonical plain values.

    Args:
        value: any supported value (see the module docstring).
        path: the name of ``value`` used in error messages, e.g. ``"args"``.

    Returns:
        ``None``/bool/int/float/str/bytes, lists, dicts with sorted keys, and
        ``msgpack.ExtType`` for datetimes, UUIDs, decimals and big ints.

    Raises:
        TypeError: a value of an unsupported type, a dict key that is not
            ``str``/``int``, a string that is not valid Unicode, or nesting
            deeper than 256 levels; the message names the path.
    """
    try:
        return _old_plain(value, _depth)
    except _NotPlain:
        return _old_full(value, path, _depth)
    except RecursionError:  # the full walk counts depth and names the path
        return _old_full(value, path, _depth)


def _old_full(value: Any, path: str, _depth: int) -> Any:
    """The full walk of :func:`canonical` (every supported type, errors with paths)."""
    kind = type(value)
    # fast paths for the exact plain types that make up nearly every payload
    if kind is str:
        if value.isascii():
            return value
    elif kind is int:
        if _INT_MIN <= value <= _UINT_MAX:
            return value
    elif kind is bool or value is None:
        return value
    elif kind is dict and _depth < MAX_DEPTH and all(type(k) is str and k.isascii() for k in value):
        return {
            k: _old_canonical(
                value[k], path + "." + k if k.isidentifier() else _path_key(path, k), _depth + 1
            )
            for k in sorted(value)
        }
    elif kind is list and _depth < MAX_DEPTH:
        return [_old_canonical(item, f"{path}[{i}]", _depth + 1) for i, item in enumerate(value)]
    if _depth > MAX_DEPTH:
        raise TypeError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, msgpack.ExtType):  # a tree already made canonical: keep it so
        try:
            _ext(value.code, value.data, nested=False)
        except ValueError:
            raise TypeError(f"{path}: {value!r} is not a canonical ext value") from None
        return value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return _old_canonical(value.value, path, _depth + 1)
    if isinstance(value, int):
        if _INT_MIN <= value <= _UINT_MAX:
            return int(value)
        return msgpack.ExtType(_EXT_BIGINT, str(int(value)).encode())
    if isinstance(value, float):
        if math.isnan(value):
            return math.nan
        return 0.0 if value == 0.0 else float(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TypeError(f"{path}: string is not valid Unicode ({exc.reason})") from None
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, Mapping):
        items = []
        seen: dict[Any, Any] = {}
        for original, item in value.items():
            key = original
            while isinstance(key, enum.Enum):
                key = key.value
            if isinstance(key, bool) or not isinstance(key, str | int):
                raise TypeError(
                    f"{path}: map key {key!r} of type {type(key).__name__} is not str or int"
                )
            if isinstance(key, int):
                if not _INT_MIN <= key <= _UINT_MAX:
                    raise TypeError(
                        f"{path}: map key {key!r} is outside the 64-bit range"
                        f" [-2**63, 2**64 - 1]; use a str key"
                    )
                key = int(key)
            else:
                key = str(key)
                if not _is_unicode(key):
                    raise TypeError(
                        f"{path}: map key {key!r} is not valid Unicode (a lone surrogate); "
                        "decode the text properly or use another key"
                    )
            if key in seen:
                raise TypeError(
                    f"{path}: map keys {seen[key]!r} and {original!r} both encode as {key!r};"
                    " one would be lost, so give them distinct keys"
                )
            seen[key] = original
            items.append((key, _old_canonical(item, _path_key(path, key), _depth + 1)))
        items.sort(key=lambda kv: _key_order(kv[0]))
        return dict(items)
    if isinstance(value, list | tuple):
        return [_old_canonical(item, f"{path}[{i}]", _depth + 1) for i, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        elements = [_old_canonical(item, f"{path}{{}}", _depth + 1) for item in value]
        return sorted(elements, key=pack_tree)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None and value.utcoffset() is not None:
            utc = value.astimezone(_dt.UTC)
            return msgpack.ExtType(_EXT_DATETIME_AWARE, utc.isoformat().encode())
        return msgpack.ExtType(_EXT_DATETIME_NAIVE, value.replace(tzinfo=None).isoformat().encode())
    if isinstance(value, _dt.date):
        return msgpack.ExtType(_EXT_DATE, value.isoformat().encode())
    if isinstance(value, _dt.time):
        if value.tzinfo is not None:
            raise TypeError(f"{path}: time with tzinfo has no canonical form; use a datetime")
        return msgpack.ExtType(_EXT_TIME, value.isoformat().encode())
    if isinstance(value, _dt.timedelta):
        return msgpack.ExtType(
            _EXT_TIMEDELTA, pack_tree([value.days, value.seconds, value.microseconds])
        )
    if isinstance(value, uuid.UUID):
        return msgpack.ExtType(_EXT_UUID, value.bytes)
    if isinstance(value, StoredValue):
        return msgpack.ExtType(_EXT_STORED, value.data)
    if isinstance(value, PrefixRef):
        tail = _old_canonical(value.tail, f"{path}.tail", _depth + 1)
        return msgpack.ExtType(_EXT_PREFIX, pack_tree([int(value.count), tail]))
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(_EXT_DECIMAL, _decimal_text(value).encode())
    if attrs.has(type(value)):
        fields = {f.name: getattr(value, f.name) for f in attrs.fields(type(value))}
        return _old_canonical(fields, path, _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _old_canonical(fields, path, _depth + 1)
    dump = getattr(value, "model_dump", None)
    if callable(dump) and hasattr(type(value), "model_fields"):
        return _old_canonical(dump(mode="python"), path, _depth + 1)
    raise TypeError(
        f"{path}: cannot encode a value of type {type(value).__module__}.{type(value).__qualname__}"
        " canonically; pass plain data (dict/list/str/number), an attrs class, a dataclass or"
        " a pydantic model, or give the recorder a codec"
    )


def _old_encode(value: Any, path: str = "$") -> bytes:
    return pack_tree(_old_canonical(value, path))


# -- the property ------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Size(enum.IntEnum):
    S = 1
    XL = 2**70  # a big int behind an enum


class Tone(enum.StrEnum):
    WARM = "warm"
    SAME = "a"  # the same key as "a" once made canonical


@attrs.frozen
class Point:
    x: Any
    y: Any


@dataclasses.dataclass
class Box:
    inside: Any


_EDGES = st.sampled_from(
    [
        -0.0,
        0.0,
        math.nan,
        -math.nan,
        math.inf,
        -math.inf,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        2**64,
        -(2**63) - 1,
        10**40,
        True,
        False,
        "\ud800",
        "a\udfffb",
        "é",
        "日本",
        "\x00",
        "",
        b"",
        bytearray(b"ba"),
        Color.RED,
        Color.BLUE,
        Size.S,
        Size.XL,
        Tone.WARM,
        Tone.SAME,
        decimal.Decimal("1.10"),
        decimal.Decimal("-0"),
        decimal.Decimal("NaN"),
        _dt.datetime(2024, 1, 2, 3, 4, 5),
        _dt.datetime(2024, 1, 2, tzinfo=_dt.UTC),
        _dt.date(2024, 1, 2),
        _dt.time(1, 2),
        _dt.timedelta(days=1, microseconds=3),
        uuid.UUID(int=7),
        frozenset({1, "a"}),
        {2, 1},
    ]
)
_LEAVES = (
    _EDGES
    | st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(st.characters(codec=None), max_size=8)  # with lone surrogates
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
_KEYS = (
    st.sampled_from(
        ["a", "b", "", "é", "\ud800", 1, -1, 0, True, 2**64, Color.RED, Tone.SAME, Size.S]
    )
    | st.text(max_size=4)
    | st.integers(-(2**65), 2**65)
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(_KEYS, inner, max_size=5)
        | st.dictionaries(st.text(max_size=6), inner, max_size=5)  # the common case: str keys
        | st.builds(Point, inner, inner)
        | st.builds(Box, inner)
        | st.builds(StoredValue, st.binary(max_size=6))
        | st.builds(PrefixRef, st.integers(0, 3) | st.booleans(), st.lists(inner, max_size=3))
    ),
    max_leaves=24,
)


def _outcome(fn: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(value)
    except Exception as exc:
        return "error", type(exc)


@settings(max_examples=examples(default=150, ci=400, thorough=3000), deadline=None)
@given(_VALUES)
def test_encode_matches_the_frozen_encoder(value: Any) -> None:
    """The same bytes as the old encoder, or the same error type."""
    assert _outcome(encode, value) == _outcome(_old_encode, value)
    assert _outcome(lambda v: pack_tree(canonical(v)), value) == _outcome(_old_encode, value)


def test_nesting_at_and_beyond_the_limit_matches() -> None:
    """Depth 255, 256, 257 and far beyond: the same bytes or the same error type."""
    for depth in (MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 600):
        for leaf in ("x", 1.5, {"b": 1, "a": -0.0}):
            tree: Any = leaf
            for i in range(depth):
                tree = [tree] if i % 2 else {"k": tree}
            assert _outcome(encode, tree) == _outcome(_old_encode, tree), depth


def test_the_benchmark_frame_matches() -> None:
    """The 2 KB frame of benchmarks/floor.py (unsorted keys, a 0.0) encodes to the old bytes."""
    from benchmarks import workload as w

    frame = w.frame_2k()
    assert encode(frame) == _old_encode(frame)
