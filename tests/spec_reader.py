"""An independent reader and writer of redrive journals, written from the format spec alone.

The spec is docs/reference/format.md. This file imports nothing of redrive:
only the standard library, ``msgpack`` and ``xxhash``, the two libraries the
format names. The tests run it on every
committed fixture of every format version and on an export of the demo's
run, and check that it finds what redrive finds; they import the ``.rdj``
files it writes with redrive and replay them. Where this file and redrive
disagree, one of them or the specification is wrong.

What it reads:

- :func:`read_rdj`: an ``.rdj`` file (layouts 1 and 2) -> :class:`SpecRun`.
- :func:`read_text`: the JSON Lines text form -> :class:`SpecRun`.
- :func:`read_rdlog`: an ``.rdlog`` write log (formats 1 and 2) -> its records.
- :func:`decode`: payload bytes -> Python values (every ext type of the spec).
- :func:`expanded_payloads`: a run's payloads with prefix references resolved.

What it writes: :func:`write_rdj` makes an ``.rdj`` file of a run from
``(kind, name, payload)`` triples, computing keys, canonical payloads and
the chain itself.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import importlib
import json
import math
import struct
import uuid
import zoneinfo
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgpack
import xxhash

GENESIS = "0" * 32
RDJ_MAGIC = b"\x89RDJ\r\n\x1a\n"
RDJ_VERSIONS = (1, 2)
RDJ_MAX_RECORD = 64 * 1024 * 1024
LOG_MAGIC_V1 = b"RDLOG\x00\x01\n"
LOG_MAGIC_V2 = b"RDLOG\x00\x02\n"
KINDS = frozenset(
    [
        "run_start",
        "model_request",
        "model_response",
        "tool_start",
        "tool_done",
        "tool_error",
        "value",
        "note",
        "run_end",
    ]
)
OPENING = frozenset({"model_request", "tool_start", "value"})
MAX_DEPTH = 256
PREFIX_DEPTH = 4


class SpecError(ValueError):
    """The bytes do not follow the specification (the message says where)."""


@dataclasses.dataclass(frozen=True)
class SpecFrame:
    """One frame, as the specification's table of frame fields lists them."""

    run_id: str
    seq: int
    kind: str
    name: str
    key: str
    payload: bytes
    chain: str
    at: float
    epoch: int


@dataclasses.dataclass
class SpecRun:
    """A run read from a file: its row (a dict) and its frames, chain checked."""

    run: dict[str, Any]
    frames: list[SpecFrame]
    header: dict[str, Any] = dataclasses.field(default_factory=dict)


# -- primitives ------------------------------------------------------------------------------


def pack(value: Any) -> bytes:
    """msgpack in the smallest forms, bin for bytes, str for text, float 64 always."""
    return msgpack.packb(value, use_bin_type=True, use_single_float=False)  # type: ignore[no-any-return]


def _unpack(data: bytes, ext_hook: Any = None, *, use_list: bool = True) -> Any:
    kwargs: dict[str, Any] = {"raw": False, "strict_map_key": False, "use_list": use_list}
    if ext_hook is not None:
        kwargs["ext_hook"] = ext_hook
    return msgpack.unpackb(data, **kwargs)


