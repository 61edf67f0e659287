"""Stored values: what a step hands back, kept faithfully (ext type 10).

See the "Stored values" section of :mod:`redrive._canonical` for the
supported set and the layout; keys stay computed on the canonical form there.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import sys
import uuid
import zoneinfo
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import msgpack

from ._canonical import (
    _DECIMAL_TEXT,
    _INT_MIN,
    _UINT_MAX,
    _path_key,
    canonical,
    pack_tree,
)
from ._canonical_decode import _ext_value, _ExtError, _untrusted, register_stored_unpack
from ._canonical_fast import fast_pack
from ._canonical_types import (
    _EXT_BIGINT,
    _EXT_DATE,
    _EXT_TIMEDELTA,
    _EXT_UUID,
    MAX_DEPTH,
    StoredValue,
)

__all__ = [
    "Tagged",
    "decode_value",
    "encode_value",
    "rebuild",
    "register_codec",
    "store",
    "unpack_value",
]

T = TypeVar("T")

# -- stored values: what a step hands back, kept faithfully ----------------------------------

_V_DATETIME = 20
_V_TIME = 21
_V_DECIMAL = 22
_V_TUPLE = 23
_V_SET = 24
_V_FROZENSET = 25
_V_ENUM = 26
_V_CODEC = 27
_V_BYTEARRAY = 28


@attrs.frozen
class Tagged:
    """An enum member or a codec's value, as decoded from a journal (not yet rebuilt).

    Decoding never calls user code; :func:`rebuild` turns these into the user's
    objects when a step hands a value back to the loop.

    Attributes:
        kind: ``"enum"`` or ``"codec"``.
        name: ``"module:QualName"`` of the enum class, or the codec's name.
        value: the enum member's value, or the codec's plain data.
    """

    kind: str
    name: str
    value: Any


@attrs.frozen
class _Codec:
    cls: type
    name: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


_CODECS_BY_TYPE: dict[type, _Codec] = {}
_CODECS_BY_NAME: dict[str, _Codec] = {}


def register_codec(
    cls: type[T],
    encode: Callable[[T], Any],
    decode: Callable[[Any], T],
    *,
    name: str | None = None,
) -> None:
    """Teach redrive to hand back instances of ``cls`` as themselves.

    A step (tool result, model response, recorded value) whose value holds an
    instance of exactly ``cls`` stores ``encode(instance)`` (any supported
    value) under the codec's name; live and on replay the loop gets
    ``decode(stored)``, so both see the same object shape. Registering a name
    again replaces its codec.

    Args:
        cls: the class (instances of subclasses are not covered).
        encode: instance -> a supported value (dicts, lists, str, numbers...).
        decode: that value -> an instance.
        name: the name journaled with the value (default ``"module:QualName"``);
            keep it stable across versions of your code.

    Raises:
        TypeError: ``cls`` is not a class, or ``encode``/``decode`` are not callable.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_codec: {cls!r} is not a class")
    if not callable(encode) or not callable(decode):
        raise TypeError("register_codec: encode and decode must be callable")
    codec = _Codec(cls, name or _class_name(cls), encode, decode)
    old = _CODECS_BY_TYPE.pop(cls, None)
    if old is not None:
        _CODECS_BY_NAME.pop(old.name, None)
    _CODECS_BY_TYPE[cls] = codec
    _CODECS_BY_NAME[codec.name] = codec


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _zone(tz: _dt.tzinfo | None, path: str) -> Any:
    """Return how a datetime's or time's tzinfo is journaled (None: naive or offset only)."""
    if tz is None or tz is _dt.UTC:
        return None
    if type(tz) is _dt.timezone:
        plain = _dt.timezone(tz.utcoffset(None))
        name = tz.tzname(None)
        return None if name == plain.tzname(None) else ["timezone", name]
    if type(tz) is zoneinfo.ZoneInfo and tz.key is not None:
        return ["zoneinfo", tz.key]
    raise TypeError(
        f"{path}: a tzinfo of type {type(tz).__module__}.{type(tz).__qualname__} cannot be"
        " handed back as itself; use datetime.timezone or zoneinfo.ZoneInfo"
    )


def _fields(value: Any) -> dict[str, Any] | None:
    if attrs.has(type(value)):
        return {f.name: getattr(value, f.name) for f in attrs.fields(type(value))}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump) and hasattr(type(value), "model_fields"):
        found = dump(mode="python")
        return found if isinstance(found, dict) else None
    return None


