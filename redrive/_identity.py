"""Objects remembered by identity while they live: the memo of a check an immutable object passed.

A frozen object (a :class:`~redrive.frames.Frame`, a run row) that passed a
check passes it again: the record path remembers it under a key made of its
``id()`` (and what else the check depended on) and skips the second check.
An ``id()`` is reused once its object is gone, so each entry holds a weak
reference, counts only while it still points at the very object asked
about, and is dropped when its object dies (the reference's callback). This
is what :class:`weakref.WeakValueDictionary` does, without its Python-level
wrapper around every store and look-up (a few of those per recorded step).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Remembered"]

T = TypeVar("T")


class Remembered(Generic[T]):
    """Objects remembered by a key while they live (a check they passed, by identity).

    Thread-safe under the GIL: each operation is a few dict operations; a drop
    racing a store can only remove a live entry, which makes the next look-up
    a miss (the full check runs again), never a false hit.
    """

    __slots__ = ("_drop", "_keys", "_refs")

    def __init__(self) -> None:
        refs: dict[Hashable, weakref.ref[T]] = {}
        keys: dict[int, Hashable] = {}  # id of a held reference -> its key

        def drop(ref: weakref.ref[T]) -> None:  # the object died: forget its entry
            key = keys.pop(id(ref), None)
            if key is not None and refs.get(key) is ref:
                refs.pop(key, None)

        self._refs = refs
        self._keys = keys
        self._drop: Callable[[weakref.ref[T]], None] = drop

    def holds(self, key: Hashable, obj: T) -> bool:
        """True when ``obj`` itself (not an equal object, nor a dead one) is held under ``key``."""
        ref = self._refs.get(key)
        return ref is not None and ref() is obj

    def add(self, key: Hashable, obj: T) -> None:
        """Remember ``obj`` under ``key`` while it lives (it must support weak references)."""
        ref = weakref.ref(obj, self._drop)
        old = self._refs.get(key)
        if old is not None:
            self._keys.pop(id(old), None)
        self._refs[key] = ref
        self._keys[id(ref)] = key

    def discard(self, key: Hashable) -> None:
        """Forget what is held under ``key`` (nothing when nothing is)."""
        ref = self._refs.pop(key, None)
        if ref is not None:
            self._keys.pop(id(ref), None)

    def clear(self) -> None:
        """Forget everything held (tests start from nothing)."""
        self._refs.clear()
        self._keys.clear()

    def __len__(self) -> int:
        """How many objects are held."""
        return len(self._refs)
