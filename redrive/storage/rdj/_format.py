"""The ``.rdj`` format: layout, constants, the header, record codecs and parsers (pure).

An ``.rdj`` file holds one run, exported to a single self-checking file.

Layout (format versions 1 and 2, all integers big-endian)::

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

import math
import re
import struct
import time
from typing import Any, Final

import msgpack
import xxhash

from ...frames import Frame, Kind, encode
from .._base import RunRecord, RunStatus
from .._limits import RDJ_RECORD_LIMIT

__all__ = [
    "BATCH",
    "MAGIC",
    "MAX_RECORD",
    "PREAMBLE",
    "RDJ_VERSION",
    "RECORD_HEAD",
    "RECORD_SUM",
    "RdjHeader",
    "TAG_END",
    "TAG_FRAME",
    "TAG_HEADER",
    "header_bytes",
    "pack",
    "parse_frame",
    "parse_header",
    "preamble_bytes",
    "record_bytes",
    "redrive_version",
]

#: First 8 bytes of every ``.rdj`` file.
MAGIC: Final = b"\x89RDJ\r\n\x1a\n"
#: The ``.rdj`` layout version this redrive writes (and the newest it reads). 2: the
#: layout of 1, with frame payloads that may hold stored values (frame format 2).
RDJ_VERSION: Final = 2
#: Largest record body written or accepted by default, in bytes (64 MiB: twice
#: :data:`redrive.storage.MAX_VALUE`, room for a largest value and its fields).
MAX_RECORD: Final = RDJ_RECORD_LIMIT

PREAMBLE = struct.Struct(">8sHHI")
RECORD_HEAD = struct.Struct(">cI")
RECORD_SUM = struct.Struct(">Q")
TAG_HEADER = b"H"
TAG_FRAME = b"F"
TAG_END = b"E"
_KINDS = frozenset(k.value for k in Kind)
_STATUSES = frozenset(s.value for s in RunStatus)
BATCH = 1000


def redrive_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("redrive")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"


def preamble_bytes(version: int) -> bytes:
    head = MAGIC + struct.pack(">HH", version, 0)
    return head + struct.pack(">I", xxhash.xxh32_intdigest(head))


def record_bytes(tag: bytes, body: bytes) -> bytes:
    head = RECORD_HEAD.pack(tag, len(body))
    return head + body + RECORD_SUM.pack(xxhash.xxh3_64_intdigest(head + body))


def pack(value: Any) -> bytes:
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


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


def _is_hex32(value: Any) -> bool:
    return isinstance(value, str) and _HEX32.fullmatch(value) is not None


def _opt(value: Any, kind: type | tuple[type, ...]) -> bool:
    return value is None or isinstance(value, kind)


def _num(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def parse_header(data: Any) -> RdjHeader:
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


#: 32 lowercase hex digits (a key or a chain)
_HEX32: Final = re.compile("[0-9a-f]{32}")


def parse_frame(run_id: str, data: Any) -> Frame:
    """The frame of run ``run_id`` in a decoded ``F`` record body.

    ``data``: ``[seq, kind, name, key, payload, chain, at, epoch]`` as decoded.

    Raises:
        ValueError: a field of the wrong type or out of range (the message names it).
    """
    if type(data) is list and len(data) == 8:
        # the usual record, told by one expression of exact types; anything else (an int
        # time, a subclass, a bad field) takes the checks below, which name the problem
        seq, kind, name, key, payload, chain, at, epoch = data
        if (
            type(seq) is int
            and seq >= 0
            and type(kind) is str
            and kind in _KINDS
            and type(name) is str
            and type(key) is str
            and (key == "" or _HEX32.fullmatch(key) is not None)
            and type(payload) is bytes
            and type(chain) is str
            and _HEX32.fullmatch(chain) is not None
            and type(at) is float
            and math.isfinite(at)
            and type(epoch) is int
            and epoch >= 0
        ):
            return Frame(
                run_id=run_id,
                seq=seq,
                kind=kind,
                name=name,
                key=key,
                payload=payload,
                chain=chain,
                at=at,
                epoch=epoch,
            )
    return _parse_frame_checked(run_id, data)


def _parse_frame_checked(run_id: str, data: Any) -> Frame:
    """:func:`parse_frame` by its ordered checks (the first problem's message)."""
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


def header_bytes(
    record: RunRecord, flags: dict[str, Any], exported_at: float | None = None
) -> bytes:
    """The header record's body; ``exported_at`` defaults to now (seconds since the epoch)."""
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
            "redrive": redrive_version(),
            "exported_at": time.time() if exported_at is None else float(exported_at),
            "run": run,
            "flags": flags,
            "frames": record.next_seq,
        }
    )
