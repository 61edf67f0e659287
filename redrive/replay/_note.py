"""The resume note: what a resumed run's tools already did, as plain text (pure, no I/O).

Loops that rebuild their own prompt on resume (instead of replaying the model
steps) put this note in it, so the model neither repeats a finished call nor
assumes an interrupted one took effect.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..frames import Frame
from ._diff import short
from ._steps import iter_steps

__all__ = ["render_resume_note"]

#: Longest rendering of one result or argument list in the note, in characters.
MAX_FIELD = 160


def _clip(value: Any) -> str:
    text = value if isinstance(value, str) else short(value)
    text = " ".join(text.split())
    return text if len(text) <= MAX_FIELD else text[: MAX_FIELD - 3] + "..."


def _call(name: str, args: Any) -> str:
    if isinstance(args, dict):
        inner = ", ".join(
            f"{k}={_clip(v) if isinstance(v, str) else short(v)}" for k, v in args.items()
        )
        return f"{name}({_clip(inner)})"
    return f"{name}({_clip(args)})"


def render_resume_note(frames: Iterable[Frame], run_id: str = "") -> str:
    """Render the note for a run's recorded tool calls.

    Args:
        frames: the run's frames in seq order (those recorded before the resume).
        run_id: the run, named in the note's first line when given.

    Returns:
        Lines listing the tool calls that completed (with short results), that
        failed (with the error; a retryable one with the idempotency key its
        retry keeps), and that were interrupted with an unknown
        outcome (with their idempotency key and what to reconcile); ``""`` when
        no tool call was recorded.
    """
    done: list[str] = []
    failed: list[str] = []
    unknown: list[str] = []
    for step in iter_steps(frames, run_id or None):
        if step.kind != "tool":
            continue
        call = _call(step.name, step.args)
        key = step.data.get("idempotency_key") or ""
        if step.status == "in_flight":
            unknown.append(f"- {call}: interrupted while running (idempotency key {key})")
        elif step.status == "blocked":
            unknown.append(
                f"- {call}: interrupted while running, not re-run (idempotency key {key})"
            )
        elif step.status == "error":
            error = step.decode_outcome().get("error") or {}
            retry = (
                f" (retryable: calling it again with the same arguments retries the same "
                f"operation, idempotency key {key})"
                if error.get("retryable") is True and key
                else ""
            )
            failed.append(
                f"- {call}: raised {error.get('qualname') or error.get('type')}: "
                f"{_clip(error.get('message', ''))}{retry}"
            )
        else:
            done.append(f"- {call} -> {_clip(step.decode_outcome().get('result'))}")
    if not (done or failed or unknown):
        return ""
    head = f"Run {run_id!r} is resuming" if run_id else "This run is resuming"
    lines = [f"{head} after an interruption. Tool calls made before it:"]
    if done:
        lines.append("Completed (do not call these again; use their results):")
        lines.extend(done)
    if failed:
        lines.append("Failed:")
        lines.extend(failed)
    if unknown:
        lines.append(
            "Outcome unknown (the call started and may or may not have taken effect; check "
            "before calling it again):"
        )
        lines.extend(unknown)
    return "\n".join(lines)
