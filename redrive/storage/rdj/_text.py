"""The text form of a run: JSON Lines a reviewer reads, lossless back to the same frames.

Line 1 is the run (``{"redrive": "run", "format": 1, "run_id", "status",
"entrypoint", "input_fp", "output", "error", "volatile": {...}}``); each
further line is one frame, in seq order, with its keys always in this order::

    {"seq": 3, "kind": "tool_start", "name": "lookup_order", "key": "…", "data": {…},
     "volatile": {"at": 1795943546.45, "chain": "…", "epoch": 0}}

Wall-clock readings inside a payload (a ``model_request``'s ``started_at``), and
the worker named by a ``run_start`` or a ``resumed`` note, sit
under ``volatile.data`` and are put back into ``data`` when read, so the frame's
bytes and chain are unchanged.

``data`` is the frame's payload as JSON. What changes from one recording
of the same steps to the next (wall times, chains, lease epochs, row
timestamps) sits under ``volatile``, last on the line, so a review tool (or
``jq 'del(.volatile)'``) can leave it out. The payload's msgpack values that
JSON lacks are tagged: ``{"$bytes": base64}``, ``{"$ext": code, ...}``
(datetimes and decimals as their text, nested trees as JSON),
``{"$stored": value}`` (a tool's result or model's response as handed
back), ``{"$prefix": [count, tail]}`` (a request that extends the previous
one), ``{"$float": "nan"}``, and ``{"$map": [[key, value], ...]}`` for a map
whose keys are not all plain strings (or start with ``$``). Every line is
checked when written: its JSON re-encodes to the frame's exact payload bytes,
else the line carries ``{"$payload": base64}`` instead; reading re-encodes
each payload and checks the whole chain, so text -> ``.rdj`` -> text keeps
every frame and its chain (a hand edit that breaks them is refused).
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import msgpack

from ...errors import JournalCorruptError, JournalFormatError, UnknownRunError
from ...frames import ChainCheck, Frame
from .._base import Journal, RunRecord, RunUpdate
from .._copy import copy_run
from .._validate import frame_problem, run_problem
from ..memory import MemoryJournal
from ._temp import export_temp

__all__ = ["TEXT_SUFFIXES", "export_text", "import_text", "is_text_path", "read_text", "text_lines"]

#: File names read and written as the text form.
TEXT_SUFFIXES = (".jsonl",)
_FORMAT = 1
#: ext codes whose data is a msgpack tree (shown as JSON), and whose data is UTF-8 text.
_TREE_EXTS = frozenset({8, 9, 10})
_TEXT_EXTS = frozenset({1, 2, 3, 4, 6, 7})
#: Readable tags of the common tree exts: a tool's stored result, a request's prefix delta.
_TREE_TAGS = {10: "$stored", 9: "$prefix"}
_TAG_CODES = {tag: code for code, tag in _TREE_TAGS.items()}


def is_text_path(path: str | os.PathLike[str]) -> bool:
    """True for a file name of the text form (``.jsonl``, e.g. ``run.rdj.jsonl``)."""
    return os.fspath(path).endswith(TEXT_SUFFIXES)


def _pack(tree: Any) -> bytes:
    return msgpack.packb(tree, use_bin_type=True, use_single_float=False)  # type: ignore[no-any-return]


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _to_json(value: Any) -> Any:
    """A msgpack tree as tagged JSON (see the module docstring)."""
    if isinstance(value, msgpack.ExtType):  # a named tuple: before lists and tuples
        code, data = value.code, value.data
        if code in _TREE_EXTS:
            with contextlib.suppress(Exception):
                tree = _unpack(data)
                if _pack(tree) == data:
                    tag = _TREE_TAGS.get(code)
                    return {tag: _to_json(tree)} if tag else {"$ext": code, "tree": _to_json(tree)}
        if code in _TEXT_EXTS:
            with contextlib.suppress(UnicodeDecodeError):
                return {"$ext": code, "text": data.decode("utf-8")}
        return {"$ext": code, "b64": base64.b64encode(data).decode("ascii")}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _to_json(v) for k, v in value.items()}
        return {"$map": [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    return value


def _from_json(value: Any) -> Any:
    """The msgpack tree of tagged JSON (the inverse of :func:`_to_json`)."""
    if isinstance(value, dict) and len(value) == 1:
        ((tag, inner),) = value.items()
        code = _TAG_CODES.get(tag)
        if code is not None:
            return msgpack.ExtType(code, _pack(_from_json(inner)))
    if isinstance(value, dict):
        if "$map" in value and len(value) == 1:
            return {_from_json(k): _from_json(v) for k, v in value["$map"]}
        if "$bytes" in value and len(value) == 1:
            return base64.b64decode(value["$bytes"])
        if "$float" in value and len(value) == 1:
            return float(value["$float"])
        if "$ext" in value and len(value) == 2:
            code = int(value["$ext"])
            if "tree" in value:
                return msgpack.ExtType(code, _pack(_from_json(value["tree"])))
            if "text" in value:
                return msgpack.ExtType(code, str(value["text"]).encode("utf-8"))
            return msgpack.ExtType(code, base64.b64decode(value["b64"]))
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


#: Top-level payload keys that hold wall-clock readings, by frame kind: shown under the
#: line's ``volatile.data`` (not ``data``), so re-recording the same behaviour changes
#: only ``volatile``. Text form only: the frame's payload bytes and chain are unchanged.
VOLATILE_DATA: dict[str, tuple[str, ...]] = {
    "model_request": ("started_at",),
    # the worker (host:pid:random) that started or resumed the run
    "run_start": ("worker",),
    "note": ("worker",),
}


def _merge_volatile(data: Any, moved: dict[str, Any]) -> Any:
    """``data`` with the ``moved`` keys put back, keys in sorted order (as frames store maps)."""
    if not moved:
        return data
    if not isinstance(data, dict):
        raise ValueError("volatile.data given for a payload that is not a map")
    merged = {**data, **moved}
    return {k: merged[k] for k in sorted(merged)}


def _split_payload(kind: str, payload: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The line's ``data`` (or ``$payload``) and the volatile keys taken out of it.

    A key moves only when the reader puts the payload back to the exact bytes
    (checked here); otherwise it stays in ``data``.
    """
    shown = _payload_json(payload)
    names = VOLATILE_DATA.get(kind, ())
    data = shown.get("data")
    if not names or not isinstance(data, dict) or "$map" in data:
        return shown, {}
    moved = {n: data[n] for n in names if n in data}
    if not moved:
        return shown, {}
    rest = {k: v for k, v in data.items() if k not in moved}
    with contextlib.suppress(Exception):
        again = json.loads(json.dumps({"data": rest, "moved": moved}))
        if _pack(_from_json(_merge_volatile(again["data"], again["moved"]))) == payload:
            return {"data": rest}, moved
    return shown, {}


