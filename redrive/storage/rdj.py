"""The ``.rdj`` file: one run, exported to a single self-checking file.

Layout (format version 1, all integers big-endian)::

    preamble   magic  b"\\x89RDJ\\r\\n\\x1a\\n"  (8 bytes)
               format version                  u16
               reserved (0)                    u16
               xxh32 of the 12 bytes above     u32
    records    tag (1 byte) | body length u32 | body (msgpack) | xxh3-64 u64 of tag+length+body
               "H"  header: {"format", "redrive", "exported_at", "run": {...}, "flags": {...},
                    "frames": count}
               "F"  one frame: [seq, kind, name, key, payload, chain, at, epoch]
               "E"  end: {"frames": count, "last_chain": chain}

The preamble checksum makes a damaged version field read as corruption, so
only a genuinely newer file is refused as "newer". Every record is checked
before its body is decoded, the frames' chain is recomputed from ``GENESIS``,
and the end record proves the file was not cut at a record boundary.

Readers stream: a record is read only after its declared length was checked
against :data:`MAX_RECORD` and the bytes left in the file, so memory stays
proportional to one record and no read waits for bytes that are not there.
Anything wrong raises :class:`~redrive.errors.JournalCorruptError` with the
reason, the byte offset and the last good seq.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, Final

import msgpack
import xxhash

from ..errors import JournalCorruptError, JournalFormatError, UnknownRunError
from ..frames import ChainCheck, Frame, Kind, decode, encode
from ._base import Decision, Journal, RunRecord, RunStatus, RunUpdate
from ._copy import copy_run

__all__ = [
    "MAGIC",
    "MAX_RECORD",
    "RDJ_VERSION",
    "RdjHeader",
    "RdjJournal",
    "export_run",
    "import_run",
    "read_header",
]

#: First 8 bytes of every ``.rdj`` file.
MAGIC: Final = b"\x89RDJ\r\n\x1a\n"
#: The ``.rdj`` layout version this redrive writes (and the newest it reads).
RDJ_VERSION: Final = 1
#: Largest record body accepted by default, in bytes (64 MiB).
MAX_RECORD: Final = 64 * 1024 * 1024

_PREAMBLE = struct.Struct(">8sHHI")
_RECORD_HEAD = struct.Struct(">cI")
_RECORD_SUM = struct.Struct(">Q")
_TAG_HEADER = b"H"
_TAG_FRAME = b"F"
_TAG_END = b"E"
_KINDS = frozenset(k.value for k in Kind)
_STATUSES = frozenset(s.value for s in RunStatus)
_HEX = frozenset("0123456789abcdef")
_BATCH = 1000


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("redrive")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"


def _preamble(version: int) -> bytes:
    head = MAGIC + struct.pack(">HH", version, 0)
    return head + struct.pack(">I", xxhash.xxh32_intdigest(head))


def _record(tag: bytes, body: bytes) -> bytes:
    head = _RECORD_HEAD.pack(tag, len(body))
    return head + body + _RECORD_SUM.pack(xxhash.xxh3_64_intdigest(head + body))


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True, use_single_float=False)  # type: ignore[no-any-return]


class RdjHeader:
    """The header of an ``.rdj`` file.

    Attributes:
        format: the file's layout version.
        redrive: the redrive version that wrote it.
        exported_at: seconds since the Unix epoch.
        run: the run's index row (lease fields cleared).
        flags: behaviour flags the run was recorded with (from its ``run_start``).
        frames: how many frames the file holds.
    """

    __slots__ = ("exported_at", "flags", "format", "frames", "redrive", "run")

    def __init__(
        self,
        *,
        format: int,
        redrive: str,
        exported_at: float,
        run: RunRecord,
        flags: dict[str, Any],
        frames: int,
    ) -> None:
        self.format = format
        self.redrive = redrive
        self.exported_at = exported_at
        self.run = run
        self.flags = flags
        self.frames = frames

    def to_dict(self) -> dict[str, Any]:
        """Return the header as plain data (the run's output decoded)."""
        run = self.run
        return {
            "format": self.format,
            "redrive": self.redrive,
            "exported_at": self.exported_at,
            "flags": self.flags,
            "frames": self.frames,
            "run": {
                "run_id": run.run_id,
                "status": run.status,
                "next_seq": run.next_seq,
                "last_chain": run.last_chain,
                "input_fp": run.input_fp,
                "entrypoint": run.entrypoint,
                "created_at": run.created_at,
                "updated_at": run.updated_at,
                "error": run.error,
            },
        }


class _Reader:
    """Reads and checks one ``.rdj`` file from the start (one pass, streamed)."""

    def __init__(self, path: str, max_record: int) -> None:
        self.path = path
        self.max_record = max_record
        self.run_id: str | None = None
        self.last_good: int | None = None
        self.offset = 0
        self._file: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed by close()
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
        data = self._file.read(_PREAMBLE.size)
        if data[: len(MAGIC)] != MAGIC[: len(data)] or len(data) < len(MAGIC):
            raise self.corrupt(
                "magic", f"not a redrive .rdj file: it starts with {data[:8]!r}, not {MAGIC!r}"
            )
        if len(data) < _PREAMBLE.size:
            raise self.corrupt("truncated", "file ends inside the preamble")
        _magic, version, _reserved, check = _PREAMBLE.unpack(data)
        if xxhash.xxh32_intdigest(data[:12]) != check:
            raise self.corrupt("checksum", "the preamble (format version) fails its checksum")
        self.offset = _PREAMBLE.size
        if version > RDJ_VERSION or version < 1:
            raise JournalFormatError(
                f"{self.path} is an .rdj file of format version {version}; this redrive "
                f"({_version()}) reads versions 1 to {RDJ_VERSION}. Upgrade redrive "
                "(pip install -U redrive) to read it.",
                source=self.path,
                found=version,
                supported=RDJ_VERSION,
            )
        return int(version)

    def record(self) -> tuple[bytes, bytes] | None:
        """Return the next ``(tag, body)``, or None at a clean end of file."""
        start = self.offset
        head = self._file.read(_RECORD_HEAD.size)
        if not head:
            return None
        if len(head) < _RECORD_HEAD.size:
            raise self.corrupt("truncated", "file ends inside a record header")
        tag, length = _RECORD_HEAD.unpack(head)
        if tag not in (_TAG_HEADER, _TAG_FRAME, _TAG_END):
            raise self.corrupt("record", f"unknown record tag {tag!r}")
        left = self.size - start - _RECORD_HEAD.size - _RECORD_SUM.size
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
        self.offset += _RECORD_HEAD.size
        body = self._read(length, "a record body")
        (check,) = _RECORD_SUM.unpack(self._read(_RECORD_SUM.size, "a record checksum"))
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
        if rec is None or rec[0] != _TAG_HEADER:
            raise self.corrupt("header", "the file has no header record after the preamble")
        data = self.body(rec[1], "the header")
        try:
            header = _parse_header(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise self.corrupt("header", f"malformed header: {exc}") from None
        self.run_id = header.run.run_id
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
            if tag == _TAG_END:
                self._end(body, count, check.prev_chain, header)
                return
            if tag != _TAG_FRAME:
                raise self.corrupt("record", f"unexpected {tag!r} record among the frames")
            data = self.body(body, f"frame record {count}")
            try:
                frame = _parse_frame(run.run_id, data)
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
            try:
                decode(frame.payload)
            except Exception as exc:
                raise self.corrupt(
                    "payload",
                    f"frame seq {frame.seq} payload is not canonical msgpack: {exc}",
                    seq=frame.seq,
                ) from None
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


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


def _is_hex32(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 32 and set(value) <= _HEX


def _opt(value: Any, kind: type | tuple[type, ...]) -> bool:
    return value is None or isinstance(value, kind)


def _num(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _parse_header(data: Any) -> RdjHeader:
    _check(isinstance(data, dict), "header is not a map")
    run = data["run"]
    _check(isinstance(run, dict), "run is not a map")
    _check(isinstance(run["run_id"], str) and run["run_id"] != "", "run_id is not a string")
    _check(run["status"] in _STATUSES, f"unknown run status {run['status']!r}")
    _check(isinstance(run["next_seq"], int) and run["next_seq"] >= 1, "bad next_seq")
    _check(_is_hex32(run["last_chain"]), "last_chain is not 32 hex digits")
    _check(isinstance(run["input_fp"], str), "input_fp is not a string")
    _check(_opt(run["entrypoint"], str), "entrypoint is not a string")
    _check(_num(run["created_at"]) and _num(run["updated_at"]), "bad run times")
    _check(_opt(run["output"], bytes), "output is not bytes")
    _check(_opt(run["error"], str), "error is not a string")
    _check(isinstance(data["format"], int), "format is not an int")
    _check(isinstance(data["redrive"], str), "redrive version is not a string")
    _check(_num(data["exported_at"]), "exported_at is not a number")
    _check(isinstance(data["flags"], dict), "flags is not a map")
    _check(data["frames"] == run["next_seq"], "frame count differs from next_seq")
    record = RunRecord(
        run_id=run["run_id"],
        status=run["status"],
        next_seq=run["next_seq"],
        last_chain=run["last_chain"],
        input_fp=run["input_fp"],
        entrypoint=run["entrypoint"],
        created_at=float(run["created_at"]),
        updated_at=float(run["updated_at"]),
        output=run["output"],
        error=run["error"],
    )
    return RdjHeader(
        format=data["format"],
        redrive=data["redrive"],
        exported_at=float(data["exported_at"]),
        run=record,
        flags=data["flags"],
        frames=data["frames"],
    )


def _parse_frame(run_id: str, data: Any) -> Frame:
    _check(isinstance(data, list) and len(data) == 8, "not an 8-item array")
    seq, kind, name, key, payload, chain, at, epoch = data
    _check(isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0, "bad seq")
    _check(kind in _KINDS, f"unknown kind {kind!r}")
    _check(isinstance(name, str), "name is not a string")
    _check(key == "" or _is_hex32(key), "key is not 32 hex digits")
    _check(isinstance(payload, bytes), "payload is not bytes")
    _check(_is_hex32(chain), "chain is not 32 hex digits")
    _check(_num(at), "at is not a finite number")
    _check(isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0, "bad epoch")
    return Frame(
        run_id=run_id,
        seq=seq,
        kind=kind,
        name=name,
        key=key,
        payload=payload,
        chain=chain,
        at=float(at),
        epoch=epoch,
    )


def read_header(path: str | os.PathLike[str], *, max_record: int = MAX_RECORD) -> RdjHeader:
    """Read and check only the preamble and header of an ``.rdj`` file (frames unread).

    Raises:
        JournalCorruptError: the file is not a well-formed ``.rdj`` file.
        JournalFormatError: the file is of a newer format version.
        OSError: the file cannot be opened.
    """
    reader = _Reader(os.fspath(path), max_record)
    try:
        return reader.header()
    finally:
        reader.close()


def _read_only(path: str, what: str) -> PermissionError:
    return PermissionError(
        f"{path} is a read-only .rdj export; it cannot {what}. Import it into a journal first "
        f"(`redrive --journal runs.duckdb import {path}` or redrive.import_run) to resume or "
        "record into the run."
    )


class RdjJournal:
    """A read-only journal over one ``.rdj`` file (``open_journal("incident.rdj")``).

    Opening reads the whole file once, streamed, and checks every record and
    the chain, so a damaged file is refused at once; :meth:`frames` streams
    the file again for each caller (and checks it again).

    Args:
        path: the ``.rdj`` file.
        verify: check every frame on open (default True); False reads only the header.
        max_record: the largest record body accepted, in bytes.

    Raises:
        JournalCorruptError: the file is damaged, truncated or not an ``.rdj`` file.
        JournalFormatError: the file is of a newer format version.
        FileNotFoundError: no such file.
    """

    durable = False
    read_only = True

    def __init__(
        self, path: str | os.PathLike[str], *, verify: bool = True, max_record: int = MAX_RECORD
    ) -> None:
        self.path = os.fspath(path)
        self.url = self.path
        self.max_record = max_record
        reader = _Reader(self.path, max_record)
        try:
            self.header = reader.header()
            if verify:
                for _frame in reader.frames(self.header):
                    pass
        finally:
            reader.close()
        self.run_id = self.header.run.run_id

    def verify(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Check the whole file again; return the frame count.

        Args:
            progress: called as ``progress(frames_done, frames_total)`` now and then.

        Raises:
            JournalCorruptError: as on open.
        """
        count = 0
        for _frame in self._stream(0):
            count += 1
            if progress is not None and count % _BATCH == 0:
                progress(count, self.header.frames)
        if progress is not None:
            progress(count, self.header.frames)
        return count

    def _stream(self, start: int) -> Iterator[Frame]:
        reader = _Reader(self.path, self.max_record)
        try:
            header = reader.header()
            if header.run.run_id != self.run_id or header.frames != self.header.frames:
                raise reader.corrupt("changed", "the file changed since it was opened")
            for frame in reader.frames(header):
                if frame.seq >= start:
                    yield frame
        finally:
            reader.close()

    # -- reads -----------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        """Return the exported run's row when ``run_id`` is its id, else None."""
        return self.header.run if run_id == self.run_id else None

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """Yield the run's frames from seq ``start`` (streamed from the file, checked).

        Raises:
            JournalCorruptError: the file was damaged after it was opened.
        """
        if run_id != self.run_id:
            return iter(())
        return self._stream(start)

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Return ``[the run]`` (or nothing when it has another status or ``limit`` is 0)."""
        rows = [self.header.run] if status is None or self.header.run.status == status else []
        return rows if limit is None else rows[:limit]

    def interrupted_runs(self) -> list[RunRecord]:
        """Return the run when it was exported while still ``running``."""
        return self.runs(status=RunStatus.RUNNING.value)

    def stale_runs(self, *, older_than: float = 0.0) -> list[RunRecord]:
        """Return nothing: an export carries no lease."""
        return []

    def decision(self, run_id: str, name: str) -> Decision | None:
        """Return None: approval decisions are not part of an export."""
        return None

    def release_lease(self, run_id: str, owner: str, epoch: int) -> None:
        """Do nothing (an export holds no lease)."""

    def close(self) -> None:
        """Nothing to release: every read opens and closes the file itself."""

    # -- writes (refused) -----------------------------------------------------------

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"start run {record.run_id!r}")

    def append(
        self,
        run_id: str,
        frames: Sequence[Frame],
        *,
        expected_seq: int,
        update: RunUpdate | None = None,
        epoch: int | None = None,
        sync: bool = True,
    ) -> None:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"append to run {run_id!r} at seq {expected_seq}")

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"lease run {run_id!r}")

    def renew_lease(self, run_id: str, owner: str, epoch: int, ttl: float) -> None:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"lease run {run_id!r}")

    def decide(
        self, run_id: str, name: str, approved: bool, *, by: str, note: str = ""
    ) -> Decision:
        """Refuse: raise ``PermissionError`` (the file is read-only)."""
        raise _read_only(self.path, f"record a decision for run {run_id!r}")


def _header_bytes(record: RunRecord, flags: dict[str, Any]) -> bytes:
    run = {
        "run_id": record.run_id,
        "status": record.status,
        "next_seq": record.next_seq,
        "last_chain": record.last_chain,
        "input_fp": record.input_fp,
        "entrypoint": record.entrypoint,
        "created_at": float(record.created_at),
        "updated_at": float(record.updated_at),
        "output": record.output,
        "error": record.error,
    }
    return encode(
        {
            "format": RDJ_VERSION,
            "redrive": _version(),
            "exported_at": time.time(),
            "run": run,
            "flags": flags,
            "frames": record.next_seq,
        }
    )


def export_run(
    journal: Journal,
    run_id: str,
    path: str | os.PathLike[str],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> RunRecord:
    """Write run ``run_id`` of ``journal`` to the ``.rdj`` file ``path`` (atomically).

    The frames are streamed (never all in memory) and their chain checked on
    the way; the file appears only once complete (written to a temporary file,
    fsynced, renamed). A run still being written is exported as of the moment
    its row was read.

    Args:
        journal: any :class:`~redrive.storage.Journal`.
        run_id: the run to export.
        path: the file to write (replaced if it exists).
        progress: called as ``progress(frames_done, frames_total)`` now and then.

    Returns:
        The exported run row.

    Raises:
        UnknownRunError: no such run in ``journal``.
        JournalCorruptError: the run's frames fail their seq or chain check.
    """
    record = journal.get_run(run_id)
    if record is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {journal.url}; list runs with `redrive runs`",
            run_id=run_id,
        )
    target = os.fspath(path)
    total = record.next_seq
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".rdj-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_preamble(RDJ_VERSION))
            frames = journal.frames(run_id)
            check = ChainCheck(run_id, source=journal.url, advice="The run was not exported.")
            header_written = False
            for frame in frames:
                if frame.seq >= total:
                    break
                check.check(frame)
                if not header_written:
                    flags: dict[str, Any] = {}
                    if frame.kind == Kind.RUN_START.value:
                        start = frame.data()
                        if isinstance(start, dict) and isinstance(start.get("flags"), dict):
                            flags = start["flags"]
                    lease_free = RunRecord(
                        run_id=record.run_id,
                        status=record.status,
                        next_seq=total,
                        last_chain=record.last_chain,
                        input_fp=record.input_fp,
                        entrypoint=record.entrypoint,
                        created_at=record.created_at,
                        updated_at=record.updated_at,
                        output=record.output,
                        error=record.error,
                    )
                    out.write(_record(_TAG_HEADER, _header_bytes(lease_free, flags)))
                    header_written = True
                out.write(
                    _record(
                        _TAG_FRAME,
                        _pack(
                            [
                                frame.seq,
                                frame.kind,
                                frame.name,
                                frame.key,
                                frame.payload,
                                frame.chain,
                                float(frame.at),
                                frame.epoch,
                            ]
                        ),
                    )
                )
                count = check.next_seq
                if progress is not None and count % _BATCH == 0:
                    progress(count, total)
            count, prev, last_good = check.next_seq, check.prev_chain, check.last_good_seq
            if count != total or prev != record.last_chain:
                raise JournalCorruptError(
                    f"{journal.url}: run {run_id!r} has {count} readable frames where its row "
                    f"says {total}; last good seq {last_good}. The run was not exported.",
                    run_id=run_id,
                    seq=count,
                    last_good_seq=last_good,
                    source=journal.url,
                    reason="truncated",
                )
            out.write(_record(_TAG_END, _pack({"frames": count, "last_chain": prev})))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if progress is not None:
        progress(total, total)
    return record


def import_run(
    path: str | os.PathLike[str],
    journal: Journal,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> RunRecord:
    """Copy the run in the ``.rdj`` file ``path`` into ``journal``.

    The file is checked completely before anything is written, then copied
    in batches of 1,000 frames (streamed). The run keeps its id, status,
    output and timestamps, so it can be replayed (``live=False``) or, when it
    was exported while ``running``, resumed. Importing the same file twice is
    a no-op.

    Args:
        path: the ``.rdj`` file.
        journal: a writable :class:`~redrive.storage.Journal`.
        progress: called as ``progress(frames_done, frames_total)`` now and then.

    Returns:
        The run's row as imported.

    Raises:
        JournalCorruptError / JournalFormatError: as :class:`RdjJournal`.
        AppendConflictError: ``journal`` already holds a different run with this id.
    """
    source = RdjJournal(path)
    return copy_run(source, source.run_id, journal, progress=progress)
