"""Decoding canonical msgpack bytes (untrusted: only ``ValueError`` comes out).

The inverse of :func:`redrive._canonical.encode`; see that module's docstring
for the format. Public through :mod:`redrive.frames`.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any, Final

import msgpack

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
    _MAX_TEXT,
    MAX_DEPTH,
    PrefixRef,
)


def _ext_value(code: int, data: bytes, *, nested: bool) -> Any:
    if code == _EXT_STORED:  # first: every response and tool result is one
        if not _STORED_UNPACK:  # pragma: no cover - redrive._stored registers it on import
            raise ValueError("a stored value (ext 10) met before redrive._stored was imported")
        return _STORED_UNPACK[0](data)
    if code == _EXT_DATETIME_AWARE:
        return _dt.datetime.fromisoformat(data.decode())
    if code == _EXT_DATETIME_NAIVE:
        return _dt.datetime.fromisoformat(data.decode())
    if code == _EXT_DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == _EXT_TIME:
        return _dt.time.fromisoformat(data.decode())
    if code == _EXT_UUID:
        return uuid.UUID(bytes=data)
    if code == _EXT_DECIMAL:
        return decimal.Decimal(data.decode())
    if code == _EXT_BIGINT:
        if len(data) > _MAX_TEXT:
            raise ValueError(f"big int longer than {_MAX_TEXT} digits")
        return int(data.decode())
    if code == _EXT_TIMEDELTA:
        days, seconds, micros = msgpack.unpackb(data, raw=False)
        if not all(type(part) is int for part in (days, seconds, micros)):
            raise ValueError("timedelta parts are not ints")
        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == _EXT_PREFIX:
        if nested:
            raise ValueError("a prefix reference inside a prefix reference")
        count, tail = msgpack.unpackb(
            data, raw=False, strict_map_key=False, ext_hook=_nested_ext_hook, use_list=True
        )
        if type(count) is not int or count < 0 or not isinstance(tail, list):
            raise ValueError("malformed prefix reference")
        return PrefixRef(count, tail)
    raise ValueError(f"unknown ext type {code}")


#: :func:`redrive._stored.unpack_value`, registered by that module when it is imported
#: (it is built on this one, so this one does not import it back).
_STORED_UNPACK: list[Callable[[bytes], Any]] = []


def register_stored_unpack(unpack: Callable[[bytes], Any]) -> None:
    """Register how a stored value (ext 10) unpacks (:func:`redrive._stored.unpack_value`)."""
    _STORED_UNPACK[:] = [unpack]


class _ExtError(ValueError):
    """A malformed ext value (its message already names the ext type)."""


def _ext(code: int, data: bytes, *, nested: bool) -> Any:
    try:
        return _ext_value(code, data, nested=nested)
    except _ExtError:
        raise
    except ValueError as exc:
        raise _ExtError(f"bad ext type {code} value: {exc}") from None
    except Exception as exc:
        # Untrusted bytes reach stdlib constructors here; whatever they raise
        # (OverflowError, RecursionError, MemoryError, InvalidOperation...)
        # means "not a canonical value", never a crash of the reader.
        raise _ExtError(f"bad ext type {code} value: {type(exc).__name__}: {exc}") from None


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_STORED and _STORED_UNPACK:
        # every response and tool result is one: unpacked without the two calls of
        # _ext and _ext_value (what they raise is raised the same way)
        try:
            return _STORED_UNPACK[0](data)
        except Exception:
            pass
    return _ext(code, data, nested=False)


def _nested_ext_hook(code: int, data: bytes) -> Any:
    return _ext(code, data, nested=True)


def decode(data: bytes) -> Any:
    """Decode canonical msgpack bytes written by :func:`encode`.

    Safe on untrusted bytes: nothing but ``ValueError`` comes out of it.

    Args:
        data: the bytes of exactly one value.

    Returns:
        The plain value (lists for arrays, dicts for maps).

    Raises:
        ValueError: the bytes are not one well-formed value (including extra
            bytes after it, unknown or malformed ext types, a prefix reference
            inside another one, nesting deeper than 256 levels counted
            through prefix references too).
    """
    try:
        value = msgpack.unpackb(
            data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
        )
    except Exception:  # the error text of _untrusted, on the rare path
        value = _untrusted(
            "canonical msgpack",
            lambda: msgpack.unpackb(
                data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
            ),
        )
    if (
        len(data) > MAX_DEPTH
        and not _checked_within(value, len(data) >> _WALK_SHIFT)
        and len(data) - len(data.translate(None, _HEADS)) > MAX_DEPTH
    ):
        # each level is a map or array header byte somewhere in the bytes (an ext's body
        # too): bytes with no more of those bytes than MAX_DEPTH cannot nest deeper
        _check_depth(value)
    return value


def decode_checked(data: bytes) -> Any:
    """:func:`decode` of bytes that already decoded once within the depth bound.

    For a frame that passed the journal's full check (its payload decoded by
    :func:`decode`, or proven to as the writer built it): the same value,
    without walking it for its depth again. Anything the unpacker raises
    takes :func:`decode` itself (same value or same ``ValueError``).
    """
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
        )
    except Exception:
        return decode(data)


#: A tree of at most ``len(data) >> _WALK_SHIFT`` children is walked for its depth at once
#: (a few containers of long text: the usual payload); counting the header bytes costs a
#: pass over every byte, walking costs a step per child.
_WALK_SHIFT: Final = 4


def _checked_within(value: Any, budget: int) -> bool:
    """:func:`_check_depth` of ``value`` if it has at most ``budget`` children in all.

    Returns:
        True when the whole tree was walked and no container sits deeper than
        :data:`MAX_DEPTH`; False when it has more children than ``budget``
        (nothing is decided: the caller checks as before).

    Raises:
        ValueError: as :func:`_check_depth`, for a container it met deeper than allowed.
    """
    return not isinstance(value, _NESTING) or _left_after(value, budget, 0) >= 0


def _left_after(node: Any, budget: int, depth: int) -> int:
    """The budget left after walking container ``node`` at ``depth`` (negative: gave up)."""
    if isinstance(node, dict):
        children: Any = node.values()
    elif isinstance(node, list):
        children = node
    else:  # a PrefixRef (only nesting values are walked)
        children = (node.tail,)
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    budget -= len(children)
    for child in children:
        if budget < 0:
            break
        kind = type(child)
        if (kind is dict or kind is list) or (kind not in _LEAVES and isinstance(child, _NESTING)):
            budget = _left_after(child, budget, depth + 1)
    return budget


#: Exact types that never nest (told apart by one set look-up, not an isinstance).
_LEAVES: Final = frozenset({str, bytes, int, float, bool, type(None)})


#: Every byte that starts a msgpack map or array (fixmap, fixarray, array 16/32, map 16/32).
_HEADS: Final = bytes(range(0x80, 0xA0)) + bytes((0xDC, 0xDD, 0xDE, 0xDF))


def _untrusted(what: str, unpack: Callable[[], Any]) -> Any:
    """Return ``unpack()``; whatever it raises on malformed bytes comes out as ValueError."""
    try:
        return unpack()
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        # msgpack's StackError carries no message: name what it means instead of nothing
        why = str(exc) or (
            "nested deeper than the unpacker allows"
            if isinstance(exc, msgpack.StackError)
            else type(exc).__name__
        )
        raise ValueError(f"not one {what} value: {why}") from None
    except ValueError as exc:
        raise ValueError(f"not a {what} value: {exc}") from None
    except Exception as exc:
        # msgpack itself may raise TypeError (unhashable map key), MemoryError,
        # RecursionError...; to callers all of these are malformed bytes.
        raise ValueError(f"not a {what} value: {type(exc).__name__}: {exc}") from None


#: The types whose values nest (what :func:`_check_depth` descends into).
_NESTING: Final = (dict, list, PrefixRef)


def _check_depth(value: Any, depth: int = 0) -> None:
    """Raise ValueError when a container sits deeper than :data:`MAX_DEPTH` (root: 0).

    Recursive over containers only (the C unpacker's own stack bounds the
    recursion well below Python's limit); leaves cost one type check.
    """
    if isinstance(value, dict):
        children: Any = value.values()
    elif isinstance(value, list):
        children = value
    elif isinstance(value, PrefixRef):
        children = (value.tail,)
    else:
        return
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    for child in children:
        if isinstance(child, _NESTING):
            _check_depth(child, depth + 1)