def _payload_json(payload: bytes) -> dict[str, Any]:
    """``{"data": json}`` when it re-encodes to ``payload`` exactly, else ``{"$payload": b64}``."""
    with contextlib.suppress(Exception):
        shown = _to_json(_unpack(payload))
        if _pack(_from_json(json.loads(json.dumps(shown)))) == payload:
            return {"data": shown}
    return {"$payload": base64.b64encode(payload).decode("ascii")}


def _payload_bytes(line: dict[str, Any]) -> bytes:
    if "$payload" in line:
        return base64.b64decode(line["$payload"])
    volatile = line.get("volatile")
    moved = volatile.get("data") if isinstance(volatile, dict) else None
    return _pack(_from_json(_merge_volatile(line.get("data"), moved or {})))


def _dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def frame_line(frame: Frame) -> str:
    """One frame as its line of the text form (no newline).

    Wall-clock keys of the payload (:data:`VOLATILE_DATA`) sit under
    ``volatile.data`` instead of ``data``.
    """
    shown, moved = _split_payload(frame.kind, frame.payload)
    volatile: dict[str, Any] = {"at": frame.at, "chain": frame.chain, "epoch": frame.epoch}
    if moved:
        volatile["data"] = moved
    return _dump(
        {
            "seq": frame.seq,
            "kind": frame.kind,
            "name": frame.name,
            "key": frame.key,
            **shown,
            "volatile": volatile,
        }
    )


def run_line(record: RunRecord) -> str:
    """The run's row as the first line of the text form (no newline)."""
    output = None if record.output is None else _payload_json(record.output)
    return _dump(
        {
            "redrive": "run",
            "format": _FORMAT,
            "run_id": record.run_id,
            "status": record.status,
            "entrypoint": record.entrypoint,
            "input_fp": record.input_fp,
            "output": output,
            "error": record.error,
            "volatile": {
                "created_at": record.created_at,
                "updated_at": record.updated_at,
                "frames": record.next_seq,
                "last_chain": record.last_chain,
            },
        }
    )


def text_lines(record: RunRecord, frames: Iterable[Frame]) -> Iterator[str]:
    """The text form of a run, line by line (each without its newline)."""
    yield run_line(record)
    for frame in frames:
        if frame.seq >= record.next_seq:
            break
        yield frame_line(frame)


