"""What happened to a run besides its steps: interruptions, resumes, resolutions, decisions.

Read from the run's frames, for ``redrive show`` and the timeline
(:mod:`._timeline`), one reading for both:

* an **interruption**: the run stopped with nobody asking (a crash, a kill, a
  timeout) and was resumed later. Each resumed execution writes a ``resumed``
  note before its first frame (worker, resume point, model steps replayed);
  the interruption runs from the last frame of the execution before it (its
  worker named by that execution's ``run_start`` or ``resumed`` note) to it.
  A stop at an approval request is a **suspension** (the run waited for a person);
* a **resume**: which worker resumed, at which seq, replaying how many model calls;
* a **resolution**: a person's answer for an in-flight step (``redrive resolve``:
  who and why) or the tool's ``recover()``;
* a **decision**: an approval's answer (approved or rejected, by whom).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from ..frames import Frame, Kind
from ._pause import PAUSED_NOTE as _PAUSED
from ._steps import RecordedStep
from ._usage import RESUMED

__all__ = ["Event", "own_time", "run_events", "settled_at"]

#: The note an approval request writes (:mod:`._approval`).
_APPROVAL_REQUESTED = "approval_requested"


@attrs.frozen(kw_only=True)
class Event:
    """One thing that happened to a run.

    Attributes:
        kind: ``"interrupted"``, ``"suspended"``, ``"paused"``, ``"resumed"``,
            ``"resolved"``, ``"recovered"`` or ``"decided"``.
        at: when, seconds since the epoch (an interruption: when the stopped
            execution wrote its last frame).
        seq: the frame it is read from (an interruption: the last frame before it).
        text: one line for a person.
        until: for an interruption or suspension, when the run went on (seconds
            since the epoch), else None.
        worker: the worker concerned (that stopped, or resumed), or None.
        by, reason: who decided or resolved, and why (None when not recorded).
        step: the seq of the step concerned, or None.
    """

    kind: str
    at: float
    seq: int
    text: str
    until: float | None = None
    worker: str | None = None
    by: str | None = None
    reason: str | None = None
    step: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain data (``at``/``until`` in seconds since the epoch)."""
        return attrs.asdict(self)


def _is_resolution(frame: Frame, data: dict[str, Any]) -> bool:
    if frame.kind == Kind.TOOL_DONE.value:
        return bool(data.get("recovered"))
    return frame.kind == Kind.NOTE.value and data.get("event") == "resolved"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def settled_at(frames: list[Frame], outcome_seq: int) -> float | None:
    """When a step settled by a resolution or ``recover()`` last ran, as far as the journal knows.

    That is the last frame written before the outcome at ``outcome_seq`` that
    is not itself a resume note or a resolution: the end of the execution that
    was running the step (its crash), not the time of the resolution.
    """
    for frame in reversed(frames[:outcome_seq]):
        data = frame.data() if frame.kind in (Kind.NOTE.value, Kind.TOOL_DONE.value) else {}
        if frame.name == RESUMED and frame.kind == Kind.NOTE.value:
            continue
        if _is_resolution(frame, data):
            continue
        return frame.at
    return None


