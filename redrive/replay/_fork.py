"""Time travel: fork a run at a step, and find the first step where two runs differ."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from ..errors import AppendConflictError, UnknownRunError
from ..frames import Frame
from ..storage import Journal, RunRecord, copy_run
from ._diff import diff_values, format_diff, short
from ._policy import match_view
from ._steps import RecordedStep, StepReader, iter_steps

__all__ = ["RunDiff", "StepView", "diff_runs", "fork"]


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


@attrs.frozen(kw_only=True)
class StepView:
    """One step of a run as :func:`diff_runs` compares it.

    Attributes:
        index: 0-based position among the run's steps.
        seq: seq of the step's opening frame.
        kind: ``"model"``, ``"tool"`` or ``"value"``.
        name: the step name.
        args: the match view of the arguments (model-minted ids left out).
        outcome: ``{"result": ...}``, ``{"error": ...}``, ``{"response": ...}``,
            ``{"value": ...}``, or ``{"in_flight": True}``.
    """

    index: int
    seq: int
    kind: str
    name: str
    args: Any
    outcome: Any


@attrs.frozen(kw_only=True)
class RunDiff:
    """Where two runs first differ (from :func:`diff_runs`).

    Attributes:
        a, b: the two runs' ids.
        index: 0-based step index of the first difference (equal to the
            shorter run's step count when one run only has more steps, or to
            both counts when only the outputs differ).
        what: ``"step"`` (kind or name), ``"args"``, ``"outcome"``, ``"missing"``
            (one run has no step there) or ``"output"``.
        step_a, step_b: the steps at ``index`` (None where a run has none).
        diff: ``(path, a, b)`` leaf differences of the compared values.
    """

    a: str
    b: str
    index: int
    what: str
    step_a: StepView | None
    step_b: StepView | None
    diff: list[tuple[str, Any, Any]]

    def __str__(self) -> str:
        def describe(step: StepView | None) -> str:
            if step is None:
                return "no step"
            return f"seq {step.seq} {step.kind} {step.name} args {short(step.args)}"

        lines = [
            f"runs {self.a!r} and {self.b!r} differ at step {self.index} ({self.what}):",
            f"  {self.a}: {describe(self.step_a)}",
            f"  {self.b}: {describe(self.step_b)}",
        ]
        if self.diff:
            lines.append(f"  differences ({self.a} -> {self.b}):")
            lines.append(format_diff(self.diff))
        return "\n".join(lines)


def _outcome(step: RecordedStep) -> Any:
    """The outcome of ``step`` as :class:`StepView` shows it."""
    if step.end is None:
        return {"in_flight": True}
    data = step.decode_outcome()
    if step.kind == "value":
        return {"value": data.get("value")}
    if step.status == "error":
        error = data.get("error") or {}
        return {"error": {"type": error.get("type"), "message": error.get("message")}}
    if step.kind == "model":
        return {"response": data.get("response")}
    return {"result": data.get("result")}


def _steps(frames: Iterable[Frame], run_id: str) -> tuple[list[StepView], Any]:
    reader = StepReader(run_id, verify=False)
    steps = [
        StepView(
            index=index,
            seq=step.seq,
            kind=step.kind,
            name=step.name,
            args=match_view(step.args, kind=step.kind),
            outcome=_outcome(step),
        )
        for index, step in enumerate(reader.read(frames))
    ]
    end = reader.run_end
    output = None if end is None else {"status": end.get("status"), "output": end.get("output")}
    return steps, output


def _frames_of(source: Journal | Iterable[Frame], run_id: str) -> Iterator[Frame]:
    if isinstance(source, Journal):
        if source.get_run(run_id) is None:
            raise UnknownRunError(
                f"cannot diff run {run_id!r}: it is not in journal {source.url}", run_id=run_id
            )
        return source.frames(run_id)
    return iter(source)


def diff_runs(
    a: str,
    b: str,
    *,
    journal: Journal | None = None,
    journal_b: Journal | None = None,
    frames_a: Iterable[Frame] | None = None,
    frames_b: Iterable[Frame] | None = None,
) -> RunDiff | None:
    """Return where runs ``a`` and ``b`` first differ, or None when their steps and outputs agree.

    Steps (model, tool and value steps, in seq order) are compared pairwise:
    first kind and name, then arguments (model-minted ids left out), then
    outcome; then the runs' final status and output. Model requests are
    compared in full (prefix deltas resolved).

    Args:
        a: the first run's id.
        b: the second run's id.
        journal: where both runs live (or run ``a`` when ``journal_b`` is given).
        journal_b: where run ``b`` lives, when in another journal (an ``.rdj`` export).
        frames_a: run ``a``'s frames directly, instead of a journal.
        frames_b: run ``b``'s frames directly, instead of a journal.

    Returns:
        A :class:`RunDiff` (``str()`` renders it with path-level differences), or None.

    Raises:
        UnknownRunError: a run is not in its journal.
        ValueError: neither a journal nor the frames of a run were given.
    """
    src_a: Journal | Iterable[Frame] | None = frames_a if frames_a is not None else journal
    src_b: Journal | Iterable[Frame] | None = (
        frames_b if frames_b is not None else (journal_b or journal)
    )
    if src_a is None or src_b is None:
        raise ValueError("diff_runs needs journal=... (or frames_a= and frames_b=)")
    steps_a, out_a = _steps(_frames_of(src_a, a), a)
    steps_b, out_b = _steps(_frames_of(src_b, b), b)
    for index in range(max(len(steps_a), len(steps_b))):
        sa = steps_a[index] if index < len(steps_a) else None
        sb = steps_b[index] if index < len(steps_b) else None
        if sa is None or sb is None:
            return RunDiff(a=a, b=b, index=index, what="missing", step_a=sa, step_b=sb, diff=[])
        if (sa.kind, sa.name) != (sb.kind, sb.name):
            diff = diff_values(
                {"kind": sa.kind, "name": sa.name}, {"kind": sb.kind, "name": sb.name}
            )
            return RunDiff(a=a, b=b, index=index, what="step", step_a=sa, step_b=sb, diff=diff)
        diff = diff_values(sa.args, sb.args, "$.args")
        if diff:
            return RunDiff(a=a, b=b, index=index, what="args", step_a=sa, step_b=sb, diff=diff)
        diff = diff_values(sa.outcome, sb.outcome, "$.outcome")
        if diff:
            return RunDiff(a=a, b=b, index=index, what="outcome", step_a=sa, step_b=sb, diff=diff)
    diff = diff_values(out_a, out_b, "$.run_end")
    if diff:
        return RunDiff(
            a=a, b=b, index=len(steps_a), what="output", step_a=None, step_b=None, diff=diff
        )
    return None
