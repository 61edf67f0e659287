"""A run's steps as ``show`` prints them, read by :class:`redrive.replay.StepReader`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .._jsontext import list_at, token_counts
from ..frames import ChainCheck, Frame, Kind
from ..replay import RecordedStep, StepReader, own_time
from ..storage import Journal

__all__ = ["count_steps", "read_steps", "response_text"]

#: Frame kinds that open a step (a model, tool or value call).
_OPENING = frozenset({Kind.MODEL_REQUEST.value, Kind.TOOL_START.value, Kind.VALUE.value})


def count_steps(journal: Journal, run_id: str) -> int:
    """Return how many steps (model, tool and value calls) run ``run_id`` opened.

    Counts opening frames without decoding any payload (``runs`` counts every run), checking
    each frame's seq and chain on the way, so a damaged run is told apart.

    Raises:
        JournalCorruptError: a frame fails its seq or chain check (or the log holds the
            run damaged).
    """
    check = ChainCheck(run_id)
    return sum(1 for f in journal.frames(run_id) if check.check(f).kind in _OPENING)


def _usage(outcome: dict[str, Any]) -> dict[str, int] | None:
    """Return a model response's token usage as ``{"input", "output"}``, or None."""
    for holder in (outcome.get("view"), outcome.get("response")):
        i, o = token_counts(holder.get("usage") if isinstance(holder, dict) else None)
        if i is not None and o is not None:
            return {"input": i, "output": o}
    return None


def _call_text(call: Any) -> str:
    """One tool call a model asked for, as ``name(arguments)``."""
    if not isinstance(call, dict):
        return str(call)
    arguments = call.get("arguments", call.get("input"))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, sort_keys=True, default=str)
    return f"{call.get('name')}({arguments})"


def response_text(outcome: dict[str, Any]) -> Any:
    """What a model step answered, as a person reads it (the semantic view).

    For a wrapped SDK client's step, the view's text, the tool calls it asked
    for (``name(arguments)``) and its error; otherwise the recorded response
    (a ``redrive.model`` callable's return value).
    """
    view = outcome.get("view")
    if isinstance(view, dict):
        parts: list[str] = []
        if view.get("text"):
            parts.append(f"text: {json.dumps(view['text'])}")
        calls = list_at(view, "tool_calls")
        if calls:
            parts.append("tool calls: " + ", ".join(_call_text(c) for c in calls))
        if view.get("error") is not None:
            parts.append(f"error: {json.dumps(view['error'], default=str)}")
        if parts:
            return "; ".join(parts)
    return outcome.get("result", outcome.get("response"))


def _shown(step: RecordedStep, listed: list[Frame]) -> dict[str, Any]:
    """Return one step as ``show`` prints it (see :func:`read_steps`)."""
    item: dict[str, Any] = {
        "seq": step.seq,
        "kind": step.kind,
        "name": step.name,
        "key": step.key,
        "args": step.args,
        "status": "in flight" if step.end is None else step.status,
        "attempts": step.attempts,
        "duration_ms": None,
        "tokens": None,
        "error": None,
    }
    if step.end is None:
        return item
    # the step's own time: a model call from its started_at, a re-executed tool from its
    # ``attempt`` note, a step settled by a person or recover() until its worker stopped
    began, ended, _ = own_time(step, listed)
    ended = step.end.at if ended is None else ended
    item["duration_ms"] = 0.0 if step.end is step.start else round((ended - began) * 1000, 3)
    outcome = step.decode_outcome()
    if outcome.get("recovered"):
        who = outcome.get("resolved")
        item["settled"] = (
            f"resolved by {who.get('by')}: {who.get('reason')}"
            if isinstance(who, dict)
            else "settled by the tool's recover()"
        )
    if step.end.kind == Kind.TOOL_ERROR.value:
        error = outcome.get("error") or {}
        item["error"] = f"{error.get('type')}: {error.get('message')}"
    elif step.end.kind == Kind.VALUE.value:
        item["result"] = outcome.get("value")
    else:
        item["result"] = outcome.get("result", outcome.get("response"))
    if step.end.kind == Kind.MODEL_RESPONSE.value:
        item["tokens"] = _usage(outcome)
        item["response"] = response_text(outcome)
    return item


def read_steps(frames: Iterable[Frame]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read one run's frames as the steps and run facts ``show`` prints.

    Args:
        frames: one run's frames in seq order.

    Returns:
        ``(steps, info)``: each step a dict with ``seq``, ``kind`` (``"model"``,
        ``"tool"``, ``"value"``), ``name``, ``key``, ``args``, ``status``
        (``"done"``, ``"error"``, ``"blocked"``, ``"in flight"``), ``attempts``
        (1 + re-executions after a crash), ``duration_ms`` (milliseconds, of
        the last attempt; None in flight), ``tokens`` (``{"input", "output"}``
        or None), ``error`` and, once finished, ``result`` (and for a model step
        ``response``: :func:`response_text`); ``info`` the run's ``input``,
        ``entrypoint``, ``flags``, ``started_at`` and, once ended, ``end`` (``status``, ``output``,
        ``error``) and ``ended_at`` (seconds since the epoch).

    Raises:
        JournalCorruptError: the frames fail their seq or chain check, or an
            outcome refers to no step.
    """
    reader = StepReader()
    listed = list(frames)
    steps = [_shown(step, listed) for step in reader.read(listed)]
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
