"""A run's frames read as the steps ``show`` prints (and counted for ``runs`` and ``diff``).

To be replaced by ``redrive.replay.iter_steps`` (one read model of frames for
every reader) when it lands.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..frames import Frame, Kind, decode
from ..storage import Journal

__all__ = ["count_steps", "read_steps"]

_STEP_KINDS = {
    Kind.MODEL_REQUEST.value: "model",
    Kind.TOOL_START.value: "tool",
    Kind.VALUE.value: "value",
}
_END_KINDS = (Kind.MODEL_RESPONSE.value, Kind.TOOL_DONE.value, Kind.TOOL_ERROR.value)


def count_steps(journal: Journal, run_id: str) -> int:
    """Return how many steps (model, tool and value calls) run ``run_id`` opened."""
    return sum(1 for f in journal.frames(run_id) if f.kind in _STEP_KINDS)


def _usage(payload: dict[str, Any]) -> dict[str, int] | None:
    for holder in (payload.get("view"), payload.get("response")):
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if isinstance(usage, dict):
            pick = {
                "input": usage.get("input_tokens", usage.get("prompt_tokens")),
                "output": usage.get("output_tokens", usage.get("completion_tokens")),
            }
            if all(isinstance(v, int) for v in pick.values()):
                return pick  # type: ignore[return-value]
    return None


def _started_at(data: dict[str, Any], default: float) -> float:
    """When a step began: a model request's ``started_at`` (its frames are written at the end)."""
    started = data.get("started_at")
    return float(started) if isinstance(started, int | float) else default


def read_steps(frames: Iterable[Frame]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Pair each step's opening frame with its outcome.

    Args:
        frames: one run's frames in seq order.

    Returns:
        ``(steps, info)``: each step a dict with ``seq``, ``kind`` (``"model"``,
        ``"tool"``, ``"value"``), ``name``, ``key``, ``args``, ``status``
        (``"done"``, ``"error"``, ``"in flight"``), ``duration_ms`` (None in
        flight), ``tokens`` (``{"input", "output"}`` or None), ``error`` and,
        when done, ``result``; ``info`` the run's ``input``, ``entrypoint``,
        ``flags``, ``started_at`` and, once ended, ``end`` (``status``,
        ``output``, ``error``) and ``ended_at`` (seconds since the epoch).
    """
    steps: list[dict[str, Any]] = []
    by_seq: dict[int, dict[str, Any]] = {}
    info: dict[str, Any] = {}
    from ..replay._delta import Expander

    expander = Expander()
    for frame in frames:
        data = decode(frame.payload)
        if not isinstance(data, dict):
            data = {}
        if frame.kind == Kind.MODEL_REQUEST.value:
            data = expander.request(frame, data)
        if frame.kind in _STEP_KINDS:
            step = {
                "seq": frame.seq,
                "kind": _STEP_KINDS[frame.kind],
                "name": frame.name,
                "key": frame.key,
                "args": data.get("args"),
                "at": _started_at(data, frame.at),
                "status": "done" if frame.kind == Kind.VALUE.value else "in flight",
                "duration_ms": 0.0 if frame.kind == Kind.VALUE.value else None,
                "tokens": None,
                "error": None,
            }
            if frame.kind == Kind.VALUE.value:
                step["result"] = data.get("value")
            steps.append(step)
            by_seq[frame.seq] = step
        elif frame.kind in _END_KINDS:
            ref = data.get("step")
            end_of = by_seq.get(ref) if isinstance(ref, int) else None
            if end_of is None:
                continue
            step = end_of
            step["duration_ms"] = round((frame.at - step["at"]) * 1000, 3)
            if frame.kind == Kind.TOOL_ERROR.value:
                err = data.get("error") or {}
                step["status"] = "error"
                step["error"] = f"{err.get('type')}: {err.get('message')}"
            else:
                step["status"] = "done"
                step["result"] = data.get("result", data.get("response"))
            if frame.kind == Kind.MODEL_RESPONSE.value:
                step["tokens"] = _usage(data)
        elif frame.kind == Kind.RUN_START.value:
            info["input"] = data.get("input")
            info["entrypoint"] = data.get("entrypoint")
            info["flags"] = data.get("flags")
            info["started_at"] = frame.at
        elif frame.kind == Kind.RUN_END.value:
            info["end"] = {k: data.get(k) for k in ("status", "output", "error")}
            info["ended_at"] = frame.at
    for step in steps:
        step.pop("at", None)
    return steps, info
