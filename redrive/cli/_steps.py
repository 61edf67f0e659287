"""A run's steps as ``show`` prints them, read by :class:`redrive.replay.StepReader`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..frames import Frame, Kind
from ..replay import RecordedStep, StepReader
from ..storage import Journal

__all__ = ["count_steps", "read_steps"]

#: Frame kinds that open a step (a model, tool or value call).
_OPENING = frozenset({Kind.MODEL_REQUEST.value, Kind.TOOL_START.value, Kind.VALUE.value})


def count_steps(journal: Journal, run_id: str) -> int:
    """Return how many steps (model, tool and value calls) run ``run_id`` opened.

    Counts opening frames without decoding any payload (``runs`` counts every run).
    """
    return sum(1 for f in journal.frames(run_id) if f.kind in _OPENING)


def _usage(outcome: dict[str, Any]) -> dict[str, int] | None:
    """Return a model response's token usage as ``{"input", "output"}``, or None."""
    for holder in (outcome.get("view"), outcome.get("response")):
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if isinstance(usage, dict):
            pick = {
                "input": usage.get("input_tokens", usage.get("prompt_tokens")),
                "output": usage.get("output_tokens", usage.get("completion_tokens")),
            }
            if all(isinstance(v, int) for v in pick.values()):
                return pick  # type: ignore[return-value]
    return None


def _shown(step: RecordedStep) -> dict[str, Any]:
    """Return one step as ``show`` prints it (see :func:`read_steps`)."""
    item: dict[str, Any] = {
        "seq": step.seq,
        "kind": step.kind,
        "name": step.name,
        "key": step.key,
        "args": step.args,
        "status": "in flight" if step.end is None else step.status,
        "duration_ms": None,
        "tokens": None,
        "error": None,
    }
    if step.end is None:
        return item
    # a model request's frames are written when the call ends: it began at started_at
    started = step.data.get("started_at")
    began = float(started) if isinstance(started, int | float) else step.start.at
    item["duration_ms"] = 0.0 if step.end is step.start else round((step.end.at - began) * 1000, 3)
    outcome = step.decode_outcome()
    if step.end.kind == Kind.TOOL_ERROR.value:
        error = outcome.get("error") or {}
        item["error"] = f"{error.get('type')}: {error.get('message')}"
    elif step.end.kind == Kind.VALUE.value:
        item["result"] = outcome.get("value")
    else:
        item["result"] = outcome.get("result", outcome.get("response"))
    if step.end.kind == Kind.MODEL_RESPONSE.value:
        item["tokens"] = _usage(outcome)
    return item


def read_steps(frames: Iterable[Frame]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read one run's frames as the steps and run facts ``show`` prints.

    Args:
        frames: one run's frames in seq order.

    Returns:
        ``(steps, info)``: each step a dict with ``seq``, ``kind`` (``"model"``,
        ``"tool"``, ``"value"``), ``name``, ``key``, ``args``, ``status``
        (``"done"``, ``"error"``, ``"blocked"``, ``"in flight"``),
        ``duration_ms`` (milliseconds; None in flight), ``tokens``
        (``{"input", "output"}`` or None), ``error`` and, once finished,
        ``result``; ``info`` the run's ``input``, ``entrypoint``, ``flags``,
        ``started_at`` and, once ended, ``end`` (``status``, ``output``,
        ``error``) and ``ended_at`` (seconds since the epoch).

    Raises:
        JournalCorruptError: the frames fail their seq or chain check, or an
            outcome refers to no step.
    """
    reader = StepReader()
    steps = [_shown(step) for step in reader.read(frames)]
    info: dict[str, Any] = {}
    start, end = reader.run_start_frame, reader.run_end_frame
    if reader.run_start is not None and start is not None:
        data = reader.run_start
        info.update(
            input=data.get("input"),
            entrypoint=data.get("entrypoint"),
            flags=data.get("flags"),
            started_at=start.at,
        )
    if reader.run_end is not None and end is not None:
        data = reader.run_end
        info["end"] = {k: data.get(k) for k in ("status", "output", "error")}
        info["ended_at"] = end.at
    return steps, info
