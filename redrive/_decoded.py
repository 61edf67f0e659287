"""Payloads decoded and checked by a journal reader, handed once to the replay that reads them.

A replayed ``.rdj`` recording's payloads are decoded twice without this: once
by the reader that checks every frame on open (:mod:`redrive.storage.rdj`),
once more by the replay's step reader (:mod:`redrive.replay._steps`). A reader
asked to keep them (the pytest plugin's) leaves each decoded, schema-checked
payload here, keyed by the frame object's identity; the first reader of that
same frame object takes it (:func:`take`) instead of decoding the bytes again.

Handed out once: the taker owns the value as it would own a fresh decode
(nothing else holds it), so a caller that changes it changes no other
reader's copy. A frame that dies before anyone takes its payload takes the
entry with it (a weak reference's callback). A frame is frozen: its payload
bytes, hence their decoding, cannot change.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .frames import Frame

__all__ = ["keep", "take"]

#: ``id(frame) -> (weak reference to the frame, its decoded, checked payload map)``.
_KEPT: dict[int, tuple[weakref.ref[Frame], dict[str, Any]]] = {}


def _drop(ref: weakref.ref[Frame], key: int) -> None:
    held = _KEPT.get(key)
    if held is not None and held[0] is ref:
        del _KEPT[key]


def keep(frame: Frame, data: dict[str, Any]) -> None:
    """Leave ``data``, ``frame``'s payload as decoded and found well-formed, for one taker."""
    key = id(frame)
    _KEPT[key] = (weakref.ref(frame, lambda ref: _drop(ref, key)), data)


def take(frame: Frame) -> dict[str, Any] | None:
    """``frame``'s kept payload map, removed from the handoff; None when none is kept."""
    if not _KEPT:
        return None
    held = _KEPT.pop(id(frame), None)
    if held is None or held[0]() is not frame:
        return None
    return held[1]