def xxh128(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


# -- canonical encoding (for writing, keys and fingerprints) ---------------------------------


def canonical(value: Any) -> Any:
    """The canonical tree of a plain value (the subset this writer needs: JSON-like data)."""
    if value is None or isinstance(value, bool | bytes | str):
        return value
    if isinstance(value, int):
        if -(2**63) <= value <= 2**64 - 1:
            return value
        return msgpack.ExtType(7, str(value).encode("ascii"))
    if isinstance(value, float):
        if math.isnan(value):
            return math.nan
        return 0.0 if value == 0.0 else value
    if isinstance(value, msgpack.ExtType):  # a named tuple: before lists and tuples
        return value
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        ints = sorted(k for k in value if isinstance(k, int))
        strs = sorted(k for k in value if isinstance(k, str))
        if len(ints) + len(strs) != len(value):
            raise TypeError("map keys must be integers or strings")
        return {k: canonical(value[k]) for k in [*ints, *strs]}
    raise TypeError(f"this writer does not encode {type(value).__name__}")


def call_key(name: str, arguments: Any) -> str:
    """xxh3-128 of ``pack([name, canonical(arguments)])``."""
    return xxh128(pack([name, canonical(arguments)]))


def fingerprint(value: Any) -> str:
    return xxh128(pack(canonical(value)))


def chain_of(prev: str, frame: SpecFrame) -> str:
    head = pack([frame.run_id, frame.seq, frame.kind, frame.name, frame.key, float(frame.at)])
    return xxh128(bytes.fromhex(prev) + head + frame.payload)


def check_chain(run_id: str, frames: Iterable[SpecFrame]) -> list[SpecFrame]:
    """Check seq density, run and chain from GENESIS; return the frames."""
    out: list[SpecFrame] = []
    prev = GENESIS
    for expected_seq, frame in enumerate(frames):
        if frame.run_id != run_id:
            raise SpecError(f"seq {frame.seq}: belongs to run {frame.run_id!r}")
        if frame.seq != expected_seq:
            raise SpecError(f"seq {frame.seq}: expected seq {expected_seq}")
        if frame.kind not in KINDS:
            raise SpecError(f"seq {frame.seq}: unknown kind {frame.kind!r}")
        if chain_of(prev, frame) != frame.chain:
            raise SpecError(f"seq {frame.seq}: chain check failed")
        prev = frame.chain
        out.append(frame)
    return out


# -- decoding payloads -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Prefix:
    """A prefix reference (ext 9): ``count`` items of the previous list, then ``tail``."""

    count: int
    tail: list[Any]


@dataclasses.dataclass(frozen=True)
class Marker:
    code: int


def _decimal(text: str) -> decimal.Decimal:
    return decimal.Decimal(text)


def _datetime_or_time(code: int, data: bytes) -> Any:
    text, zone, fold = _unpack(data)
    cls = dt.datetime if code == 20 else dt.time
    value = cls.fromisoformat(text)
    if zone is not None and zone[0] == "zoneinfo":
        value = value.replace(tzinfo=zoneinfo.ZoneInfo(zone[1]))
    elif zone is not None and zone[0] == "timezone":
        offset = value.utcoffset()
        assert offset is not None
        value = value.replace(tzinfo=dt.timezone(offset, zone[1]))
    return value.replace(fold=fold)


def _leaf(code: int, data: bytes, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise SpecError("nested deeper than the specification allows")
    if code in (1, 2, 3, 4):
        text = data.decode("utf-8")
        return {1: dt.datetime, 2: dt.datetime, 3: dt.date, 4: dt.time}[code].fromisoformat(text)
    if code == 5:
        return uuid.UUID(bytes=data)
    if code in (6, 22):
        return _decimal(data.decode("ascii"))
    if code == 7:
        return int(data.decode("ascii"))
    if code == 8:
        days, seconds, micros = _unpack(data)
        return dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == 9:
        count, tail = _unpack(data, ext_hook=lambda c, d: _leaf(c, d, depth + 1))
        if any(isinstance(x, Prefix) for x in _walk(tail)):
            raise SpecError("a prefix reference inside a prefix reference")
        return Prefix(count, tail)
    if code == 10:
        # arrays as tuples: a map key may be an array (a tuple or frozenset, marked)
        tree = _unpack(data, ext_hook=lambda c, d: _leaf(c, d, depth + 1), use_list=False)
        return _stored(tree)
    if code in (20, 21):
        return _datetime_or_time(code, data)
    if code in (23, 24, 25, 26, 27):
        if data:
            raise SpecError(f"marker ext {code} with data")
        return Marker(code)
    if code == 28:
        return bytearray(data)
    raise SpecError(f"unknown ext type {code}")


def _walk(value: Any) -> Iterable[Any]:
    stack = [value]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def _stored(tree: Any) -> Any:
    """Rebuild a stored value's tree: marked arrays become tuples, sets, enum members.

    The tree is unpacked with arrays as tuples (so an array can be a map key);
    an unmarked array is a list.
    """
    if isinstance(tree, tuple):
        if tree and isinstance(tree[0], Marker):
            code, items = tree[0].code, [_stored(x) for x in tree[1:]]
            if code == 23:
                return tuple(items)
            if code == 24:
                return set(items)
            if code == 25:
                return frozenset(items)
            if code == 26:
                module, _, qualname = items[0].partition(":")
                cls: Any = importlib.import_module(module)
                for part in qualname.split("."):
                    cls = getattr(cls, part)
                return cls(items[1])
            return ("codec", items[0], items[1])
        return [_stored(x) for x in tree]
    if isinstance(tree, dict):
        return {_stored(k): _stored(v) for k, v in tree.items()}
    return tree


def decode(payload: bytes) -> Any:
    """Decode canonical payload bytes into Python values (every ext type of the spec)."""
    return _unpack(payload, ext_hook=lambda c, d: _leaf(c, d, 1))


def _expand(previous: Any, current: Any, depth: int = 0) -> Any:
    if isinstance(current, Prefix):
        if not isinstance(previous, list) or len(previous) < current.count:
            raise SpecError("a prefix reference to more items than the previous request has")
        return previous[: current.count] + list(current.tail)
    if depth > PREFIX_DEPTH or not isinstance(current, dict):
        return current
    prev = previous if isinstance(previous, dict) else {}
    return {k: _expand(prev.get(k), v, depth + 1) for k, v in current.items()}


def expanded_payloads(frames: Iterable[SpecFrame]) -> list[Any]:
    """Each frame's decoded payload, model requests with their prefix references resolved."""
    last: dict[str, Any] = {}
    out = []
    for frame in frames:
        data = decode(frame.payload)
        if frame.kind == "model_request":
            data = _expand(last.get(frame.name), data)
            last[frame.name] = data
        out.append(data)
    return out


def _key_tree(value: Any) -> Any:
    """The canonical tree of a decoded payload part, to recompute a key from it."""
    if isinstance(value, dict):
        return {k: _key_tree(value[k]) for k in value}
    if isinstance(value, list):
        return [_key_tree(v) for v in value]
    if isinstance(value, Prefix):
        raise SpecError("unexpanded prefix reference")
    if isinstance(value, float | int | str | bytes | bool) or value is None:
        return value
    raise SpecError(f"a key over a {type(value).__name__} is not recomputed by this reader")


MINTED_IDS = frozenset({"tool_call_id", "tool_use_id", "call_id", "idempotency_key"})
ID_TYPES = frozenset({"function", "tool_use", "function_call", "server_tool_use", "tool_call"})


def match_view(args: Any) -> Any:
    """A model request's arguments without the ids a model or transport mints."""
    if isinstance(args, list):
        return [match_view(x) for x in args]
    if not isinstance(args, dict):
        return args
    kind = args.get("type")
    holds_id = (isinstance(kind, str) and kind in ID_TYPES) or "function" in args
    return {
        k: match_view(v)
        for k, v in args.items()
        if k not in MINTED_IDS and not (k == "id" and holds_id)
    }


def check_keys(frames: list[SpecFrame]) -> int:
    """Recompute the key of every opening frame from its expanded ``args``; return how many.

    Runs recorded with ``ignore=`` paths have other keys (see the spec); the
    fixtures and the demo use none.
    """
    checked = 0
    for frame, data in zip(frames, expanded_payloads(frames), strict=True):
        if frame.kind in OPENING:
            args = _key_tree(data["args"])
            if frame.kind == "model_request":
                args = match_view(args)
            if call_key(frame.name, args) != frame.key:
                raise SpecError(f"seq {frame.seq}: key does not match its arguments")
            checked += 1
        elif frame.key != "":
            raise SpecError(f"seq {frame.seq}: a {frame.kind} frame with a key")
    return checked


# -- .rdj ------------------------------------------------------------------------------------


def read_rdj(path: str | Path) -> SpecRun:
    """Read an ``.rdj`` file: preamble, checked records, header, frames, end, chain."""
    data = Path(path).read_bytes()
    if len(data) < 16 or data[:8] != RDJ_MAGIC:
        raise SpecError("not an .rdj file")
    if xxhash.xxh32_intdigest(data[:12]) != struct.unpack(">I", data[12:16])[0]:
        raise SpecError("preamble checksum")
    version, reserved = struct.unpack(">HH", data[8:12])
    if version not in RDJ_VERSIONS or reserved != 0:
        raise SpecError(f"layout version {version} is newer than this reader")
    pos = 16
    records: list[tuple[bytes, Any]] = []
    while pos < len(data):
        if pos + 5 > len(data):
            raise SpecError(f"truncated record head at {pos}")
        tag = data[pos : pos + 1]
        (length,) = struct.unpack(">I", data[pos + 1 : pos + 5])
        if length > RDJ_MAX_RECORD or pos + 5 + length + 8 > len(data):
            raise SpecError(f"record at {pos} runs past the file")
        body = data[pos + 5 : pos + 5 + length]
        (digest,) = struct.unpack(">Q", data[pos + 5 + length : pos + 13 + length])
        if xxhash.xxh3_64_intdigest(data[pos : pos + 5 + length]) != digest:
            raise SpecError(f"record checksum at {pos}")
        records.append((tag, body))
        pos += 13 + length
    if not records or records[0][0] != b"H" or records[-1][0] != b"E":
        raise SpecError("expected a header first and an end record last")
    header = decode(records[0][1])
    run = header["run"]
    frames = []
    for tag, body in records[1:-1]:
        if tag != b"F":
            raise SpecError(f"unexpected record {tag!r}")
        seq, kind, name, key, payload, chain, at, epoch = _unpack(body)
        frames.append(SpecFrame(run["run_id"], seq, kind, name, key, payload, chain, at, epoch))
    end = _unpack(records[-1][1])
    if not (header["frames"] == run["next_seq"] == len(frames) == end["frames"]):
        raise SpecError("frame counts differ")
    check_chain(run["run_id"], frames)
    last = frames[-1].chain if frames else GENESIS
    if end["last_chain"] != last or run["last_chain"] != last:
        raise SpecError("last chain differs")
    return SpecRun(run=run, frames=frames, header=header)


def _record(tag: bytes, body: bytes) -> bytes:
    head = tag + struct.pack(">I", len(body))
    return head + body + struct.pack(">Q", xxhash.xxh3_64_intdigest(head + body))


def write_rdj(
    path: str | Path,
    run_id: str,
    steps: list[tuple[str, str, dict[str, Any]]],
    *,
    status: str,
    at: float = 1_800_000_000.0,
) -> SpecRun:
    """Write a run to an ``.rdj`` file (layout 2) from ``(kind, name, payload)`` triples.

    Keys are computed for opening frames from ``payload["args"]``; payload
    values may be ``msgpack.ExtType`` (a stored value is ``ExtType(10, pack(tree))``).
    """
    frames: list[SpecFrame] = []
    prev = GENESIS
    for seq, (kind, name, payload) in enumerate(steps):
        key = call_key(name, payload["args"]) if kind in OPENING else ""
        frame = SpecFrame(run_id, seq, kind, name, key, pack(canonical(payload)), "", at + seq, 0)
        frame = dataclasses.replace(frame, chain=chain_of(prev, frame))
        frames.append(frame)
        prev = frame.chain
    start = decode(frames[0].payload)
    run = {
        "run_id": run_id,
        "status": status,
        "next_seq": len(frames),
        "last_chain": prev,
        "input_fp": start["input_fp"],
        "entrypoint": start.get("entrypoint"),
        "created_at": float(at),
        "updated_at": float(at + len(frames)),
        "output": None,
        "error": None,
    }
    header = {
        "format": 2,
        "redrive": "spec-reader",
        "exported_at": float(at + len(frames)),
        "run": run,
        "flags": start.get("flags", {}),
        "frames": len(frames),
    }
    version = struct.pack(">HH", 2, 0)
    parts = [RDJ_MAGIC + version + struct.pack(">I", xxhash.xxh32_intdigest(RDJ_MAGIC + version))]
    parts.append(_record(b"H", pack(canonical(header))))
    for f in frames:
        parts.append(
            _record(b"F", pack([f.seq, f.kind, f.name, f.key, f.payload, f.chain, f.at, f.epoch]))
        )
    parts.append(_record(b"E", pack({"frames": len(frames), "last_chain": prev})))
    Path(path).write_bytes(b"".join(parts))
    return SpecRun(run=run, frames=frames, header=header)


# -- the text form ---------------------------------------------------------------------------

_TEXT_EXTS = frozenset({1, 2, 3, 4, 6, 7})


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "$stored":
            return msgpack.ExtType(10, pack(_from_json(inner)))
        if tag == "$prefix":
            return msgpack.ExtType(9, pack(_from_json(inner)))
        if tag == "$bytes":
            return base64.b64decode(inner)
        if tag == "$float":
            return float(inner)
        if tag == "$map":
            return {_from_json(k): _from_json(v) for k, v in inner}
    if len(value) == 2 and "$ext" in value:
        code = int(value["$ext"])
        if "text" in value:
            return msgpack.ExtType(code, str(value["text"]).encode("utf-8"))
        if "tree" in value:
            return msgpack.ExtType(code, pack(_from_json(value["tree"])))
        return msgpack.ExtType(code, base64.b64decode(value["b64"]))
    return {k: _from_json(v) for k, v in value.items()}


def _payload_of(line: dict[str, Any]) -> bytes:
    if "$payload" in line:
        return base64.b64decode(line["$payload"])
    data = line["data"]
    moved = line.get("volatile", {}).get("data")
    if moved:
        data = {**data, **moved}
        data = {k: data[k] for k in sorted(data)}
    return pack(_from_json(data))


def read_text(path: str | Path) -> SpecRun:
    """Read the JSON Lines text form; payloads re-encoded, chain checked."""
    lines = [json.loads(x) for x in Path(path).read_text("utf-8").split("\n") if x.strip()]
    head = lines[0]
    if head.get("redrive") != "run" or head.get("format") != 1:
        raise SpecError("not a text form of format 1")
    run = {k: head[k] for k in ("run_id", "status", "entrypoint", "input_fp", "error")}
    run.update(head["volatile"])
    run["output"] = None if head["output"] is None else _payload_of(head["output"])
    frames = []
    for line in lines[1:]:
        vol = line["volatile"]
        frames.append(
            SpecFrame(
                run["run_id"],
                line["seq"],
                line["kind"],
                line["name"],
                line["key"],
                _payload_of(line),
                vol["chain"],
                vol["at"],
                vol["epoch"],
            )
        )
    check_chain(run["run_id"], frames)
    if len(frames) != run["frames"] or (frames and frames[-1].chain != run["last_chain"]):
        raise SpecError("frame count or last chain differs")
    return SpecRun(run=run, frames=frames)


# -- .rdlog ----------------------------------------------------------------------------------


@dataclasses.dataclass
class SpecLog:
    """A write log: its format, its records (decoded lists), and whether a torn tail was found."""

    format: int
    records: list[Any]
    torn_tail: bool = False


def _log_body(body: bytes) -> Any:
    def no_ext(code: int, data: bytes) -> Any:
        raise SpecError("an ext type in a log record")

    record = _unpack(body, ext_hook=no_ext)
    if (
        not isinstance(record, list)
        or not 1 <= len(record) <= 15
        or not isinstance(record[0], str)
        or not 1 <= len(record[0]) <= 31
        or not all((c.islower() and c.isascii()) or c == "_" for c in record[0])
    ):
        raise SpecError("a log record must be a list led by a type tag")
    return record


def read_rdlog(path: str | Path) -> SpecLog:
    """Read an ``.rdlog`` (formats 1 and 2); a torn tail is reported, not an error."""
    data = Path(path).read_bytes()
    if data[:8] == LOG_MAGIC_V1:
        records, pos = [], 8
        while pos < len(data):
            if pos + 12 > len(data):
                return SpecLog(1, records, torn_tail=True)
            length = struct.unpack(">I", data[pos : pos + 4])[0]
            digest = data[pos + 4 : pos + 12]
            body = data[pos + 12 : pos + 12 + length]
            if len(body) < length:
                return SpecLog(1, records, torn_tail=True)
            if xxhash.xxh3_64_digest(body) != digest:
                raise SpecError(f"record at {pos}: body digest")
            records.append(_log_body(body))
            pos += 12 + length
        return SpecLog(1, records)
    if data[:8] != LOG_MAGIC_V2:
        raise SpecError("not an .rdlog of a known format")
    salt = data[8:16]
    marker = xxhash.xxh3_64_digest(b"rdlog-marker" + salt)[:4]
    seed = int.from_bytes(salt, "big")
    records, pos, number = [], 16, 0
    while pos < len(data):
        if data.count(0, pos) == len(data) - pos:
            break  # the writer's preallocated zero tail: the end of the log
        head = data[pos : pos + 28]
        if len(head) < 28:
            return SpecLog(2, records, torn_tail=True)
        mark, length, rec_no, digest = struct.unpack(">4sIQ8s", head[:24])
        if mark != marker or xxhash.xxh3_64_digest(salt + head[:24])[:4] != head[24:]:
            raise SpecError(f"record at {pos}: header check")
        if rec_no != number:
            raise SpecError(f"record at {pos}: number {rec_no}, expected {number}")
        body = data[pos + 28 : pos + 28 + length]
        if len(body) < length:
            return SpecLog(2, records, torn_tail=True)
        if xxhash.xxh3_64_digest(body, seed=seed ^ rec_no) != digest:
            if _later_header(data, pos + 28 + length, salt, marker, number):
                raise SpecError(f"record at {pos}: body digest")
            return SpecLog(2, records, torn_tail=True)  # torn inside the zero tail
        records.append(_log_body(body))
        pos += 28 + length
        number += 1
    return SpecLog(2, records)


def _later_header(data: bytes, start: int, salt: bytes, marker: bytes, number: int) -> bool:
    """Whether a header with a good check and a record number above ``number`` follows ``start``."""
    pos = data.find(marker, start)
    while pos >= 0:
        head = data[pos : pos + 28]
        if (
            len(head) == 28
            and xxhash.xxh3_64_digest(salt + head[:24])[:4] == head[24:]
            and struct.unpack(">Q", head[8:16])[0] > number
        ):
            return True
        pos = data.find(marker, pos + 1)
    return False


def log_frames(log: SpecLog) -> dict[str, list[SpecFrame]]:
    """The frames the log's ``frames`` records append, by run, chain checked."""
    runs: dict[str, list[SpecFrame]] = {}
    for record in log.records:
        if record[0] == "frames":
            for row in record[2]:
                runs.setdefault(row[0], []).append(SpecFrame(*row))
    for run_id, frames in runs.items():
        check_chain(run_id, frames)
    return runs
