"""Prefix-delta encoding of model requests, so journals grow linearly (pure).

Every model request re-sends the conversation so far. A request frame stores
each list (``messages``, ``input``...) that extends the same list of the
previous request *of the same step name* as a :class:`~redrive.frames.PrefixRef`
(``count`` items from the previous request, then the new ``tail``). Keys and
matching use the full request, so the encoding never changes a match.
Resolving a request needs only the previous request of its name, so replay
memory stays bounded by one conversation, not by the journal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

from ..frames import Frame, Kind, PrefixRef, encode

__all__ = ["compress", "expand", "expand_frames"]

#: How deep into the request maps the lists are looked for.
MAX_DEPTH = 4
#: Lists shorter than this are stored whole.
MIN_PREFIX = 2


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` have the same canonical encoding, type-strictly.

    Python's ``==`` says ``1 == 1.0 == True``, but those are different bytes
    and different prompts; here bool, int and float (and list vs tuple, dict
    vs other mappings) are never the same. It may answer False for values
    that do encode alike (a NaN, ``-0.0``); that only costs a stored item.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, list | tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif isinstance(x, dict):
            if len(x) != len(y) or {(type(k), k) for k in x} != {(type(k), k) for k in y}:
                return False
            stack.extend((item, y[key]) for key, item in x.items())
        elif isinstance(x, float):
            if not (x == y and math.copysign(1.0, x) == math.copysign(1.0, y)):
                return False
        elif isinstance(x, _PLAIN):
            if x != y:
                return False
        elif _bytes_of(x) != _bytes_of(y) or _bytes_of(x) is None:
            return False
    return True


#: Types whose ``==`` is already type-strict and agrees with their encoding.
_PLAIN = (str, bytes, int, type(None))


def _bytes_of(value: Any) -> bytes | None:
    try:
        return encode(value)
    except TypeError:
        return None


def _same_items(value: list[Any], before: list[Any]) -> bool:
    """Whether ``value`` starts with exactly the items of ``before``."""
    return len(value) >= len(before) and all(
        _same(x, y) for x, y in zip(value, before, strict=False)
    )


def compress(previous: Any, current: Any, _depth: int = 0) -> Any:
    """Return ``current`` with lists that extend ``previous``'s as :class:`PrefixRef`.

    A list is a prefix only if its items are type-strictly the same values
    (``True``, ``1`` and ``1.0`` differ), so the stored request always
    expands to the one that was sent.
    """
    if _depth > MAX_DEPTH or not isinstance(current, dict) or not isinstance(previous, dict):
        return current
    out = {}
    for key, value in current.items():
        before = previous.get(key)
        if (
            isinstance(value, list)
            and isinstance(before, list)
            and len(before) >= MIN_PREFIX
            and len(value) >= len(before)
            and _same_items(value, before)
        ):
            out[key] = PrefixRef(len(before), value[len(before) :])
        elif isinstance(value, dict):
            out[key] = compress(before, value, _depth + 1)
        else:
            out[key] = value
    return out


def expand(previous: Any, current: Any, _depth: int = 0) -> Any:
    """Resolve the :class:`PrefixRef` values of ``current`` against ``previous``.

    Raises:
        ValueError: a reference to more items than the previous request had.
    """
    if isinstance(current, PrefixRef):
        if not isinstance(previous, list) or len(previous) < current.count:
            raise ValueError(
                f"prefix reference to {current.count} items, but the previous request has "
                f"{len(previous) if isinstance(previous, list) else 'no such list'}"
            )
        return previous[: current.count] + list(current.tail)
    if _depth > MAX_DEPTH or not isinstance(current, dict):
        return current
    prev = previous if isinstance(previous, dict) else {}
    return {key: expand(prev.get(key), value, _depth + 1) for key, value in current.items()}


def _resolved(previous: Any, current: Any, depth: int) -> Any:
    """:func:`expand` that returns ``current`` itself where it holds no :class:`PrefixRef`.

    Only maps are descended (a reference stands where a list stood, as a
    map's value: :func:`compress` puts it nowhere else); a map holding none
    is not copied, so a request stored in full costs one look at each map.
    """
    if depth > MAX_DEPTH:
        return current
    out: dict[Any, Any] | None = None
    for key, value in current.items():
        kind = type(value)
        if kind is PrefixRef:
            new: Any = expand(previous.get(key) if previous is not None else None, value)
        elif kind is dict:
            before = previous.get(key) if previous is not None else None
            new = _resolved(before if type(before) is dict else None, value, depth + 1)
            if new is value:
                continue
        else:
            continue
        if out is None:
            out = dict(current)
        out[key] = new
    return current if out is None else out


class Expander:
    """Tracks the last full model request per step name while frames are read in order."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}

    def request(self, frame: Frame, data: dict[str, Any]) -> dict[str, Any]:
        """Return the full payload of a ``model_request`` frame and remember it."""
        previous = self.last.get(frame.name)
        full: dict[str, Any] = _resolved(previous if type(previous) is dict else None, data, -1)
        self.last[frame.name] = full
        return full

    def stored(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Return the payload to journal for a new request, and remember the full one."""
        previous = self.last.get(name)
        self.last[name] = payload
        if previous is None:
            return payload
        return {key: compress(previous.get(key), value) for key, value in payload.items()}


def expand_frames(frames: Iterable[Frame]) -> Iterator[tuple[Frame, Any]]:
    """Yield ``(frame, decoded payload)`` for a run's frames in seq order, requests resolved.

    Use this (not ``Frame.data()``) to read model requests outside replay.

    Raises:
        ValueError: a prefix reference that the earlier frames cannot resolve.
    """
    expander = Expander()
    for frame in frames:
        data = frame.data()
        if frame.kind == Kind.MODEL_REQUEST and isinstance(data, dict):
            data = expander.request(frame, data)
        yield frame, data
