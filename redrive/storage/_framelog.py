"""An append-only, fsynced record log: the durable write path of the DuckDB journal.

A DuckDB commit costs several fsyncs' worth of time; one append to a log file
plus one ``fdatasync`` is the floor for a durable write. The DuckDB journal
appends each mutation here (one record, one fsync) and moves records into
DuckDB in bulk at checkpoints, then empties the log or rewrites it (atomically,
:meth:`FrameLog.rewrite`) with the records it keeps.

File layout (format 2): the 8-byte magic ``RDLOG\\x00\\x02\\n`` and an 8-byte
random *salt* drawn when the log is created or emptied, then records of a
28-byte header ``marker(4) | u32 length | u64 record number | body digest(8) |
header check(4)`` and the body (canonical msgpack of plain values, no ext
types). The marker and both checks are keyed by the salt, the record numbers
count 0, 1, 2... from the salt, and the header check covers the length.

Recovery is decided by structure, never by finding bytes that parse (a tool
result may hold the bytes of a valid record): a header with a good check is
trusted, so a record whose trusted length runs past the end of the file is a
torn tail, cut at once without looking further. Only a damaged header or body
makes the reader look for a record after it, and then only for a header with
this log's salt and a record number after the damaged one (copies of earlier
records inside a payload have lower numbers; the salt is not known to whoever
wrote the payload); when one exists the log is damaged mid-file and reading
raises :class:`~redrive.errors.JournalCorruptError` without changing the file,
since the records after the damage are durable, acknowledged writes. A torn
tail is cut only when the log is open for writing.

Format 1 logs (``RDLOG\\x00\\x01\\n``, no salt, 12-byte headers) are still read;
opening one for writing rewrites it in format 2 (same records, atomically).

The preallocated tail (issue 26): a writer does not append. It writes each
record over zeros it wrote (and fsynced) earlier past the log's end, growing
that zero tail a chunk at a time (:func:`._logformat.tail_chunk`: 64 KB up
to 1 MB) in the same write as the record that reaches it. An ``fdatasync``
of a write that changes no file size and fills no unwritten extent needs no
file-system journal commit: on ext4 it took about half the time of an
append's (PostgreSQL zero-fills its WAL segments for the same reason). So a
format-2 log may end in zeros: a reader takes a header of zeros followed
only by zeros to the end of the file as the end of the log (no cut, nothing
torn). Anything else after the last good record is read as before, so a
record torn inside the zero tail is a torn tail, and a zeroed header with a
later record after it is mid-file damage. :meth:`FrameLog.close` trims the
tail (no fsync: a crash before the trim is durable leaves zeros, which read
as the end), so a closed log, its copies and its exports hold no zeros; a
log left by a killed writer does, and every reader handles it. The records
are unchanged, so the format stays 2: a reader older than the zero tail
reads such a log whole and, when writable, cuts the zeros as a torn tail
(nothing is lost), and keeps appending after its records.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO, Final

from ..errors import JournalCorruptError, JournalFormatError, JournalWriteError
from ..frames import encode
from ._logformat import (
    _HEAD,
    _HEAD2,
    _SALT,
    MAX_RECORD,
    _body_digest,
    _check_shape,
    _decode_record,
    _header_at,
    _later_record,
    _next_record,
    _read_v1_at,
    _zeros_from,
    record_bytes,
    tail_chunk,
)
from ._logformat import _SCAN_CHUNK as _SCAN_CHUNK
from ._logformat import MAGIC as MAGIC
from ._logformat import MAGIC_V1 as MAGIC_V1
from ._logformat import START as START

__all__ = ["FrameLog", "MAX_RECORD", "record_bytes"]

_sync = getattr(os, "fdatasync", os.fsync)

#: What to do about a damaged log (never "throw it away": it holds durable writes).
ADVICE: Final = (
    "Keep a copy of the log and do not delete it: it may hold acknowledged writes (tool "
    "claims and results) that are not in the database yet; without them a tool could run "
    "twice. Stop the workers using this journal and inspect or report the file; to see what "
    "was already checkpointed, copy the database file alone (without its .rdlog) and run "
    "`redrive --journal COPY verify` or `redrive --journal COPY sql ...` on the copy."
)


def _crash_point(stage: str) -> None:
    """Nothing; crash tests replace it to kill the process at ``stage`` of a log rewrite."""


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
        #: the record number of the next append (None: not known until the log is read)
        self._next: int | None = None
        #: bytes of records (the offset of the next append; None: not known until read)
        self._end: int | None = None
        #: the file's size: from ``_end`` to here it holds zeros (the preallocated tail)
        self._cap = 0
        #: the header's salt as read (None: read it); _fresh and rewrite, which write one, clear it
        self._salt_read: bytes | None = None
        if read_only:
            return
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = self._cap = os.fstat(self._fd).st_size
        if size == 0 or (size == len(MAGIC_V1) and os.pread(self._fd, size, 0) == MAGIC_V1):
            self._fresh()
        elif os.pread(self._fd, len(MAGIC_V1), 0) == MAGIC_V1:
            self._upgrade()

    def _upgrade(self) -> None:
        """Rewrite a format-1 log in format 2 (same records, in order), atomically.

        The records are read (a torn tail cut, damage raised as usual), then
        written as by :meth:`rewrite`; a crash before the rename leaves the
        format-1 log as it was.
        """
        assert self._fd is not None
        self.rewrite([record for _offset, record in self.entries()], suffix=".upgrade.tmp")

    def rewrite(self, records: Sequence[Any], *, suffix: str = ".rewrite.tmp") -> None:
        """Replace the log's content with ``records`` (in order), atomically, with a new salt.

        The new log is written beside the old one (``<log><suffix>``), fsynced,
        renamed over it, and the folder is fsynced: a crash at any point leaves
        either the old log or the new one, whole. Writable logs only.

        Args:
            records: the records the log must hold (each as :meth:`append` takes).
            suffix: the temporary file's name suffix.

        Raises:
            OSError: a write, fsync or rename failed; the old log is left in
                place (and stays this object's log).
        """
        assert self._fd is not None
        salt = os.urandom(_SALT)
        tmp = self.path + suffix
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _crash_point("rewrite-opened")
            try:
                blob = [MAGIC + salt]
                blob.extend(
                    record_bytes(salt, number, encode(record))
                    for number, record in enumerate(records)
                )
                data = b"".join(blob)
                if os.write(fd, data) != len(data):
                    raise OSError(f"{tmp}: short write")
                os.fsync(fd)
            finally:
                os.close(fd)
            _crash_point("rewrite-written")
            os.replace(tmp, self.path)
        except BaseException:  # a failed rewrite leaves the old log and no temporary file
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _crash_point("rewrite-renamed")
        folder = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        self._next = len(records)
        self._end = self._cap = len(data)
        self._salt_read = None  # a new header

    def _fresh(self) -> None:
        """Empty the log and start it again in format 2 with a new salt (writable only)."""
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, MAGIC + os.urandom(_SALT), 0)
        _sync(self._fd)
        self._next = 0
        self._end = self._cap = START
        self._salt_read = None

    def records(self) -> Iterator[Any]:
        """Yield every complete record in order; see :meth:`entries`."""
        for _offset, record in self.entries():
            yield record

    def entries(self) -> Iterator[tuple[int, Any]]:
        """Yield ``(byte offset, record)`` for every complete record, in order.

        A torn tail (see the module docstring for how it is told from
        damage) ends the iteration and, when the log is writable, is cut off.
        Memory use is bounded by the largest record, not the file.

        Raises:
            JournalFormatError: not a redrive log.
            JournalCorruptError: the log is damaged mid-file (the file is left
                untouched), or a record with a good checksum is not one plain
                msgpack value. Fields: ``source`` (the file), ``offset``
                (bytes), ``record_index`` (0-based), ``reason``, and
                ``next_record_offset`` when a later record was found.
        """
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below; a generator holds it
        except FileNotFoundError:
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            magic = f.read(len(MAGIC))
            if magic == MAGIC_V1:
                yield from self._entries_v1(f, size)
                return
            salt = f.read(_SALT)
            if magic != MAGIC or len(salt) < _SALT:
                raise JournalFormatError(
                    f"{self.path} is not a redrive journal log (bad magic); move it away if it "
                    "is not yours",
                    path=self.path,
                )
            offset = START
            index = 0
            while offset < size:
                body, reason, resume = self._read2(f, offset, size, salt, index)
                if body is None:
                    if not _zeros_from(f, offset, size):  # zeros: the preallocated tail
                        self._torn2(f, offset, size, salt, index, reason, resume)
                    break
                yield offset, self._decoded(body, offset, index)
                offset += _HEAD2.size + len(body)
                index += 1
            self._next = index
            self._end = offset

    def _decoded(self, body: bytes, offset: int, index: int) -> Any:
        try:
            return _decode_record(body)
        except ValueError as exc:
            raise JournalCorruptError(
                f"{self.path}: record {index} at byte {offset} has a good checksum but "
                f"is not a plain msgpack value ({exc}); the log was written by "
                "something other than redrive or damaged before it was checksummed. " + ADVICE,
                source=self.path,
                offset=offset,
                record_index=index,
                reason="decode",
                last_good_seq=None,
            ) from None

    def _read2(
        self, f: BinaryIO, offset: int, size: int, salt: bytes, index: int
    ) -> tuple[bytes | None, str, int | None]:
        """Read format-2 record ``index`` at ``offset``.

        Returns ``(body, "", None)`` when good; ``(None, why, None)`` for a torn
        tail that needs no search; ``(None, why, start)`` for damage after
        which a later record is searched for from ``start``.
        """
        if offset + _HEAD2.size > size:
            return None, f"a header of {size - offset} bytes, {_HEAD2.size} expected", None
        found = _header_at(f, offset, size, salt)
        if found is None:
            return None, "a damaged header", offset + 1
        length, number, digest = found
        if number != index:
            raise JournalCorruptError(
                f"{self.path}: record {index} at byte {offset} is numbered {number}: a record "
                "is missing or repeated, so the log is damaged in the middle. The file was not "
                "changed. " + ADVICE,
                source=self.path,
                offset=offset,
                record_index=index,
                reason="sequence",
                last_good_seq=None,
            )
        if length > MAX_RECORD:
            raise JournalCorruptError(
                f"{self.path}: record {index} at byte {offset} declares {length} bytes, over "
                f"the {MAX_RECORD}-byte limit no redrive writer goes past. The file was not "
                "changed. " + ADVICE,
                source=self.path,
                offset=offset,
                record_index=index,
                reason="length",
                last_good_seq=None,
            )
        end = offset + _HEAD2.size + length
        if end > size:
            return (
                None,
                f"a length of {length} bytes, past the end of the file ({size} bytes)",
                None,
            )
        body = f.read(length)
        if _body_digest(salt, number, body) != digest:
            return None, "a checksum that does not match its bytes", end
        return body, "", None

    def _torn2(
        self,
        f: BinaryIO,
        offset: int,
        size: int,
        salt: bytes,
        index: int,
        reason: str,
        resume: int | None,
    ) -> None:
        """Cut a torn tail at ``offset``, or raise when a later record follows the damage."""
        found = None if resume is None else _later_record(f, resume, size, salt, index)
        self._cut_or_refuse(offset, index, reason, found)

    def _entries_v1(self, f: BinaryIO, size: int) -> Iterator[tuple[int, Any]]:
        """Read a format-1 log (see the module docstring)."""
        offset = len(MAGIC_V1)
        index = 0
        while offset < size:
            body, reason = _read_v1_at(f, offset, size)
            if body is None:
                self._torn(f, offset, size, index, reason)
                return
            yield offset, self._decoded(body, offset, index)
            offset += _HEAD.size + len(body)
            index += 1

    def _torn(self, f: BinaryIO, offset: int, size: int, index: int, reason: str) -> None:
        """Cut a torn format-1 tail at ``offset``, or raise when valid records follow it."""
        self._cut_or_refuse(offset, index, reason, _next_record(f, offset + 1, size))

    def _cut_or_refuse(self, offset: int, index: int, reason: str, found: int | None) -> None:
        """Cut the log at a bad record at ``offset``; refuse when a valid record follows it.

        Raises:
            JournalCorruptError: ``found`` (a later valid record's offset) is not None:
                the damage is mid-file, and the file is left as it is.
        """
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
            self._cap = offset

    def _salt(self) -> bytes:
        """Return the salt of this (writable, format-2) log, reading the log once (not per append).

        Raises:
            OSError: the log is a format-1 log still holding records (the
                journal empties it into the database on open).
        """
        assert self._fd is not None
        if self._next is None or self._end is None:
            for _ in self.entries():
                pass
        elif self._salt_read is not None:  # this object is the log's only writer
            return self._salt_read
        head = os.pread(self._fd, START, 0)
        if head[: len(MAGIC)] != MAGIC:
            if os.fstat(self._fd).st_size > len(MAGIC_V1):
                raise OSError(
                    f"{self.path}: a format-1 journal log still holding records; open the "
                    "journal (which moves them into the database) before writing"
                )
            self._fresh()
            head = os.pread(self._fd, START, 0)
        if self._next is None or self._end is None:
            self._next, self._end = 0, START
        self._salt_read = head[len(MAGIC) :]
        return self._salt_read

    def append(self, record: Any, *, sync: bool = True) -> int:
        """Append one record and fsync it; return the record's bytes.

        The record is written over the preallocated zero tail; an append that
        reaches the tail's end grows it by :func:`._logformat.tail_chunk`
        zeros in the same write (and the same fsync).

        Args:
            record: a list of 1 to 15 plain values whose first item is a
                type tag of 1 to 31 lowercase letters or underscores.
            sync: False skips the fsync: the record survives this process
                dying (it is in the OS), and the next synced append (whose
                fdatasync covers the file) makes it survive a machine crash.

        Raises:
            ValueError: ``record`` does not have that shape.
            JournalWriteError: the encoded record is over :data:`MAX_RECORD`
                bytes; nothing was written.
            OSError: the write or the fsync failed (disk full, I/O error); the
                log is cut back to its previous end so no partial record stays.
        """
        if self._fd is None:
            raise OSError(f"{self.path}: the journal log is open read-only")
        _check_shape(record)
        body = encode(record)
        if len(body) > MAX_RECORD:
            raise JournalWriteError(
                f"{self.path}: one journal write of {len(body)} bytes is over the "
                f"{MAX_RECORD}-byte limit of a log record; nothing was written. Write fewer "
                "or smaller values at once: keep large values outside the journal (store them "
                "elsewhere and return a reference).",
                journal=self.path,
            )
        salt = self._salt()
        assert self._next is not None and self._end is not None
        blob = record_bytes(salt, self._next, body)
        end = self._end
        grow = tail_chunk(end + len(blob)) if end + len(blob) > self._cap else 0
        writes = [(bytes(grow), end + len(blob))] if grow else []  # calloc'd: no memset
        try:
            for data, at in [*writes, (blob, end)]:
                written = os.pwrite(self._fd, data, at)
                if written != len(data):
                    raise OSError(f"{self.path}: short write ({written} of {len(data)} bytes)")
            if sync:
                _sync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):  # else the torn tail is cut off on next open
                os.ftruncate(self._fd, end)
                self._cap = end
            raise
        self._cap = max(self._cap, end + len(blob) + grow)
        self._end = end + len(blob)
        self._next += 1
        return len(blob)

    def size(self) -> int:
        """Return the bytes of the log's records and header (0 when read-only and missing).

        A writable log that was read does not count its zero tail; otherwise
        this is the file's size.
        """
        if self._fd is not None:
            return os.fstat(self._fd).st_size if self._end is None else self._end
        try:
            return os.path.getsize(self.path)
        except FileNotFoundError:
            return 0

    def reset(self) -> None:
        """Empty the log (after its records were checkpointed elsewhere), with a new salt."""
        if self._fd is None:
            return
        self._fresh()  # a crash inside leaves an empty file: a new log

    def close(self) -> None:
        """Trim the preallocated zero tail (not fsynced: zeros read as the end), close the file."""
        if self._fd is not None:
            try:
                if self._end is not None and self._cap > self._end:
                    with contextlib.suppress(OSError):
                        os.ftruncate(self._fd, self._end)
            finally:
                os.close(self._fd)
                self._fd = None