def export_text(journal: Journal, run_id: str, path: str | os.PathLike[str]) -> RunRecord:
    """Write run ``run_id`` of ``journal`` to ``path`` as JSON Lines (atomically).

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
    check = ChainCheck(run_id, source=journal.url, advice="The run was not exported.")
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = export_temp(target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            checked = (check.check(f) for f in journal.frames(run_id))
            for line in text_lines(record, checked):
                out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return record


def _bad(path: str, line_no: int, what: str, seq: int | None = None) -> JournalCorruptError:
    return JournalCorruptError(
        f"{path} line {line_no}: {what}; the file is not a redrive run in text form (restore it "
        "from version control, or export the run again with `redrive export RUN -o FILE.jsonl`)",
        seq=seq,
        source=path,
        reason="damaged",
    )


def read_text(path: str | os.PathLike[str]) -> tuple[RunRecord, list[Frame]]:
    """Read a run in text form: its row and its frames, every payload and chain checked.

    Raises:
        JournalFormatError: a text form of another format version.
        JournalCorruptError: a line that is not JSON or not a frame, a payload
            or chain that does not match (a hand edit), or missing frames.
        OSError: the file cannot be read.
    """
    name = os.fspath(path)
    with open(name, encoding="utf-8", newline="\n") as handle:
        # split on "\n" alone: text in a payload may hold U+0085, U+2028 (splitlines' breaks)
        lines = [line for line in handle.read().split("\n") if line.strip()]
    if not lines:
        raise _bad(name, 1, "the file is empty")
    try:
        head = json.loads(lines[0])
    except ValueError as exc:
        raise _bad(name, 1, f"not JSON ({exc})") from None
    if not isinstance(head, dict) or head.get("redrive") != "run":
        raise _bad(name, 1, "the first line is not a run")
    if head.get("format") != _FORMAT:
        raise JournalFormatError(
            f"{name}: text form version {head.get('format')!r}; this redrive reads version "
            f"{_FORMAT}: upgrade redrive",
            source=name,
        )
    run_id = str(head["run_id"])
    volatile = head.get("volatile") or {}
    check = ChainCheck(run_id, source=name, advice="Nothing was imported.")
    frames: list[Frame] = []
    for number, text in enumerate(lines[1:], start=2):
        try:
            line = json.loads(text)
            frame = Frame(
                run_id=run_id,
                seq=int(line["seq"]),
                kind=str(line["kind"]),
                name=str(line["name"]),
                key=str(line["key"]),
                payload=_payload_bytes(line),
                chain=str(line["volatile"]["chain"]),
                at=float(line["volatile"]["at"]),
                epoch=int(line["volatile"].get("epoch", 0)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise _bad(name, number, f"not a frame ({exc})", check.last_good_seq) from None
        problem = frame_problem(frame)
        if problem is not None:
            raise _bad(name, number, f"frame seq {frame.seq}: {problem}", frame.seq)
        frames.append(check.check(frame))
    output = head.get("output")
    record = RunRecord(
        run_id=run_id,
        status=str(head.get("status")),
        next_seq=check.next_seq,
        last_chain=check.prev_chain,
        input_fp=str(head.get("input_fp") or ""),
        entrypoint=head.get("entrypoint"),
        created_at=float(volatile.get("created_at", 0.0)),
        updated_at=float(volatile.get("updated_at", 0.0)),
        output=None if output is None else _payload_bytes(output),
        error=head.get("error"),
    )
    problem = run_problem(record)
    if problem is not None:
        raise _bad(name, 1, f"the run's row is malformed: {problem}")
    if volatile.get("frames") not in (None, record.next_seq):
        raise _bad(
            name, len(lines), f"{record.next_seq} frames where the run says {volatile['frames']}"
        )
    return record, frames


def import_text(path: str | os.PathLike[str], journal: Journal) -> RunRecord:
    """Load the run in text form at ``path`` into ``journal`` (as :func:`import_run` does).

    The whole file is read and checked first, then copied the way an ``.rdj``
    import copies (:func:`~redrive.storage.copy_run`, all or nothing): the run
    keeps its id, status, output and timestamps, and a killed import leaves
    nothing a worker would resume.

    Returns:
        The imported run's row.

    Raises:
        As :func:`read_text`; AppendConflictError when ``journal`` holds
        another run of that id.
    """
    record, frames = read_text(path)
    if not frames:
        raise _bad(os.fspath(path), 1, "the run has no frames")
    staged = MemoryJournal()
    staged.create_run(
        RunRecord(
            run_id=record.run_id,
            input_fp=record.input_fp,
            entrypoint=record.entrypoint,
            created_at=record.created_at,
            updated_at=record.updated_at,
        ),
        frames[0],
    )
    update = (
        RunUpdate(status=record.status, output=record.output, error=record.error)
        if record.status != "running"
        else RunUpdate()
    )
    staged.append(
        record.run_id,
        frames[1:],
        expected_seq=1,
        update=attrs.evolve(update, updated_at=record.updated_at),
    )
    return copy_run(staged, record.run_id, journal, all_or_nothing=True)
