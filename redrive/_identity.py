"""Objects remembered by identity while they live: the memo of a check an immutable object passed.

A frozen object (a :class:`~redrive.frames.Frame`, a run row) that passed a
check passes it again: the record path remembers it under a key made of its
``id()`` (and what else the check depended on) and skips the second check.
An ``id()`` is reused once its object is gone, so each entry holds a weak
reference and counts only while it still points at the very object asked
about. This is what :class:`weakref.WeakValueDictionary` does, without its
Python-level bookkeeping on every store (about a fifth of a recorded step's
calls went there): dead entries are swept in bulk once the table has doubled.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

__all__ = ["Remembered"]

T = TypeVar("T")

#: Entries kept before the first sweep of dead ones.
_FIRST_SWEEP: Final = 128


class Remembered(Generic[T]):
    """Objects remembered by a key while they live (a check they passed, by identity).

    Thread-safe under the GIL: each operation is one or two dict operations;
    a sweep racing a store can only drop a live entry, which makes the next
    look-up a miss (the full check runs again), never a false hit.
    """

    __slots__ = ("_refs", "_sweep_at")

    def __init__(self) -> None:
        self._refs: dict[Hashable, weakref.ref[T]] = {}
        self._sweep_at = _FIRST_SWEEP

    def holds(self, key: Hashable, obj: T) -> bool:
        """True when ``obj`` itself (not an equal object, nor a dead one) is held under ``key``."""
        ref = self._refs.get(key)
        return ref is not None and ref() is obj

    def add(self, key: Hashable, obj: T) -> None:
        """Remember ``obj`` under ``key`` while it lives (it must support weak references)."""
        self._refs[key] = weakref.ref(obj)
        if len(self._refs) > self._sweep_at:
            self._sweep()

    def discard(self, key: Hashable) -> None:
        """Forget what is stored under ``key`` (nothing when nothing is)."""
        self._refs.pop(key, None)

    def __len__(self) -> int:
        """How many entries are held, dead ones not yet swept included."""
        return len(self._refs)

    def _sweep(self) -> None:
        """Drop the entries whose object is gone; sweep again once the table has doubled."""
        try:
            held = list(self._refs.items())
        except RuntimeError:  # another thread stored meanwhile: sweep at the next store
            return
        for key, ref in held:
            if ref() is None:
                self._refs.pop(key, None)
        self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._refs))
