"""The canonical encoding of values (format version 1), and the hashes over it.

Public through :mod:`redrive.frames`; import the names from there.

Canonical encoding (format version 1)
-------------------------------------
:func:`canonical` turns a Python value into a tree of plain values;
:func:`encode` packs that tree into msgpack bytes. The same value gives the
same bytes on every machine and Python version:

* ``None``, ``bool``: themselves (``True`` is never the int 1).
* ``int``: msgpack int within 64 bits; larger ints as ext type 7 (decimal text).
* ``float``: always IEEE-754 binary64 (never float32); ``-0.0`` is written as
  ``0.0`` and every NaN as the one quiet NaN, so values that are equal or both
  NaN give the same bytes. ints and floats stay distinct (``1`` is not ``1.0``).
* ``str``: the exact code points, UTF-8. No Unicode normalization is applied
  (NFC and NFD spellings are different prompts to a model, and different
  keys); a string that is not valid Unicode (lone surrogates) is a TypeError.
* ``bytes``, ``bytearray``, ``memoryview``: msgpack bin.
* ``list``, ``tuple``: msgpack array (decoded as ``list``).
* ``set``, ``frozenset``: array sorted by each element's encoded bytes.
* ``dict`` (and any Mapping): map with keys sorted, ints before strings, ints
  by value and strings by code point; only ``str`` and ``int`` keys (ints
  within 64 bits); an ``enum.Enum`` key is its value, and two keys that
  become the same key (``{E.A: 1, "a": 2}`` with ``E.A.value == "a"``) are a
  TypeError rather than one silently dropped.
* ``datetime``: aware ones are converted to UTC, ext type 1 (ISO text);
  naive ones ext type 2; ``date`` ext 3; ``time`` ext 4; ``timedelta`` ext 8
  (days, seconds, microseconds); ``uuid.UUID`` ext 5 (16 bytes);
  ``decimal.Decimal`` ext 6 (text). Decimals that are equal give the same
  bytes: the text is of the value with trailing zeros stripped from its
  coefficient (like ``Decimal.normalize()`` but never rounded by the current
  context), in ``str()`` notation with a capital ``E`` (``1.10`` and ``1.1``
  are ``"1.1"``, ``100`` and ``1E+2`` are ``"1E+2"``); every zero is ``"0"``,
  every NaN (signed, signalling, with a payload) is ``"NaN"``, infinities are
  ``"Infinity"`` and ``"-Infinity"``. Decoding gives an equal ``Decimal``.
* :class:`PrefixRef` (internal): ext 9, a list given as a prefix of the
  previous model request's list plus a tail (see :mod:`redrive.replay._delta`).
  A prefix reference never nests inside another one (decoding refuses it).
* ``enum.Enum``: its value. attrs classes, dataclasses and pydantic models:
  a map of their fields (decoded as ``dict``).
* Anything else raises ``TypeError`` naming the path (``args.items[2].when``).

* :class:`StoredValue`: ext 10, its bytes as they are (see below).
* ``msgpack.ExtType`` of a known code (a tree already made canonical): itself.

Nothing is ever pickled, and decoding never imports or calls user code.
:func:`decode` takes untrusted bytes: whatever they hold, it returns a value
or raises ``ValueError`` (nesting is bounded across ext levels too).

Stored values (what a step hands back)
--------------------------------------
Keys are computed on the canonical form; the value a tool, a model callable,
a recorded value, an approval or ``recover()`` hands the loop is stored by
:func:`encode_value` instead, inside the frame as a :class:`StoredValue`
(ext 10), and the loop gets ``rebuild(decode_value(encode_value(v)))`` live as
well as on replay: the same type, an equal value, the same dict key order,
the same ``repr`` and the same ``json.dumps``. The supported set (exact types;
subclasses other than enums need a codec):

=============================  ==========================================================
value                          handed back as
=============================  ==========================================================
None, bool, str, bytes         itself (str must be valid Unicode)
int (any size)                 int (beyond 64 bits: ext 7, decimal text)
float                          float, bit for bit: -0.0, NaN, inf kept
list / tuple                   list (an array) / tuple (an array led by an empty ext 23)
dict                           dict, same key order (keys: any supported hashable value)
set / frozenset                set / frozenset (an array led by an empty ext 24 / 25)
bytearray                      bytearray (ext 28)
decimal.Decimal                Decimal, exponent and sign kept (``10.50`` stays ``10.50``; ext 22)
datetime.datetime              naive, or aware with its offset (ext 20: ISO text, zone, fold);
                               ``timezone`` (named too) and ``zoneinfo.ZoneInfo`` kept as such
datetime.date / time           date (ext 3) / time, naive or with a ``timezone`` (ext 21)
datetime.timedelta             timedelta (ext 8)
uuid.UUID                      UUID (ext 5)
enum.Enum member               the member (array: empty ext 26, ``module:QualName``, value),
                               rebuilt when its class is imported or registered, else a
                               TypeError
a class with a codec           ``decode(encode(obj))`` (array: empty ext 27, name, data);
                               see :func:`register_codec`
attrs / dataclass / pydantic   a dict of its fields, in field order (``result_type=`` or a
                               codec makes it the model again)
=============================  ==========================================================

Anything else (another tzinfo, a dict subclass, an object) is a ``TypeError``
at record time naming the JSON path; a tool's step is then journaled as
failed. Containers are plain msgpack arrays and maps (only leaves are ext
types holding text), so decoding is one msgpack call whatever the nesting.
Frames written before ext 10 existed hold results in the canonical form and
are read and replayed as they always were.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import math
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs
import msgpack
import xxhash

from ._canonical_decode import _ext as _ext
from ._canonical_decode import decode
from ._canonical_fast import fast_encode, fast_pack
from ._canonical_types import (
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
    MAX_DEPTH,
    PrefixRef,
    StoredValue,
)

__all__ = [
    "MAX_DEPTH",
    "PrefixRef",
    "StoredValue",
    "call_key",
    "canonical",
    "decode",
    "encode",
    "fingerprint",
    "hash_hex",
    "pack_tree",
]

T = TypeVar("T")

_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1


def _path_key(path: str, key: object) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


#: Context for rendering decimals: ``str()`` follows the current context's
#: ``capitals``, which must not change the canonical text.
_DECIMAL_TEXT = decimal.Context(capitals=1)


def _decimal_text(value: decimal.Decimal) -> str:
    """Return the one canonical text of ``value`` (see the module docstring)."""
    if value.is_nan():
        return "NaN"
    if value.is_infinite():
        return "-Infinity" if value.is_signed() else "Infinity"
    if value.is_zero():
        return "0"
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    strip = len(digits) - len(bytes(digits).rstrip(b"\x00"))
    if strip:
        digits = digits[:-strip]
        exponent += strip
    with decimal.localcontext(_DECIMAL_TEXT):
        return str(decimal.Decimal((sign, digits, exponent)))


def _key_order(key: object) -> tuple[int, Any]:
    return (0, key) if isinstance(key, int) else (1, key)


def _is_unicode(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _NotPlain(Exception):
    """Raised by :func:`_plain` for anything it does not handle (the full walk does)."""


def _plain(value: Any, depth: int) -> Any:
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
            elif (t is int and _INT_MIN <= v <= _UINT_MAX) or (t is float and v == v and v != 0.0):
                out[k] = v  # a number that is its own canonical form, without a call
            else:
                out[k] = _plain(v, depth)
        return out
    if kind is list or kind is tuple:
        if depth >= MAX_DEPTH:
            raise _NotPlain
        depth += 1
        return [
            v
            if (type(v) is str and v.isascii()) or (type(v) is int and _INT_MIN <= v <= _UINT_MAX)
            else _plain(v, depth)
            for v in value
        ]
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
    # what the writer puts in frames: a step's handed-back value, a request's prefix
    if kind is StoredValue:
        return msgpack.ExtType(_EXT_STORED, value.data)
    if kind is PrefixRef and type(value.count) is int:
        tail = _plain(value.tail, depth + 1)
        return msgpack.ExtType(_EXT_PREFIX, pack_tree([value.count, tail]))
    raise _NotPlain


def canonical(value: Any, path: str = "$", _depth: int = 0) -> Any:
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
        return _plain(value, _depth)
    except _NotPlain:
        return _canonical(value, path, _depth)
    except RecursionError:  # the full walk counts depth and names the path
        return _canonical(value, path, _depth)


def _canonical(value: Any, path: str, _depth: int) -> Any:
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
            k: canonical(
                value[k], path + "." + k if k.isidentifier() else _path_key(path, k), _depth + 1
            )
            for k in sorted(value)
        }
    elif kind is list and _depth < MAX_DEPTH:
        return [canonical(item, f"{path}[{i}]", _depth + 1) for i, item in enumerate(value)]
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
        return canonical(value.value, path, _depth + 1)
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
            items.append((key, canonical(item, _path_key(path, key), _depth + 1)))
        items.sort(key=lambda kv: _key_order(kv[0]))
        return dict(items)
    if isinstance(value, list | tuple):
        return [canonical(item, f"{path}[{i}]", _depth + 1) for i, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        elements = [canonical(item, f"{path}{{}}", _depth + 1) for item in value]
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
        tail = canonical(value.tail, f"{path}.tail", _depth + 1)
        return msgpack.ExtType(_EXT_PREFIX, pack_tree([int(value.count), tail]))
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(_EXT_DECIMAL, _decimal_text(value).encode())
    if attrs.has(type(value)):
        fields = {f.name: getattr(value, f.name) for f in attrs.fields(type(value))}
        return canonical(fields, path, _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return canonical(fields, path, _depth + 1)
    dump = getattr(value, "model_dump", None)
    if callable(dump) and hasattr(type(value), "model_fields"):
        return canonical(dump(mode="python"), path, _depth + 1)
    raise TypeError(
        f"{path}: cannot encode a value of type {type(value).__module__}.{type(value).__qualname__}"
        " canonically; pass plain data (dict/list/str/number), an attrs class, a dataclass or"
        " a pydantic model, or give the recorder a codec"
    )


def pack_tree(tree: Any) -> bytes:
    """Pack a tree already made canonical (by :func:`canonical`) into msgpack bytes."""
    fast = fast_pack(tree)  # compiled, for the plain types (the same bytes)
    if fast is not None:
        return fast
    return msgpack.packb(tree, use_bin_type=True, use_single_float=False)  # type: ignore[no-any-return]


def encode(value: Any, path: str = "$") -> bytes:
    """Return the canonical msgpack bytes of ``value``.

    Raises:
        TypeError: as :func:`canonical`.
    """
    fast = fast_encode(value)  # compiled, where it vouches for the same bytes
    if fast is not None:
        return fast
    # canonical() inlined: this runs for every frame and fingerprint
    try:
        tree = _plain(value, 0)
    except (_NotPlain, RecursionError):
        tree = _canonical(value, path, 0)
    return _packb(tree, use_bin_type=True, use_single_float=False)  # type: ignore[no-any-return]


_packb = msgpack.packb


def hash_hex(data: bytes) -> str:
    """Return xxh3-128 of ``data`` as 32 hex digits."""
    return xxhash.xxh3_128_hexdigest(data)


def call_key(name: str, arguments: Any, *, tree: bool = False) -> str:
    """Return the key of a call: xxh3-128 (32 hex digits) of canonical (name, arguments).

    Args:
        name: the step's name.
        arguments: the call's arguments.
        tree: ``arguments`` is already a canonical tree (what :func:`canonical`
            returns, or a part-for-part copy of one): it is packed as it is,
            without walking it again. The key is the same either way.

    Raises:
        TypeError: ``arguments`` cannot be encoded canonically.
    """
    if tree:
        return hash_hex(pack_tree([name, arguments]))
    fast = fast_encode([name, arguments])  # encode([name, arguments]) is the same bytes
    if fast is not None:
        return hash_hex(fast)
    return hash_hex(pack_tree([name, canonical(arguments, "args")]))


def fingerprint(value: Any) -> str:
    """Return xxh3-128 (32 hex digits) of the canonical encoding of ``value``."""
    return hash_hex(encode(value))
