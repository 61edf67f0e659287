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

from collections.abc import Iterable, Iterator
from typing import Any

from ..frames import Frame, Kind, PrefixRef

__all__ = ["compress", "expand", "expand_frames"]

#: How deep into the request maps the lists are looked for.
MAX_DEPTH = 4
#: Lists shorter than this are stored whole.
MIN_PREFIX = 2


def compress(previous: Any, current: Any, _depth: int = 0) -> Any:
    """Return ``current`` with lists that extend ``previous``'s as :class:`PrefixRef`."""
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
            and value[: len(before)] == before
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


class Expander:
    """Tracks the last full model request per step name while frames are read in order."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}

    def request(self, frame: Frame, data: dict[str, Any]) -> dict[str, Any]:
        """Return the full payload of a ``model_request`` frame and remember it."""
        previous = self.last.get(frame.name)
        full = {key: expand((previous or {}).get(key), value) for key, value in data.items()}
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
