"""The bytes of a journal log: magic, salted record headers and checks, decoding, and scanning.

The file layout and how recovery tells a torn tail from damage are described
in :mod:`._framelog`, whose :class:`~._framelog.FrameLog` reads and writes
logs with these; it re-exports the public names.
"""

from __future__ import annotations

import re
import struct
from typing import Any, BinaryIO, Final

import msgpack
import xxhash

from ._limits import LOG_RECORD_LIMIT

#: Magic of a format-1 log (read, never written).
MAGIC_V1: Final = b"RDLOG\x00\x01\n"
#: Magic of a format-2 log; the 8-byte salt follows it.
MAGIC: Final = b"RDLOG\x00\x02\n"
_SALT: Final = 8
#: Bytes before the first record of a format-2 log.
START: Final = len(MAGIC) + _SALT
_HEAD = struct.Struct(">I8s")
#: Format-2 record header: marker, length, record number, body digest, header check.
_HEAD2 = struct.Struct(">4sIQ8s4s")
#: Largest record body, in bytes, written or read (the writer refuses larger ones).
MAX_RECORD: Final = LOG_RECORD_LIMIT
#: Bytes read at a time while looking for a valid record after a damaged one.
_SCAN_CHUNK: Final = 1 << 16
#: Smallest and largest growth of a log's preallocated zero tail, in bytes.
TAIL_MIN: Final = 1 << 16
TAIL_MAX: Final = 1 << 20


def tail_chunk(end: int) -> int:
    """Return the zeros to write after a record ending at byte ``end``: the tail's next chunk.

    As many bytes as the log holds, within :data:`TAIL_MIN` and
    :data:`TAIL_MAX`, rounded so the file ends on a 4 KB page. Zero-filling
    1 MB and fsyncing it took about 3.6 ms on the bench disk (8 µs per 2.3 KB
    record it makes room for); 64 KB keeps a small journal's log small.
    """
    grow = min(TAIL_MAX, max(TAIL_MIN, end))
    return -(end + grow) % 4096 + grow


def _zeros_from(f: BinaryIO, offset: int, size: int) -> bool:
    """Return whether bytes ``offset`` to ``size`` of ``f`` are all zeros (a preallocated tail)."""
    f.seek(offset)
    while offset < size:
        chunk = f.read(min(_SCAN_CHUNK, size - offset))
        if not chunk or chunk.count(0) != len(chunk):
            return False
        offset += len(chunk)
    return True


#: The first bytes of every record body: a msgpack fixarray, then a fixstr header.
_BODY_START: Final = re.compile(rb"[\x91-\x9f][\xa1-\xbf]")
_TAG: Final = re.compile(rb"[a-z_]{1,31}")


def _marker(salt: bytes) -> bytes:
    return xxhash.xxh3_64_digest(b"rdlog-marker" + salt)[:4]


def _body_digest(salt: bytes, number: int, body: bytes) -> bytes:
    seed = int.from_bytes(salt, "big") ^ number
    return xxhash.xxh3_64_digest(body, seed=seed)


def _head_check(salt: bytes, head: bytes) -> bytes:
    return xxhash.xxh3_64_digest(salt + head)[:4]


def record_bytes(salt: bytes, number: int, body: bytes) -> bytes:
    """Return the bytes of format-2 record ``number`` holding ``body`` in a log salted ``salt``."""
    head = _HEAD2.pack(_marker(salt), len(body), number, _body_digest(salt, number, body), b"")
    head = head[:-4]
    return head + _head_check(salt, head) + body


def _header_at(f: BinaryIO, offset: int, size: int, salt: bytes) -> tuple[int, int, bytes] | None:
    """Return ``(length, record number, body digest)`` of a good header at ``offset``, or None."""
    if offset + _HEAD2.size > size:
        return None
    f.seek(offset)
    head = f.read(_HEAD2.size)
    if len(head) < _HEAD2.size:
        return None
    mark, length, number, digest, check = _HEAD2.unpack(head)
    if mark != _marker(salt) or check != _head_check(salt, head[:-4]):
        return None
    return length, number, digest


def _later_record(f: BinaryIO, start: int, size: int, salt: bytes, index: int) -> int | None:
    """Return the offset of a good header numbered after ``index`` at or after ``start``, or None.

    Candidates are the places where this log's marker appears (found with
    ``bytes.find`` in chunks read one at a time); a candidate counts when its
    header check matches and its record number is greater than ``index``.
    """
    mark = _marker(salt)
    pos = start
    while pos < size:
        f.seek(pos)
        chunk = f.read(_SCAN_CHUNK + len(mark) - 1)
        i = chunk.find(mark)
        while 0 <= i < _SCAN_CHUNK:
            found = _header_at(f, pos + i, size, salt)
            if found is not None and found[1] > index:
                return pos + i
            i = chunk.find(mark, i + 1)
        pos += _SCAN_CHUNK
    return None


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


def _read_v1_at(f: BinaryIO, offset: int, size: int) -> tuple[bytes | None, str]:
    """Return ``(body, "")`` for a good format-1 record at ``offset``, else ``(None, why)``."""
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
