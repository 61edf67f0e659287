"""Reading an ``.rdj`` file: one streamed pass that checks every record."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import IO, Any

import xxhash

from ...errors import JournalCorruptError, JournalFormatError
from ...frames import ChainCheck, Frame, decode
from .._validate import FRAME_FIELDS, frame_problem, run_problem
from ._format import (
    MAGIC,
    MAX_RECORD,
    PREAMBLE,
    RDJ_VERSION,
    RECORD_HEAD,
    RECORD_SUM,
    TAG_END,
    TAG_FRAME,
    TAG_HEADER,
    RdjHeader,
    parse_frame,
    parse_header,
    redrive_version,
)

__all__ = ["Reader", "read_header"]


class Reader:
    """Reads and checks one ``.rdj`` file from the start (one pass, streamed)."""

    def __init__(
        self, path: str, max_record: int, *, keep: bool = False, data: bytes | None = None
    ) -> None:
        self.path = path
        #: leave each checked frame's decoded payload for its replay (``frame_problem``'s keep)
        self.keep = keep
        self.max_record = max_record
        self.run_id: str | None = None
        self.last_good: int | None = None
        self.offset = 0
        if data is not None:  # the file's bytes, read by the caller: not read again
            self._file: IO[bytes] = io.BytesIO(data)
            self.size = len(data)
            return
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        try:
            self.size = os.fstat(self._file.fileno()).st_size
        except OSError:
            self._file.close()
            raise

    def close(self) -> None:
        self._file.close()

    def corrupt(self, reason: str, detail: str, *, seq: int | None = None) -> JournalCorruptError:
        where = f"run {self.run_id!r}: " if self.run_id is not None else ""
        return JournalCorruptError(
            f"{self.path}: {where}{detail} (at byte {self.offset}); last good seq "
            f"{self.last_good}. The file is damaged or is not a redrive export: export the run "
            "again from its journal, or replay only up to the last good seq.",
            run_id=self.run_id,
            seq=seq,
            last_good_seq=self.last_good,
            source=self.path,
            reason=reason,
            offset=self.offset,
        )

    def _read(self, n: int, what: str) -> bytes:
        data = self._file.read(n)
        if len(data) != n:
            raise self.corrupt(
                "truncated", f"file ends inside {what} ({len(data)} of {n} bytes present)"
            )
        self.offset += n
        return data

    def preamble(self) -> int:
        data = self._file.read(PREAMBLE.size)
        if data[: len(MAGIC)] != MAGIC[: len(data)] or len(data) < len(MAGIC):
            raise self.corrupt(
                "magic", f"not a redrive .rdj file: it starts with {data[:8]!r}, not {MAGIC!r}"
            )
        if len(data) < PREAMBLE.size:
            raise self.corrupt("truncated", "file ends inside the preamble")
        _magic, version, _reserved, check = PREAMBLE.unpack(data)
        if xxhash.xxh32_intdigest(data[:12]) != check:
            raise self.corrupt("checksum", "the preamble (format version) fails its checksum")
        self.offset = PREAMBLE.size
        if version > RDJ_VERSION or version < 1:
            raise JournalFormatError(
                f"{self.path} is an .rdj file of format version {version}; this redrive "
                f"({redrive_version()}) reads versions 1 to {RDJ_VERSION}. Upgrade redrive "
                "(pip install -U redrive) to read it.",
                source=self.path,
                found=version,
                supported=RDJ_VERSION,
            )
        return int(version)

    def record(self) -> tuple[bytes, bytes] | None:
        """Return the next ``(tag, body)``, or None at a clean end of file."""
        start = self.offset
        head = self._file.read(RECORD_HEAD.size)
        if not head:
            return None
        if len(head) < RECORD_HEAD.size:
            raise self.corrupt("truncated", "file ends inside a record header")
        tag, length = RECORD_HEAD.unpack(head)
        if tag not in (TAG_HEADER, TAG_FRAME, TAG_END):
            raise self.corrupt("record", f"unknown record tag {tag!r}")
        left = self.size - start - RECORD_HEAD.size - RECORD_SUM.size
        if length > self.max_record:
            raise self.corrupt(
                "size",
                f"a record declares {length} bytes, over the {self.max_record}-byte limit",
            )
        if length > left:
            raise self.corrupt(
                "truncated",
                f"a record declares {length} bytes but only {max(left, 0)} remain (the file "
                "was cut short, or the length is damaged)",
            )
        self.offset += RECORD_HEAD.size
        body = self._read(length, "a record body")
        (check,) = RECORD_SUM.unpack(self._read(RECORD_SUM.size, "a record checksum"))
        if xxhash.xxh3_64_intdigest(head + body) != check:
            self.offset = start
            raise self.corrupt("checksum", f"the {tag.decode()} record fails its checksum")
        return tag, body

    def body(self, body: bytes, what: str) -> Any:
        try:
            return decode(body)
        except Exception as exc:  # any decoding failure of a hostile body is corruption
            raise self.corrupt("decode", f"{what} is not valid msgpack: {exc}") from None

    def header(self) -> RdjHeader:
        self.preamble()
        rec = self.record()
        if rec is None or rec[0] != TAG_HEADER:
            raise self.corrupt("header", "the file has no header record after the preamble")
        data = self.body(rec[1], "the header")
        try:
            header = parse_header(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise self.corrupt("header", f"malformed header: {exc}") from None
        self.run_id = header.run.run_id
        problem = run_problem(header.run)
        if problem is not None:
            raise self.corrupt("header", f"the header's run row is malformed: {problem}")
        return header

    def frames(self, header: RdjHeader) -> Iterator[Frame]:
        """Yield every frame, checked; raise at the first problem."""
        run = header.run
        check = ChainCheck(run.run_id)
        while True:
            count = check.next_seq
            rec = self.record()
            if rec is None:
                raise self.corrupt(
                    "truncated",
                    f"file ends after {count} of {header.frames} frames without its end record",
                )
            tag, body = rec
            if tag == TAG_END:
                self._end(body, count, check.prev_chain, header)
                return
            if tag != TAG_FRAME:
                raise self.corrupt("record", f"unexpected {tag!r} record among the frames")
            data = self.body(body, f"frame record {count}")
            try:
                frame = parse_frame(run.run_id, data)
            except (TypeError, ValueError) as exc:
                raise self.corrupt("frame", f"malformed frame record: {exc}", seq=count) from None
            found = check.problem(frame)
            if found is not None and found[0] != "chain":
                raise self.corrupt(found[0], f"frame seq {frame.seq} {found[1]}", seq=frame.seq)
            if count >= header.frames:
                raise self.corrupt(
                    "count",
                    f"more frames than the {header.frames} the header declares",
                    seq=frame.seq,
                )
            problem = frame_problem(frame, keep=self.keep)
            if problem is not None:
                inside = problem.split(":")[0] not in FRAME_FIELDS - {"payload"}
                raise self.corrupt(
                    "payload" if inside else "frame",
                    f"frame seq {frame.seq} ({frame.kind}) has a malformed "
                    f"{'payload ' if inside else ''}field: {problem}",
                    seq=frame.seq,
                )
            if found is not None:  # checked after the payload: a bad payload says so
                raise self.corrupt(
                    found[0],
                    f"frame seq {frame.seq} {found[1]} (altered, reordered or truncated)",
                    seq=frame.seq,
                )
            check.advance(frame)
            self.last_good = frame.seq
            yield frame

    def _end(self, body: bytes, count: int, prev: str, header: RdjHeader) -> None:
        data = self.body(body, "the end record")
        if not isinstance(data, dict):
            raise self.corrupt("end", "the end record is not a map")
        if data.get("frames") != count or count != header.frames:
            raise self.corrupt(
                "count",
                f"the file holds {count} frames; the header declares {header.frames} and the "
                f"end record {data.get('frames')!r}",
            )
        if data.get("last_chain") != prev or header.run.last_chain != prev:
            raise self.corrupt("chain", "the last frame's chain differs from the recorded one")
        if self._file.read(1):
            raise self.corrupt("trailing", "bytes follow the end record")


def read_header(path: str | os.PathLike[str], *, max_record: int = MAX_RECORD) -> RdjHeader:
    """Read and check only the preamble and header of an ``.rdj`` file (frames unread).

    Raises:
        JournalCorruptError: the file is not a well-formed ``.rdj`` file.
        JournalFormatError: the file is of a newer format version.
        OSError: the file cannot be opened.
    """
    reader = Reader(os.fspath(path), max_record)
    try:
        return reader.header()
    finally:
        reader.close()
