"""An append-only, fsynced record log: the durable write path of the DuckDB journal.

A DuckDB commit costs several fsyncs' worth of time; one append to a log file
plus one ``fdatasync`` is the floor for a durable write. The DuckDB journal
appends each mutation here (one record, one fsync) and moves records into
DuckDB in bulk at checkpoints, then empties the log.

File layout: the 8-byte magic ``RDLOG\\x00\\x01\\n``, then records of
``u32 big-endian body length | 8-byte xxh3-64 of the body | body`` where the
body is canonical msgpack of plain values (no ext types).

Reading streams the file record by record (memory bounded by the largest
record). A record that fails its checks is a *torn tail* (a write that never
returned) only when no valid record (length fits, checksum matches) starts
anywhere after it; only then is it cut off, and only when the log is open for
writing. Otherwise the log is damaged mid-file and reading raises
:class:`~redrive.errors.JournalCorruptError` without changing the file, since
the records after the damage are durable, acknowledged writes.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Iterator
from typing import Any, BinaryIO, Final

import msgpack
import xxhash

from ..errors import JournalCorruptError, JournalFormatError
from ..frames import encode

__all__ = ["FrameLog"]

MAGIC: Final = b"RDLOG\x00\x01\n"
_HEAD = struct.Struct(">I8s")
#: Largest record accepted on read (a guard against a damaged length field).
MAX_RECORD: Final = 256 * 1024 * 1024
#: Bytes read at a time while looking for a valid record after a damaged one.
_SCAN_CHUNK: Final = 1 << 16

_sync = getattr(os, "fdatasync", os.fsync)
#: The first bytes of every record body: a msgpack fixarray, then a fixstr header.
_BODY_START: Final = re.compile(rb"[\x91-\x9f][\xa1-\xbf]")
_TAG: Final = re.compile(rb"[a-z_]{1,31}")

#: What to do about a damaged log (never "throw it away": it holds durable writes).
ADVICE: Final = (
    "Keep a copy of the log and do not delete it: it may hold acknowledged writes (tool "
    "claims and results) that are not in the database yet; without them a tool could run "
    "twice. Stop the workers using this journal and inspect or report the file; to see what "
    "was already checkpointed, copy the database file alone (without its .rdlog) and run "
    "`redrive --journal COPY verify` or `redrive --journal COPY sql ...` on the copy."
)


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack ext type {code} in a log record (log records hold plain values)")


def _decode_record(body: bytes) -> Any:
    """Decode one log record body: plain msgpack values only.

    Raises:
        ValueError: the bytes are not exactly one plain msgpack value.
    """
    try:
        return msgpack.unpackb(
            body, raw=False, strict_map_key=False, ext_hook=_no_ext, use_list=True
        )
    except (
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
        ValueError,
        TypeError,
        OverflowError,
        RecursionError,
        UnicodeDecodeError,
    ) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from None


def _is_record_at(f: BinaryIO, offset: int, size: int) -> bool:
    """Return whether a record whose length fits and whose checksum matches starts at ``offset``."""
    f.seek(offset)
    head = f.read(_HEAD.size)
    if len(head) < _HEAD.size:
        return False
    length, digest = _HEAD.unpack(head)
    if length == 0 or length > MAX_RECORD or offset + _HEAD.size + length > size:
        return False
    return bool(xxhash.xxh3_64_digest(f.read(length)) == digest)


def _next_record(f: BinaryIO, start: int, size: int) -> int | None:
    """Return the offset of the first valid record starting at or after ``start``, or None.

    Every record body starts with the msgpack header of a list of 1 to 15
    items and a type tag of 1 to 31 letters (see :meth:`FrameLog.append`), so
    only the places where those bytes appear are candidates (found with a
    regular expression, in chunks read one at a time); a candidate counts when
    its length fits in the file and its checksum matches.
    """
    pos = start + _HEAD.size
    overlap = 2 + 31
    while pos < size:
        f.seek(pos)
        chunk = f.read(_SCAN_CHUNK + overlap)
        for match in _BODY_START.finditer(chunk, 0, min(len(chunk), _SCAN_CHUNK + overlap)):
            i = match.start()
            if i >= _SCAN_CHUNK:
                break
            tag = chunk[i + 2 : i + 2 + (chunk[i + 1] & 0x1F)]
            if len(tag) < (chunk[i + 1] & 0x1F) or not _TAG.fullmatch(tag):
                continue
            if _is_record_at(f, pos + i - _HEAD.size, size):
                return pos + i - _HEAD.size
        pos += _SCAN_CHUNK
    return None


def _check_shape(record: Any) -> None:
    """Raise ValueError unless ``record`` is a list of 1..15 items led by a tag of 1..31 letters."""
    if (
        not isinstance(record, list)
        or not 1 <= len(record) <= 15
        or not isinstance(record[0], str)
        or not _TAG.fullmatch(record[0].encode())
    ):
        raise ValueError(
            "a log record must be a list of 1 to 15 items whose first item is a type tag of "
            f"1 to 31 lowercase letters or underscores; got {type(record).__name__}"
        )


class FrameLog:
    """An append-only log of canonical msgpack records with one fsync per append.

    Args:
        path: the log file (created when missing unless ``read_only``).
        read_only: never write (a torn tail is skipped, not cut); a missing
            file reads as empty.

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
        """Yield every complete record in order; see :meth:`entries`."""
        for _offset, record in self.entries():
            yield record

    def entries(self) -> Iterator[tuple[int, Any]]:
        """Yield ``(byte offset, record)`` for every complete record, in order.

        A damaged record with no valid record anywhere after it is a torn
        tail: it ends the iteration and, when the log is writable, is cut
        off. Memory use is bounded by the largest record, not the file.

        Raises:
            JournalFormatError: not a redrive log.
            JournalCorruptError: a record fails its length or checksum check
                and a valid record follows it (the file is left untouched), or
                a record with a good checksum is not one plain msgpack value.
                Fields: ``source`` (the file), ``offset`` (bytes),
                ``record_index`` (0-based), ``reason``.
        """
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below; a generator holds it
        except FileNotFoundError:
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            if f.read(len(MAGIC)) != MAGIC:
                raise JournalFormatError(
                    f"{self.path} is not a redrive journal log (bad magic); move it away if it "
                    "is not yours",
                    path=self.path,
                )
            offset = len(MAGIC)
            index = 0
            while offset < size:
                body, reason = self._read_at(f, offset, size)
                if body is None:
                    self._torn(f, offset, size, index, reason)
                    return
                try:
                    record = _decode_record(body)
                except ValueError as exc:
                    raise JournalCorruptError(
                        f"{self.path}: record {index} at byte {offset} has a good checksum but "
                        f"is not a plain msgpack value ({exc}); the log was written by "
                        "something other than redrive or damaged before it was checksummed. "
                        + ADVICE,
                        source=self.path,
                        offset=offset,
                        record_index=index,
                        reason="decode",
                        last_good_seq=None,
                    ) from None
                yield offset, record
                offset += _HEAD.size + len(body)
                index += 1

    @staticmethod
    def _read_at(f: BinaryIO, offset: int, size: int) -> tuple[bytes | None, str]:
        """Return ``(body, "")`` for a good record at ``offset``, else ``(None, why not)``."""
        if offset + _HEAD.size > size:
            return None, f"a header of {size - offset} bytes, {_HEAD.size} expected"
        f.seek(offset)
        length, digest = _HEAD.unpack(f.read(_HEAD.size))
        if length > MAX_RECORD:
            return None, f"a length of {length} bytes, over the {MAX_RECORD}-byte limit"
        if offset + _HEAD.size + length > size:
            return None, f"a length of {length} bytes, past the end of the file ({size} bytes)"
        body = f.read(length)
        if xxhash.xxh3_64_digest(body) != digest:
            return None, "a checksum that does not match its bytes"
        return body, ""

    def _torn(self, f: BinaryIO, offset: int, size: int, index: int, reason: str) -> None:
        """Cut a torn tail at ``offset``, or raise when valid records follow it."""
        found = _next_record(f, offset + 1, size)
        if found is not None:
            raise JournalCorruptError(
                f"{self.path}: record {index} at byte {offset} has {reason}, and a valid "
                f"record follows it at byte {found}; the log is damaged in the middle, not "
                "torn at its end, so the records after the damage (acknowledged writes) "
                "cannot be read. The file was not changed. " + ADVICE,
                source=self.path,
                offset=offset,
                record_index=index,
                next_record_offset=found,
                reason="checksum" if "checksum" in reason else "length",
                last_good_seq=None,
            )
        if self._fd is not None:
            os.ftruncate(self._fd, offset)
            _sync(self._fd)

    def append(self, record: Any, *, sync: bool = True) -> int:
        """Append one record and fsync it; return the bytes written.

        Args:
            record: a list of 1 to 15 plain values whose first item is a
                type tag of 1 to 31 lowercase letters or underscores (the
                fixed start lets a damaged log be told from a torn one fast).
            sync: False skips the fsync: the record survives this process
                dying (it is in the OS), and the next synced append (whose
                fdatasync covers the file) makes it survive a machine crash.

        Raises:
            ValueError: ``record`` does not have that shape.
            OSError: the write or the fsync failed (disk full, I/O error); the
                log is cut back to its previous end so no partial record stays.
        """
        if self._fd is None:
            raise OSError(f"{self.path}: the journal log is open read-only")
        _check_shape(record)
        body = encode(record)
        blob = _HEAD.pack(len(body), xxhash.xxh3_64_digest(body)) + body
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            written = os.write(self._fd, blob)
            if written != len(blob):
                raise OSError(f"{self.path}: short write ({written} of {len(blob)} bytes)")
            if sync:
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
