"""The DuckDB journal's log records: their forms and their validation (pure).

Each record of the ``.rdlog`` next to a DuckDB journal is a list: ``["run",
run_row]``, ``["frames", run_row, [frame_row, ...]]`` or ``["decision",
{fields}]``. A record with a good checksum may still be malformed (written by
another version, or hostile): :func:`parse_record` checks its shape and types
before anything is applied, and raises :class:`BadRecord` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from ..frames import Frame
from ._base import Decision, RunRecord
from ._sqlschema import FRAME_ATTRS, RUN_COLUMNS
from ._validate import frame_problem, run_problem

__all__ = [
    "BadRecord",
    "LogRecord",
    "after",
    "check_frames",
    "damaged_record",
    "decision_record",
    "frames_record",
    "parse_record",
    "position",
    "record_run",
    "run_record",
]


@attrs.frozen
class LogRecord:
    """One parsed log record: a run row, with frames, or a decision."""

    tag: str
    row: RunRecord | None = None
    frames: list[Frame] = attrs.field(factory=list)
    decision: Decision | None = None
    #: for a ``damaged`` record: ``(run_id, what was found)``
    damaged: tuple[str, str] | None = None


def run_record(row: RunRecord) -> list[Any]:
    """The log record that sets a run's row."""
    return ["run", _run_row(row)]


def frames_record(row: RunRecord, frames: Sequence[Frame]) -> list[Any]:
    """The log record that appends ``frames`` to a run and sets its row."""
    return ["frames", _run_row(row), [[getattr(f, a) for a in FRAME_ATTRS] for f in frames]]


def decision_record(decision: Decision) -> list[Any]:
    """The log record of an approval decision."""
    return ["decision", attrs.asdict(decision)]


def damaged_record(run_id: str, reason: str) -> list[Any]:
    """The log record that marks a run damaged (what was found, as a sentence)."""
    return ["damaged", {"run_id": run_id, "reason": reason}]


def record_run(record: Any) -> str | None:
    """The run a log record speaks for, read from its raw shape (None: it names none).

    Works on a malformed record too, so damage is charged to its run only.
    """
    if isinstance(record, list) and len(record) >= 2:
        body = record[1]
        if isinstance(body, list) and body and isinstance(body[0], str):
            return body[0]
        if isinstance(body, dict) and isinstance(body.get("run_id"), str):
            return str(body["run_id"])
    return None


def _run_row(record: RunRecord) -> list[Any]:
    return [getattr(record, c) for c in RUN_COLUMNS]


def parse_record(record: Any) -> LogRecord:
    """Check one log record's shape and types and return it parsed.

    Raises:
        BadRecord: the record is not a well-formed journal record (what is
            wrong is the message).
    """
    if not isinstance(record, list) or not record or not isinstance(record[0], str):
        raise BadRecord(f"expected a list starting with a record type, got {_shape(record)}")
    tag = record[0]
    if tag == "run":
        _arity(record, 2)
        return LogRecord("run", row=_run_record(record[1]))
    if tag == "frames":
        _arity(record, 3)
        row = _run_record(record[1])
        if not isinstance(record[2], list):
            raise BadRecord(f"frames: expected a list of frame rows, got {_shape(record[2])}")
        return LogRecord(
            "frames", row=row, frames=[_frame_of(f, i) for i, f in enumerate(record[2])]
        )
    if tag == "decision":
        _arity(record, 2)
        return LogRecord("decision", decision=_decision(record[1]))
    if tag == "damaged":
        _arity(record, 2)
        fields = record[1]
        if not isinstance(fields, dict) or not all(
            isinstance(fields.get(k), str) for k in ("run_id", "reason")
        ):
            raise BadRecord(f"damaged: expected a map of run_id and reason, got {_shape(fields)}")
        return LogRecord("damaged", damaged=(fields["run_id"], fields["reason"]))
    raise BadRecord(f"unknown record type {tag!r} (expected run, frames, decision or damaged)")


_RUN_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "run_id": (str,),
    "status": (str,),
    "next_seq": (int,),
    "last_chain": (str,),
    "input_fp": (str,),
    "entrypoint": (str, type(None)),
    "created_at": (float, int),
    "updated_at": (float, int),
    "output": (bytes, type(None)),
    "error": (str, type(None)),
    "lease_owner": (str, type(None)),
    "lease_epoch": (int,),
    "lease_expires": (float, int, type(None)),
}
_FRAME_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "run_id": (str,),
    "seq": (int,),
    "kind": (str,),
    "name": (str,),
    "key": (str,),
    "payload": (bytes,),
    "chain": (str,),
    "at": (float, int),
    "epoch": (int,),
}
_DECISION_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "run_id": (str,),
    "name": (str,),
    "approved": (bool,),
    "by": (str,),
    "at": (float, int),
    "note": (str,),
}
#: Largest seq / epoch a journal stores (a signed 64-bit column).
_INT_MAX: Final = 2**63 - 1


