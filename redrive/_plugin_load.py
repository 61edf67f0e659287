"""Loading a recording into a test's journal: each file read and checked once.

Part of :mod:`redrive.pytest_plugin` (see its docstring). A replayed test
pays for its recording once: the ``.rdj`` file is opened one time, every
record, field and the chain checked by :class:`~redrive.storage.rdj.RdjJournal`,
and its frames go into the test's memory journal as they are
(:func:`~redrive.storage.load_checked`), not checked again by a copy
and an append.

The checked frames are kept for the session, keyed by the file's path and
a hash of its bytes (:data:`CACHE`): a recording loaded again (a rerun, a
fixture's phase, ``pytest --count``) is decoded once, and a file changed on
disk has another hash, so it is read anew. Each test gets a journal of its
own; only the frozen frames are shared, so one test's replay never consumes
another's steps. The cache holds at most :data:`CACHE_BYTES` of files.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import pytest
import xxhash

from ._plugin_modes import _text

if TYPE_CHECKING:
    from redrive.frames import Frame
    from redrive.storage import MemoryJournal, RunRecord

__all__ = ["CACHE", "CACHE_BYTES", "load_recording"]

#: The most bytes of recording files whose checked frames a session keeps.
CACHE_BYTES = 64 * 1024 * 1024


@attrs.frozen
class _Checked:
    """One recording file as read and checked: its run row and its frames."""

    record: RunRecord
    frames: tuple[Frame, ...]
    size: int


@attrs.define
class _Cache:
    """The checked recordings of a session: ``(path, xxh3-128 of the bytes) -> _Checked``."""

    held: dict[tuple[str, bytes], _Checked] = attrs.Factory(dict)
    size: int = 0
    reads: int = 0  # files read and checked (a miss)

    def put(self, key: tuple[str, bytes], checked: _Checked) -> None:
        while self.held and self.size + checked.size > CACHE_BYTES:
            oldest = next(iter(self.held))
            self.size -= self.held.pop(oldest).size
        if checked.size <= CACHE_BYTES:
            self.held[key] = checked
            self.size += checked.size


#: The session's cache (in ``config.stash``: it ends with the session).
CACHE = pytest.StashKey[_Cache]()


def load_recording(config: pytest.Config, path: Path, journal: MemoryJournal) -> str:
    """Put the run recorded in ``path`` into ``journal``; return its run id.

    Raises:
        JournalCorruptError / JournalFormatError: as :class:`~redrive.storage.rdj.RdjJournal`.
        AppendConflictError: ``journal`` already holds a run with the recording's id.
    """
    from redrive.storage import load_checked
    from redrive.storage.rdj import RdjJournal, import_run

    if _text(path):
        return import_run(path, journal).run_id
    cache = config.stash.setdefault(CACHE, _Cache())
    data = path.read_bytes()
    key = (str(path), xxhash.xxh3_128_digest(data))
    checked = cache.held.get(key)
    if checked is None:
        # the bytes hashed are the bytes checked (the file is read once); the replay
        # takes the payloads decoded while checking them (decoded once)
        source = RdjJournal(path, keep_payloads=True, data=data)
        frames = tuple(source.frames(source.run_id))
        cache.reads += 1
        checked = _Checked(record=source.header.run, frames=frames, size=len(data))
        cache.put(key, checked)
    return load_checked(checked.record, checked.frames, journal).run_id