def run_events(frames: Iterable[Frame]) -> list[Event]:
    """Read a run's interruptions, resumes, resolutions and decisions.

    Args:
        frames: one run's frames in seq order (checked by whoever read them).

    Returns:
        The events, each an :class:`Event`, in the order they happened (``at``).
    """
    listed = list(frames)
    events: list[Event] = []
    worker: str | None = None
    names: dict[int, str] = {}
    last_step_frame: Frame | None = None
    for frame in listed:
        kind = frame.kind
        if kind in (Kind.MODEL_REQUEST.value, Kind.TOOL_START.value, Kind.VALUE.value):
            names[frame.seq] = frame.name
        if kind == Kind.RUN_START.value:
            found = frame.data().get("worker")
            worker = found if isinstance(found, str) else None
        elif kind == Kind.NOTE.value and frame.name == RESUMED:
            data = frame.data()
            resumer = data.get("worker") if isinstance(data.get("worker"), str) else None
            before = last_step_frame
            if before is not None:
                gap = frame.at - before.at
                waited = before.kind == Kind.NOTE.value and before.name == _APPROVAL_REQUESTED
                paused = before.kind == Kind.NOTE.value and before.name == _PAUSED
                what = "suspended" if waited else "paused" if paused else "interrupted"
                why = (
                    "waiting for a decision"
                    if waited
                    else f"paused ({_pause_text(before)})"
                    if paused
                    else "stopped (crash, kill or timeout)"
                )
                events.append(
                    Event(
                        kind=what,
                        at=before.at,
                        seq=before.seq,
                        until=frame.at,
                        worker=worker,
                        text=f"{what} after seq {before.seq}: worker {worker or '(unknown)'} "
                        f"{why}; {_seconds(gap)} until the resume",
                    )
                )
            replayed = data.get("replayed_models")
            count = len(replayed) if isinstance(replayed, list) else 0
            events.append(
                Event(
                    kind="resumed",
                    at=frame.at,
                    seq=frame.seq,
                    worker=resumer,
                    text=f"resumed at seq {frame.seq} by worker {resumer or '(unknown)'}; "
                    f"{count} model call(s) replayed, not made again",
                )
            )
            worker = resumer
        elif kind in (Kind.TOOL_DONE.value, Kind.NOTE.value):
            data = frame.data()
            ref = data.get("step")
            if _is_resolution(frame, data) and isinstance(ref, int):
                who = data.get("resolved") if kind == Kind.TOOL_DONE.value else data
                name = names.get(ref, frame.name)
                if isinstance(who, dict) and who.get("by"):
                    state = "done" if kind == Kind.TOOL_DONE.value else "not done"
                    events.append(
                        Event(
                            kind="resolved",
                            at=frame.at,
                            seq=frame.seq,
                            step=ref,
                            by=str(who.get("by")),
                            reason=str(who.get("reason") or ""),
                            text=f"seq {ref} ({name}) resolved as {state} by {who.get('by')}: "
                            f"{who.get('reason') or ''}",
                        )
                    )
                else:
                    events.append(
                        Event(
                            kind="recovered",
                            at=frame.at,
                            seq=frame.seq,
                            step=ref,
                            text=f"seq {ref} ({name}) settled by the tool's recover()",
                        )
                    )
        if kind == Kind.VALUE.value and frame.name == "approval":
            data = frame.data()
            value = data.get("value")
            label = data.get("args", {}).get("label") if isinstance(data.get("args"), dict) else ""
            if isinstance(value, dict):
                verdict = "approved" if value.get("approved") else "rejected"
                by = value.get("by")
                note = value.get("note")
                events.append(
                    Event(
                        kind="decided",
                        at=frame.at,
                        seq=frame.seq,
                        step=frame.seq,
                        by=str(by) if by else None,
                        reason=str(note) if note else None,
                        text=f"approval {label!s} {verdict} by {by or 'someone'}"
                        + (f": {note}" if note else ""),
                    )
                )
        marks = events[-1].seq == frame.seq if events else False
        if not (marks and events[-1].kind in ("resumed", "resolved", "recovered")):
            last_step_frame = frame  # what ran last (a resolution comes between executions)
    return sorted(events, key=lambda e: e.at)  # an interruption is read at its resume


def _pause_text(note: Frame) -> str:
    """``kind: reason`` of a ``paused`` note (see :mod:`._pause`), for one line."""
    data = note.data().get("data")
    if not isinstance(data, dict):
        return "reason not recorded"
    kind, reason = data.get("kind"), data.get("reason")
    return f"{kind}: {reason}" if reason else str(kind)


def own_time(step: RecordedStep, listed: list[Frame]) -> tuple[float, float | None, bool]:
    """``(begin, end, cut)`` of a step's last attempt, in seconds since the epoch.

    The step's own time, not what came after it: a re-attempt begins at its
    ``attempt`` note; a step settled by a resolution or ``recover()`` (or still
    in flight) ends, as far as the journal knows, with the last frame of the
    execution that ran it (``cut``: its end is that execution's stop, not the
    step's), never at the resolution a person wrote minutes later.
    """
    started = step.data.get("started_at") if step.kind == "model" else None
    begin = float(started) if isinstance(started, int | float) else step.start.at
    if step.last_attempt_seq is not None and step.last_attempt_seq < len(listed):
        begin = listed[step.last_attempt_seq].at
    if step.end is None:
        later = [e.seq for e in _resumes(listed) if e.seq > step.seq]
        stop = settled_at(listed, later[0] if later else len(listed))
        return begin, None if stop is None else max(stop, begin), True
    outcome = step.outcome or {}
    if step.end.kind == Kind.TOOL_DONE.value and outcome.get("recovered"):
        stop = settled_at(listed, step.end.seq)
        return begin, max(stop if stop is not None else begin, begin), True
    return begin, step.end.at, False


def _resumes(listed: list[Frame]) -> list[Frame]:
    return [f for f in listed if f.kind == Kind.NOTE.value and f.name == RESUMED]
