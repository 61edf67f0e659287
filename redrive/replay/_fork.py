"""Time travel: fork a run at a step (where two runs differ: :mod:`._rundiff`)."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import AppendConflictError, UnknownRunError
from ..frames import Frame
from ..storage import Journal, RunRecord, copy_run
from ._steps import RecordedStep, StepReader, iter_steps

__all__ = ["fork"]


def _open_steps(frames: Iterable[Frame], run_id: str) -> dict[int, RecordedStep]:
    """Return the steps opened in ``frames`` that have no outcome in them, by seq."""
    return {step.seq: step for step in iter_steps(frames, run_id) if step.in_flight}


def fork(journal: Journal, run_id: str, at_seq: int, new_run_id: str) -> RunRecord:
    """Copy run ``run_id``'s frames before ``at_seq`` into a new run that then continues live.

    The new run replays the copied steps and goes live at the first step the
    loop asks for after them (try another prompt or model from step N). Frames
    are re-chained under ``new_run_id``; its ``run_start`` keeps the input and
    entrypoint and adds ``forked_from: {run_id, at_seq}``. A ``run_end`` is
    never copied, so the new run is ``running``.

    Args:
        journal: holds the source run and receives the new one.
        run_id: the source run.
        at_seq: the first seq *not* copied; it must be a step boundary (no
            step opened before it has its outcome at or after it). ``1``
            copies only ``run_start``.
        new_run_id: the new run's id (must not exist).

    Returns:
        The new run's index row.

    Raises:
        UnknownRunError: no run ``run_id``.
        ValueError: ``at_seq`` out of range or inside a step (the message names
            the nearest boundaries), or ``new_run_id`` already exists.
    """
    record = journal.get_run(run_id)
    if record is None:
        raise UnknownRunError(
            f"cannot fork run {run_id!r}: it is not in journal {journal.url}; check the run id",
            run_id=run_id,
        )
    if not 1 <= at_seq <= record.next_seq:
        raise ValueError(
            f"cannot fork run {run_id!r} at seq {at_seq}: pick a seq from 1 to {record.next_seq} "
            "(the first frame not copied)"
        )
    if journal.get_run(new_run_id) is not None:
        raise ValueError(f"cannot fork into run {new_run_id!r}: it already exists; pick a new id")
    open_ = _open_steps([f for f in journal.frames(run_id) if f.seq < at_seq], run_id)
    if open_:
        first = min(open_)
        boundaries = _boundaries(journal, run_id)
        before = max((b for b in boundaries if b <= first), default=1)
        after = min((b for b in boundaries if b > at_seq), default=record.next_seq)
        opened = open_[first].start
        raise ValueError(
            f"cannot fork run {run_id!r} at seq {at_seq}: the step opened at seq {first} "
            f"({opened.kind} {opened.name}) has its outcome at or after it, so the "
            "fork would hold a step in flight. "
            + _boundary_hint(journal, run_id, before, after, at_seq)
        )
    try:
        return copy_run(
            journal,
            run_id,
            journal,
            upto=at_seq,
            new_id=new_run_id,
            reopen=True,
            start_extra={"forked_from": {"run_id": run_id, "at_seq": at_seq}},
        )
    except AppendConflictError:
        raise ValueError(f"cannot fork into run {new_run_id!r}: it was created meanwhile") from None


def _boundary_hint(journal: Journal, run_id: str, before: int, after: int, at_seq: int) -> str:
    """Name the boundaries around a refused cut; the earlier one only when it is safe.

    A fork before a recorded side-effecting tool step (not read-only, not
    restart safe) makes the new run call it again (DESIGN C5), so the earlier
    boundary is named with that warning instead of as a choice.
    """
    unsafe = [
        step
        for step in iter_steps((f for f in journal.frames(run_id) if f.seq < at_seq), run_id)
        if before <= step.seq < at_seq
        and step.kind == "tool"
        and not (step.data.get("read_only") or step.data.get("restart_safe"))
    ]
    if not unsafe:
        return f"Fork at seq {before} (before that step) or {after} (after it)."
    names = ", ".join(sorted({f"{s.name} (seq {s.seq})" for s in unsafe}))
    return (
        f"Fork at seq {after} (after it). A fork at seq {before}, before it, would make the "
        f"new run call the side-effecting {names} again."
    )


def _boundaries(journal: Journal, run_id: str) -> list[int]:
    """Return every seq at which the run can be forked."""
    out = []
    open_: set[int] = set()
    reader = StepReader(run_id)
    for frame in journal.frames(run_id):
        if frame.seq > 0 and not open_:
            out.append(frame.seq)
        step = reader.feed(frame)
        if step is not None:
            open_.add(step.seq)
        for seq in [seq for seq in open_ if reader.steps[seq].end is not None]:
            open_.discard(seq)
            reader.forget(seq)
    return out