class BadRecord(ValueError):
    """A log record with a good checksum that is not a well-formed journal record."""


def _shape(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _arity(record: list[Any], size: int) -> None:
    if len(record) != size:
        raise BadRecord(f"{record[0]}: expected {size} items, got {len(record)}")


def _typed(what: str, values: dict[str, Any], types: dict[str, tuple[type, ...]]) -> None:
    for name, allowed in types.items():
        value = values[name]
        if isinstance(value, bool) and bool not in allowed:
            raise BadRecord(f"{what}.{name}: expected {allowed[0].__name__}, got a bool")
        if not isinstance(value, allowed):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
            raise BadRecord(f"{what}.{name}: expected {names}, got {_shape(value)}")
        if isinstance(value, int) and not isinstance(value, bool):
            if allowed[0] is int and not 0 <= value <= _INT_MAX:
                raise BadRecord(f"{what}.{name}: {value} is out of range 0..{_INT_MAX}")
            if allowed[0] is float and abs(value) > _INT_MAX:
                raise BadRecord(f"{what}.{name}: {value} is out of range")


def _row(what: str, row: Any, columns: Sequence[str]) -> dict[str, Any]:
    if not isinstance(row, list) or len(row) != len(columns):
        raise BadRecord(f"{what}: expected a list of {len(columns)} values, got {_shape(row)}")
    return dict(zip(columns, row, strict=True))


def _run_record(row: Any) -> RunRecord:
    values = _row("run row", row, RUN_COLUMNS)
    _typed("run", values, _RUN_TYPES)
    record = RunRecord(**values)
    problem = run_problem(record)
    if problem is not None:
        raise BadRecord(f"run {values['run_id']!r}: {problem}")
    return record


def _frame_of(row: Any, index: int) -> Frame:
    values = _row(f"frame row {index}", row, FRAME_ATTRS)
    _typed(f"frame {index}", values, _FRAME_TYPES)
    frame = Frame(**values)
    problem = frame_problem(frame)
    if problem is not None:
        raise BadRecord(f"frame {index} (run {values['run_id']!r} seq {values['seq']}): {problem}")
    return frame


def _decision(fields: Any) -> Decision:
    if not isinstance(fields, dict) or set(fields) != set(_DECISION_TYPES):
        keys = sorted(map(str, fields)) if isinstance(fields, dict) else _shape(fields)
        raise BadRecord(f"decision: expected a map with keys {sorted(_DECISION_TYPES)}, got {keys}")
    _typed("decision", fields, _DECISION_TYPES)
    return Decision(**fields)


def check_frames(row: RunRecord, frames: Sequence[Frame], next_held: int | None) -> None:
    """Check that a frames record continues its run densely and matches its run row."""
    expected = next_held
    for frame in frames:
        if frame.run_id != row.run_id:
            raise BadRecord(
                f"frames: a frame of run {frame.run_id!r} in a record of run {row.run_id!r}"
            )
        if expected is not None and frame.seq != expected:
            raise BadRecord(
                f"frames: run {row.run_id!r} seq {frame.seq} where seq {expected} was expected"
            )
        expected = frame.seq + 1
    if frames and (row.next_seq, row.last_chain) != (frames[-1].seq + 1, frames[-1].chain):
        raise BadRecord(
            f"frames: run {row.run_id!r} row says next_seq {row.next_seq} and last chain "
            f"{row.last_chain} after a frame at seq {frames[-1].seq} of chain {frames[-1].chain}"
        )


def position(record: list[Any]) -> tuple[str | None, int | None]:
    """Return ``(run_id, seq)`` of the last frame a (validated) record speaks for."""
    tag = record[0]
    if tag == "frames" and record[2]:
        return record[1][0], record[2][-1][1]
    if tag in ("run", "frames"):
        next_seq = record[1][2]
        return record[1][0], next_seq - 1 if next_seq > 0 else None
    return record_run(record), None


def after(last: tuple[str | None, int | None]) -> str:
    run_id, seq = last
    if run_id is None:
        return "No record before it could be read. "
    at = f" seq {seq}" if seq is not None else ""
    return f"The last good record before it is of run {run_id!r}{at}. "
