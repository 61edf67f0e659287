"""A compiled fast path of the canonical encoder: ormsgpack, where it gives the canonical bytes.

:func:`fast_encode` packs a value with ormsgpack (Rust, sorted keys) and
returns the bytes only when they are certainly what the pure-Python reference
(:func:`redrive._canonical.encode`, which stays the definition) gives;
otherwise it returns None and the caller takes the reference path. It is a
shortcut, never a second definition: a Hypothesis property holds it to the
reference byte for byte on arbitrary and hostile values
(``tests/unit/test_canonical_fast.py``).

Why the bytes agree: for the exact plain types (``dict`` with ``str`` keys,
``list``, ``str``, ``bytes``, ``int`` within 64 bits, ``float``, ``bool``,
``None``) both write msgpack's smallest int form, float64 for every float,
str8/16/32 and bin8/16/32, and map keys in code-point order (ormsgpack sorts
``str`` keys by their UTF-8 bytes, which is code-point order). Everything
the canonical form treats specially is refused here:

* every other type (subclasses, enums, tuples, datetimes, UUIDs, big ints,
  dataclasses, stored values...) reaches ormsgpack's ``default`` hook
  (the ``OPT_PASSTHROUGH_*`` options), which refuses it; a non-``str`` map
  key and a string that is not valid Unicode are ormsgpack errors;
* ``-0.0`` and NaN (folded to ``0.0`` and the one quiet NaN by the
  reference) and any ext value (an ``ormsgpack.Ext`` a caller passed, which
  the reference refuses) are found in the output: a float64 whose first byte
  is ``0x80``, ``0x7f`` or ``0xff`` (also some infinities and extreme floats:
  they take the reference path, which costs time, not correctness), or an
  ext header byte anywhere; bytes found that way are taken only when
  ``msgpack`` (C) also packs the value, which it refuses for an
  ``ormsgpack.Ext`` (so a payload's bytes or non-ASCII text holding such
  a byte, as every stored value's payload does, keeps the fast path);
* nesting: ormsgpack refuses 256 levels and more, the reference 258 and more,
  so what ormsgpack packs the reference packs too.
"""

from __future__ import annotations

from typing import Any, Final, NoReturn

import msgpack
import ormsgpack

__all__ = ["fast_encode", "fast_pack"]

#: Every type but the exact plain ones goes to the ``default`` hook (which refuses it).
_PLAIN_ONLY: Final = (
    ormsgpack.OPT_PASSTHROUGH_BIG_INT
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_SUBCLASS
    | ormsgpack.OPT_PASSTHROUGH_TUPLE
    | ormsgpack.OPT_PASSTHROUGH_UUID
)
_OPTIONS: Final = ormsgpack.OPT_SORT_KEYS | _PLAIN_ONLY
_msgpack_packb = msgpack.packb

#: Ext header bytes (ext 8/16/32, fixext 1-16): an ext value anywhere refuses the bytes
#: (each looked for with ``int in bytes``: one ``memchr``).
_EXT_HEADS: Final = (0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8)
#: The float64 marker, and the first bytes after it of -0.0 and of every NaN.
_FLOAT64: Final = 0xCB
_FLOAT_SUSPECT: Final = frozenset({0x7F, 0x80, 0xFF})


class _Refused(Exception):
    """Raised by the ``default`` hook: the value is not of an exact plain type."""


def _refuse(value: Any) -> NoReturn:
    raise _Refused


def fast_encode(value: Any) -> bytes | None:
    """Return the canonical msgpack bytes of ``value``, or None to take the reference path.

    Args:
        value: any value.

    Returns:
        Exactly :func:`redrive._canonical.encode` of ``value`` when the
        compiled path can vouch for them; None otherwise (the reference then
        encodes it or raises the ``TypeError`` naming the path).
    """
    try:
        out: bytes = ormsgpack.packb(value, default=_refuse, option=_OPTIONS)
    except (TypeError, ValueError, _Refused, ormsgpack.MsgpackEncodeError):
        return None
    if any(map(out.__contains__, _EXT_HEADS)) and not _no_ext(value):  # memchr per byte
        return None  # an ext value (text or bytes that hold the byte are told apart)
    at = out.find(_FLOAT64)
    while at >= 0:
        if at + 1 < len(out) and out[at + 1] in _FLOAT_SUSPECT:
            return None
        at = out.find(_FLOAT64, at + 1)
    return out


def _no_ext(value: Any) -> bool:
    """True when ``value`` (which ormsgpack packed under ``_PLAIN_ONLY``) holds no ``Ext``.

    Only exact plain types and ``ormsgpack.Ext`` get past ormsgpack's hook;
    msgpack's compiled packer refuses the latter (``TypeError``), so one
    copy tells an ext header byte inside text or bytes from an ext value.
    """
    try:
        _msgpack_packb(value, use_bin_type=True)
    except (TypeError, ValueError):
        return False
    return True


def fast_pack(tree: Any) -> bytes | None:
    """Return ``msgpack.packb(tree)`` as :func:`redrive._canonical.pack_tree` packs it, or None.

    For a tree already canonical (or any tree: the bytes are msgpack's either
    way): dict order kept as it is (no sorting), floats as float64, ints in
    their smallest form, ``str`` and ``bytes`` as str and bin. Anything but the
    exact plain types (an ext value, a tuple, a subclass, a big int...) or a
    non-``str`` map key makes ormsgpack refuse, and the caller packs with
    msgpack. A Hypothesis property holds the two to the same bytes
    (``tests/unit/test_canonical_fast.py``).
    """
    try:
        out: bytes = ormsgpack.packb(tree, default=_refuse, option=_PLAIN_ONLY)
    except (TypeError, ValueError, _Refused, ormsgpack.MsgpackEncodeError):
        return None
    return out