def _marked(code: int, *items: Any) -> tuple[Any, ...]:
    """An array whose first item marks what it holds (a tuple, set, enum member...)."""
    return (msgpack.ExtType(code, b""), *items)


def _value_tree(value: Any, path: str, depth: int) -> Any:
    """Return ``value`` as a msgpack tree that :func:`decode_value` rebuilds exactly.

    Containers stay msgpack arrays and maps (a tuple, a set, an enum member or a
    codec's value is an array whose first item is an empty ext of its kind), so
    decoding is one msgpack call whatever the nesting; leaves (dates, decimals...)
    are ext types holding text. Arrays are Python tuples here so that they can be
    map keys.
    """
    if depth > MAX_DEPTH:
        raise TypeError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is float or kind is bytes:
        return value
    if kind is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise TypeError(f"{path}: string is not valid Unicode ({exc.reason})") from None
        return value
    if kind is int:
        if _INT_MIN <= value <= _UINT_MAX:
            return value
        return msgpack.ExtType(_EXT_BIGINT, str(value).encode())
    if kind is list:
        return tuple(_value_tree(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
    if kind is dict:
        tree = {}
        for k, v in value.items():
            key = _value_tree(k, f"{path}{{key}}", depth + 1)
            try:
                hash(key)
            except TypeError:
                raise TypeError(f"{path}: map key {k!r} would not come back hashable") from None
            tree[key] = _value_tree(v, _path_key(path, k), depth + 1)
        return tree
    if kind is tuple:
        items = [_value_tree(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
        return _marked(_V_TUPLE, *items)
    codec = _CODECS_BY_TYPE.get(kind)
    if codec is not None:
        return _marked(_V_CODEC, codec.name, _value_tree(codec.encode(value), path, depth + 1))
    if isinstance(value, enum.Enum):
        return _marked(_V_ENUM, _class_name(kind), _value_tree(value.value, path, depth + 1))
    if kind is _dt.datetime or kind is _dt.time:
        zone = _zone(value.tzinfo, path)
        text = (value.replace(tzinfo=None) if zone and zone[0] == "zoneinfo" else value).isoformat()
        code = _V_DATETIME if kind is _dt.datetime else _V_TIME
        return msgpack.ExtType(code, pack_tree([text, zone, value.fold]))
    if kind is _dt.date:
        return msgpack.ExtType(_EXT_DATE, value.isoformat().encode())
    if kind is _dt.timedelta:
        return canonical(value, path)
    if kind is uuid.UUID:
        return msgpack.ExtType(_EXT_UUID, value.bytes)
    if kind is decimal.Decimal:
        with decimal.localcontext(_DECIMAL_TEXT):
            return msgpack.ExtType(_V_DECIMAL, str(value).encode())
    if kind is set or kind is frozenset:
        items = sorted(
            (_value_tree(item, f"{path}{{}}", depth + 1) for item in value), key=pack_tree
        )
        return _marked(_V_SET if kind is set else _V_FROZENSET, *items)
    if kind is bytearray:
        return msgpack.ExtType(_V_BYTEARRAY, bytes(value))
    fields = _fields(value)
    if fields is not None:
        return _value_tree(fields, path, depth + 1)
    raise TypeError(
        f"{path}: cannot journal a value of type {kind.__module__}.{kind.__qualname__}; hand back"
        " plain data (dict/list/tuple/str/number/bytes, datetime, date, time, timedelta,"
        " Decimal, UUID, an enum), an attrs class, a dataclass or a pydantic model (handed"
        " back as a dict: give the tool a result_type), or register a codec with"
        " redrive.register_codec"
    )


def encode_value(value: Any, path: str = "$") -> bytes:
    """Return the faithful msgpack bytes of a value a step hands back.

    Unlike :func:`encode` (the canonical form, for keys), dicts keep their key
    order and every supported type keeps its type (see the module docstring's
    table): :func:`decode_value` then :func:`rebuild` give an equal value of
    the same type, with the same ``repr``.

    Args:
        value: the value (a tool's result, a model's response, a recorded value).
        path: the value's name in error messages, e.g. ``"result"``.

    Returns:
        msgpack bytes (deterministic for a given value and key order).

    Raises:
        TypeError: a value outside the supported set; the message names the
            JSON path (``result.items[2].when``).
    """
    fast = fast_pack(value)  # exact plain types only: _value_tree changes none of them
    return fast if fast is not None else pack_tree(_value_tree(value, path, 0))


@attrs.frozen
class _Mark:
    """The decoded first item of a marked array (see :func:`_marked`)."""

    code: int


_MARKS = {code: _Mark(code) for code in (_V_TUPLE, _V_SET, _V_FROZENSET, _V_ENUM, _V_CODEC)}


def _leaf(code: int, data: bytes) -> Any:
    """Decode one leaf ext of a stored value (its data never holds another ext)."""
    if code in _MARKS:
        if data:
            raise ValueError("a marker with data")
        return _MARKS[code]
    if code in (_EXT_DATE, _EXT_UUID, _EXT_BIGINT, _EXT_TIMEDELTA):
        return _ext_value(code, data, nested=True)
    if code == _V_BYTEARRAY:
        return bytearray(data)
    if code == _V_DECIMAL:
        return decimal.Decimal(data.decode())
    if code in (_V_DATETIME, _V_TIME):
        text, zone, fold = msgpack.unpackb(data, raw=False)
        if not isinstance(text, str) or fold not in (0, 1):
            raise ValueError("malformed datetime")
        parsed: Any = (_dt.datetime if code == _V_DATETIME else _dt.time).fromisoformat(text)
        if zone is not None:
            if not (isinstance(zone, list) and len(zone) == 2 and isinstance(zone[1], str)):
                raise ValueError("malformed time zone")
            if zone[0] == "zoneinfo":
                tz: _dt.tzinfo = zoneinfo.ZoneInfo(zone[1])
            elif zone[0] == "timezone" and parsed.tzinfo is not None:
                tz = _dt.timezone(parsed.utcoffset(), zone[1])
            else:
                raise ValueError("malformed time zone")
            parsed = parsed.replace(tzinfo=tz)
        return parsed.replace(fold=fold)
    raise ValueError(f"unknown ext type {code}")


def _leaf_hook(code: int, data: bytes) -> Any:
    try:
        return _leaf(code, data)
    except Exception as exc:
        raise _ExtError(f"bad ext type {code} value: {type(exc).__name__}: {exc}") from None


def _revive(node: Any, depth: int) -> Any:
    """Turn a decoded tree's arrays into lists, and marked arrays into what they mark."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(node)
    if kind is tuple:
        if node and type(node[0]) is _Mark:
            code = node[0].code
            if code in (_V_ENUM, _V_CODEC):
                if len(node) != 3 or not isinstance(node[1], str):
                    raise ValueError("malformed enum or codec value")
                kind_name = "enum" if code == _V_ENUM else "codec"
                return Tagged(kind_name, node[1], _revive(node[2], depth + 1))
            items = [_revive(item, depth + 1) for item in node[1:]]
            return {_V_TUPLE: tuple, _V_SET: set, _V_FROZENSET: frozenset}[code](items)
        return [_revive(item, depth + 1) for item in node]
    if kind is dict:
        return {_revive(k, depth + 1): _revive(v, depth + 1) for k, v in node.items()}
    if kind is _Mark:
        raise ValueError("a marker outside its array")
    return node


#: Ext header bytes (ext 8/16/32, fixext 1-16): bytes without any of them hold no ext value.
_EXT_HEADS = (0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8)


def _too_deep(node: Any, depth: int) -> None:
    """Raise as :func:`_revive` does when a part of a plain tree sits deeper than MAX_DEPTH."""
    children: Any = node.values() if type(node) is dict else node
    if children and depth >= MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    for child in children:
        if type(child) is list or type(child) is dict:
            _too_deep(child, depth + 1)


def unpack_value(data: bytes) -> Any:
    """Unpack ext 10's bytes into the value's tree (enum and codec parts left :class:`Tagged`).

    Bytes with no ext header byte anywhere hold no marked array and no ext
    leaf: msgpack's own lists and dicts are then the tree, with no second walk
    (:func:`_revive`'s result is the same; text or bytes that merely hold such
    a byte take the full path, which costs time, not correctness).

    Raises:
        ValueError: malformed bytes (msgpack's own errors included).
    """
    if not any(map(data.__contains__, _EXT_HEADS)):  # one memchr a byte, no loop in Python
        plain = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
        if len(data) > MAX_DEPTH and (type(plain) is list or type(plain) is dict):
            _too_deep(plain, 0)  # shorter bytes cannot nest deeper
        return plain
    tree = msgpack.unpackb(
        data, raw=False, strict_map_key=False, ext_hook=_leaf_hook, use_list=False
    )
    return _revive(tree, 0)


def decode_value(data: bytes) -> Any:
    """Decode bytes written by :func:`encode_value` (safe on untrusted bytes).

    Enum members and codec values come back as :class:`Tagged` (decoding never
    calls user code); :func:`rebuild` makes them objects again.

    Raises:
        ValueError: the bytes are not one well-formed stored value.
    """
    return _untrusted("stored", lambda: unpack_value(data))


def store(value: Any, path: str = "$") -> tuple[StoredValue, Any]:
    """Pack ``value`` for a frame's payload; return it and what the loop gets.

    Returns:
        ``(StoredValue, rebuild(decode_value(bytes)))``: the payload part and
        the value handed back live, the same object shape a replay hands back.

    Raises:
        TypeError: as :func:`encode_value`, or as :func:`rebuild`.
    """
    data = encode_value(value, path)
    try:
        decoded = decode_value(data)
    except ValueError as exc:  # e.g. a dict key that decodes unhashable (a model as a key)
        raise TypeError(f"{path}: cannot be handed back as itself ({exc})") from None
    return StoredValue(data), rebuild(decoded, where=path)


def _resolve(tag: Tagged, where: str) -> Any:
    if tag.kind == "codec":
        codec = _CODECS_BY_NAME.get(tag.name)
        if codec is None:
            raise TypeError(
                f"{where}: the journal holds a value of codec {tag.name!r}, which is not"
                " registered here; call redrive.register_codec for it before replaying"
            )
        return codec.decode(tag.value)
    module_name, _, qualname = tag.name.partition(":")
    cls: Any = next(
        (c.cls for c in _CODECS_BY_NAME.values() if _class_name(c.cls) == tag.name), None
    )
    if cls is None:
        cls = sys.modules.get(module_name)
        for part in qualname.split("."):
            cls = getattr(cls, part, None) if cls is not None else None
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        raise TypeError(
            f"{where}: the journal holds a member of enum {tag.name!r}, which is not imported"
            f" here; import {module_name!r} before replaying (a journal never imports code)"
        )
    return cls(tag.value)


def rebuild(value: Any, *, where: str = "$") -> Any:
    """Return ``value`` (decoded from a journal) with enum members and codec values rebuilt.

    Args:
        value: a decoded value; one without :class:`Tagged` parts is returned as is.
        where: names the value in error messages (``"run 'r' seq 3: tool 'x' result"``).

    Raises:
        TypeError: an enum class that is not imported, or a codec that is not registered.
        Whatever a codec's ``decode`` or the enum's lookup raises.
    """
    if not _holds_tagged(value):
        return value  # the usual case: one walk that allocates nothing
    return _rebuild(value, where)


def _holds_tagged(value: Any) -> bool:
    """True when ``value`` is or holds a :class:`Tagged` part (what :func:`rebuild` replaces)."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return False
    if kind is Tagged:
        return True
    if kind is dict:
        for k, v in value.items():
            if type(v) is not str and _holds_tagged(v):
                return True
            if type(k) is not str and _holds_tagged(k):
                return True
        return False
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        return any(type(item) is not str and _holds_tagged(item) for item in value)
    return isinstance(value, Tagged)


def _rebuild(value: Any, where: str) -> Any:
    """:func:`rebuild`'s walk, for a value that holds :class:`Tagged` parts."""
    if isinstance(value, Tagged):
        return _resolve(Tagged(value.kind, value.name, rebuild(value.value, where=where)), where)
    kind = type(value)
    if kind is list:
        items = [rebuild(item, where=where) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if kind is dict:
        pairs = [(rebuild(k, where=where), rebuild(v, where=where)) for k, v in value.items()]
        same = all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True))
        return value if same else dict(pairs)
    if kind in (tuple, set, frozenset):
        items = [rebuild(item, where=where) for item in value]
        same = all(a is b for a, b in zip(items, value, strict=True))
        return value if same else kind(items)
    return value


register_stored_unpack(unpack_value)
