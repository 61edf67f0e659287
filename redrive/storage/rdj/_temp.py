"""The temporary file an export writes before renaming it over its target."""

from __future__ import annotations

import fcntl
import os

__all__ = ["export_temp"]


def export_temp(target: str) -> tuple[int, str]:
    """Open, lock and empty the one temporary file of exports to ``target``.

    Every export to ``target`` writes ``.<name>.rdj-export.tmp`` next to it,
    so an export killed half-way leaves at most that one file, and the next
    export to the same target reuses it (instead of leaving a new hidden file
    of full size at each kill). An exclusive ``flock`` keeps two exports to one
    target from writing it at once; the lock is taken on the file still at
    that path (a waiter whose file was renamed or removed meanwhile opens it
    again), and only then is the file emptied.

    Args:
        target: the export's destination path.

    Returns:
        ``(descriptor open for writing at offset 0, temporary path)``.

    Raises:
        OSError: the folder is not writable.
    """
    folder = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(folder, f".{os.path.basename(target)}.rdj-export.tmp")
    while True:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.stat(tmp)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                os.ftruncate(fd, 0)
                return fd, tmp
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
