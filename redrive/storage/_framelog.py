"""An append-only, fsynced record log: the durable write path of the DuckDB journal.

A DuckDB commit costs several fsyncs' worth of time; one append to a log file
plus one ``fdatasync`` is the floor for a durable write. The DuckDB journal
appends each mutation here (one record, one fsync) and moves records into
DuckDB in bulk at checkpoints, then empties the log.

File layout: the 8-byte magic ``RDLOG\\x00\\x01\\n``, then records of
``u32 big-endian body length | 8-byte xxh3-64 of the body | body`` where the
body is canonical msgpack. A torn record at the end (a write that never
returned) is cut off on open; a bad record followed by more data is
corruption and raises :class:`~redrive.errors.JournalCorruptError`.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from typing import Any, Final

import xxhash

from ..errors import JournalCorruptError, JournalFormatError
from ..frames import decode, encode

__all__ = ["FrameLog"]

MAGIC: Final = b"RDLOG\x00\x01\n"
_HEAD = struct.Struct(">I8s")
#: Largest record accepted on read (a guard against a damaged length field).
MAX_RECORD: Final = 256 * 1024 * 1024

_sync = getattr(os, "fdatasync", os.fsync)


class FrameLog:
    """An append-only log of canonical msgpack records with one fsync per append.

    Args:
        path: the log file (created when missing unless ``read_only``).
        read_only: never write; a missing file reads as empty.

    Raises:
        JournalFormatError: the file exists and is not a redrive log.
    """

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._fd: int | None = None
        if read_only:
            return
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if os.fstat(self._fd).st_size == 0:
            os.write(self._fd, MAGIC)
            _sync(self._fd)

    def records(self) -> Iterator[Any]:
        """Yield every complete record in order; cut a torn tail off (when writable).

        Raises:
            JournalFormatError: not a redrive log.
            JournalCorruptError: a damaged record that is not the last one.
        """
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        if not data:
            return
        if data[: len(MAGIC)] != MAGIC:
            raise JournalFormatError(
                f"{self.path} is not a redrive journal log (bad magic); move it away if it is "
                "not yours",
                path=self.path,
            )
        offset = len(MAGIC)
        good = offset
        while offset < len(data):
            if offset + _HEAD.size > len(data):
                break  # torn header
            length, digest = _HEAD.unpack_from(data, offset)
            start = offset + _HEAD.size
            end = start + length
            if length > MAX_RECORD or end > len(data):
                break  # torn body or a damaged length at the tail
            body = data[start:end]
            if xxhash.xxh3_64_digest(body) != digest:
                if end < len(data):
                    raise JournalCorruptError(
                        f"{self.path}: record at byte {offset} fails its checksum and more "
                        "records follow it; the log is damaged. Keep a copy, then move the log "
                        "away to open the journal without its last writes.",
                        source=self.path,
                        offset=offset,
                        reason="checksum",
                        last_good_seq=None,
                    )
                break
            try:
                record = decode(body)
            except ValueError as exc:
                raise JournalCorruptError(
                    f"{self.path}: record at byte {offset} is not canonical msgpack ({exc})",
                    source=self.path,
                    offset=offset,
                    reason="decode",
                    last_good_seq=None,
                ) from None
            yield record
            offset = end
            good = end
        if good < len(data) and self._fd is not None:
            os.ftruncate(self._fd, good)
            _sync(self._fd)

    def append(self, record: Any) -> int:
        """Append one record and fsync it; return the bytes written.

        Raises:
            OSError: the write or the fsync failed (disk full, I/O error); the
                log is cut back to its previous end so no partial record stays.
        """
        if self._fd is None:
            raise OSError(f"{self.path}: the journal log is open read-only")
        body = encode(record)
        blob = _HEAD.pack(len(body), xxhash.xxh3_64_digest(body)) + body
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            written = os.write(self._fd, blob)
            if written != len(blob):
                raise OSError(f"{self.path}: short write ({written} of {len(blob)} bytes)")
            _sync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):  # else the torn tail is cut off on next open
                os.ftruncate(self._fd, end)
            raise
        return len(blob)

    def size(self) -> int:
        """Return the log's size in bytes (0 when read-only and missing)."""
        if self._fd is not None:
            return os.fstat(self._fd).st_size
        try:
            return os.path.getsize(self.path)
        except FileNotFoundError:
            return 0

    def reset(self) -> None:
        """Empty the log (after its records were checkpointed elsewhere)."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, len(MAGIC))
        _sync(self._fd)

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
