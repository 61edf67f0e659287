"""Path-level differences between recorded and replayed arguments (pure)."""

from __future__ import annotations

import enum
import reprlib
from typing import Any

import msgpack

from .._canonical_decode import decode
from .._stored import decode_value
from ._caller import caller_location

__all__ = [
    "ABSENT",
    "Absent",
    "caller_location",
    "diff_values",
    "format_diff",
    "short",
    "user_value",
]


class Absent(enum.Enum):
    """The type of :data:`ABSENT` (an enum, so it pickles and compares as itself)."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "<absent>"

    __str__ = __repr__


#: What a diff holds on the side where a map key or list item does not exist.
ABSENT = Absent.ABSENT
_MISSING: Any = ABSENT
_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = 6
_repr.maxdict = 6
_repr.maxlevel = 3


def _ext_value(ext: msgpack.ExtType) -> Any:
    """``ext`` as the value it encodes, read by the decoder that wrote it, else ``ext``.

    Canonical values (argument trees: datetimes, UUIDs, decimals, big ints;
    codes 1-10, :mod:`redrive._canonical_decode`) and leaves of a stored value
    (codes 20-28, :mod:`redrive._stored`) are packed back into one ext and
    decoded, so a ``Decimal`` prints as ``Decimal('1.10')``, never as
    ``ExtType(code=6, ...)``.
    """
    packed: bytes = msgpack.packb(ext, use_bin_type=True)
    try:
        return decode(packed)
    except ValueError:
        pass
    try:
        return decode_value(packed)
    except ValueError:
        return ext


def user_value(value: Any) -> Any:
    """``value`` with every msgpack ext in it decoded to the user's value (lists, dicts walked)."""
    if isinstance(value, msgpack.ExtType):
        return _ext_value(value)
    if isinstance(value, dict):
        return {user_value(k): user_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [user_value(v) for v in value]
    return value


def short(value: Any) -> str:
    """Return a bounded one-line repr of ``value`` as the user's value.

    Strings up to 80 characters; a msgpack ext is decoded first (:func:`user_value`).
    """
    if value is _MISSING:
        return "<absent>"
    return _repr.repr(user_value(value))


def _child(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def diff_values(
    recorded: Any, replayed: Any, path: str = "$", *, limit: int = 50
) -> list[tuple[str, Any, Any]]:
    """Return ``(path, recorded, replayed)`` for each leaf where two values differ.

    Maps are compared key by key, lists index by index (extra or missing
    items appear with ``<absent>`` on one side), so a one-character change in
    a long prompt is reported at the path of that message. At most ``limit``
    differences are returned.
    """
    out: list[tuple[str, Any, Any]] = []
    stack: list[tuple[str, Any, Any]] = [(path, recorded, replayed)]
    while stack and len(out) < limit:
        where, a, b = stack.pop()
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(set(a) | set(b), key=lambda k: (isinstance(k, str), str(k)))
            for key in reversed(keys):
                stack.append((_child(where, key), a.get(key, _MISSING), b.get(key, _MISSING)))
        elif isinstance(a, list) and isinstance(b, list):
            for i in reversed(range(max(len(a), len(b)))):
                stack.append(
                    (
                        f"{where}[{i}]",
                        a[i] if i < len(a) else _MISSING,
                        b[i] if i < len(b) else _MISSING,
                    )
                )
        elif (type(a) is not type(b) or a != b) and not (
            isinstance(a, float) and isinstance(b, float) and a != a and b != b
        ):
            out.append((where, user_value(a), user_value(b)))
    return out


def format_diff(diff: list[tuple[str, Any, Any]]) -> str:
    """Render a diff as lines ``$.path: 'recorded' -> 'replayed'``."""
    return "\n".join(f"  {path}: {short(a)} -> {short(b)}" for path, a, b in diff)
