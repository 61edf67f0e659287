"""Where two runs first differ, and how their ends differ: :func:`redrive.diff_runs`.

One answer and one rendering for every reader: ``redrive diff`` prints
:meth:`RunDiff.lines`, ``--json`` and the two-run ``redrive view`` show the
same fields, and every step is named the same way (:meth:`RunDiff.location`:
``seq 5 (step 2)``, the frame position ``redrive show`` and divergence errors
print, and the step's 1-based position among the run's steps).

What two recordings of the same behaviour do not share is no divergence: a
model response is compared as :func:`redrive._volatile.settled_response` makes
it (no ``Date`` or rate-limit headers, no response ids or ``created``
times), requests without model-minted ids (:func:`~._policy.match_view`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from .._volatile import settled_response
from ..errors import UnknownRunError
from ..frames import Frame
from ..storage import Journal
from ._diff import diff_values, format_diff, short, user_value
from ._policy import match_view
from ._steps import RecordedStep, StepReader

__all__ = ["RunDiff", "StepView", "diff_runs"]


@attrs.frozen(kw_only=True)
class StepView:
    """One step of a run as :func:`diff_runs` compares it.

    Attributes:
        index: 0-based position among the run's steps.
        seq: seq of the step's opening frame.
        kind: ``"model"``, ``"tool"`` or ``"value"``.
        name: the step name.
        args: the match view of the arguments (model-minted ids left out).
        status: ``"done"``, ``"error"``, ``"blocked"`` or ``"in_flight"``.
        outcome: ``{"result": ...}``, ``{"error": ...}``, ``{"response": ...}``
            (an HTTP response with its volatile parts left out),
            ``{"value": ...}``, or ``{"in_flight": True}``; values as the user's.
    """

    index: int
    seq: int
    kind: str
    name: str
    args: Any
    status: str = "done"
    outcome: Any

    def describe(self) -> str:
        """``seq 3 tool refund args {...}: blocked``: the step, its arguments and its status."""
        return f"seq {self.seq} {self.kind} {self.name} args {short(self.args)}: {self.status}"


@attrs.frozen(kw_only=True)
class RunDiff:
    """Where two runs first differ (from :func:`diff_runs`), and how their ends differ.

    Attributes:
        a, b: the two runs' ids.
        index: 0-based step index of the first difference (equal to the
            shorter run's step count when one run only has more steps, or to
            both counts when only the ends differ).
        what: ``"step"`` (kind or name), ``"args"``, ``"status"`` (done, error,
            blocked, in flight), ``"outcome"``, ``"missing"`` (one run has no
            step there) or ``"output"`` (only the runs' ends differ).
        step_a, step_b: the steps at ``index`` (None where a run has none).
        diff: ``(path, a, b)`` leaf differences of the compared values.
        ends: ``(path, a, b)`` leaf differences of the runs' ends (``$.run_end.status``,
            ``$.run_end.output``, ``$.run_end.error``), whatever ``what`` is.
    """

    a: str
    b: str
    index: int
    what: str
    step_a: StepView | None
    step_b: StepView | None
    diff: list[tuple[str, Any, Any]]
    ends: list[tuple[str, Any, Any]] = attrs.field(factory=list)

    def location(self) -> str:
        """``seq 5 (step 2)``: where the runs first differ, as every reader names a step.

        ``after step N`` when only the runs' ends differ.
        """
        if self.what == "output":
            return f"the ends, after step {self.index}"
        seqs = [s.seq for s in (self.step_a, self.step_b) if s is not None]
        return f"seq {min(seqs)} (step {self.index + 1})" if seqs else f"step {self.index + 1}"

    def lines(self) -> list[str]:
        """The report ``redrive diff`` prints (and ``str()`` gives): the step, then the ends."""
        a, b = self.a, self.b
        if self.what == "output":
            lines = [f"runs {a!r} and {b!r} make the same {self.index} steps; their ends differ:"]
            lines.append(f"  differences ({a} -> {b}):")
            lines.extend(format_diff(self.diff).splitlines())
            return lines
        seqs = [s.seq for s in (self.step_a, self.step_b) if s is not None]
        lines = [
            f"runs {a!r} and {b!r} first differ at seq {min(seqs)} "
            f"(step {self.index + 1}; {self.what}):",
            f"  {a}: {self.step_a.describe() if self.step_a else 'no step there'}",
            f"  {b}: {self.step_b.describe() if self.step_b else 'no step there'}",
        ]
        if self.diff:
            lines.append(f"  differences ({a} -> {b}):")
            lines.extend(format_diff(self.diff).splitlines())
        if self.ends:
            lines.append(f"  their ends differ ({a} -> {b}):")
            lines.extend(format_diff(self.ends).splitlines())
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _outcome(step: RecordedStep) -> Any:
    """The outcome of ``step`` as :class:`StepView` shows it."""
    if step.end is None:
        return {"in_flight": True}
    data = step.decode_outcome()
    if step.kind == "value":
        return {"value": user_value(data.get("value"))}
    if step.status == "error":
        error = data.get("error") or {}
        return {"error": {"type": error.get("type"), "message": error.get("message")}}
    if step.kind == "model":
        return {"response": settled_response(user_value(data.get("response")))}
    return {"result": user_value(data.get("result"))}


def _steps(frames: Iterable[Frame], run_id: str) -> tuple[list[StepView], Any]:
    reader = StepReader(run_id, verify=False)
    steps = [
        StepView(
            index=index,
            seq=step.seq,
            kind=step.kind,
            name=step.name,
            args=user_value(match_view(step.args, kind=step.kind)),
            status=step.status,
            outcome=_outcome(step),
        )
        for index, step in enumerate(reader.read(frames))
    ]
    end = reader.run_end
    if end is None:
        return steps, None
    return steps, {
        "status": end.get("status"),
        "output": user_value(end.get("output")),
        "error": end.get("error"),
    }


def _frames_of(source: Journal | Iterable[Frame], run_id: str) -> Iterator[Frame]:
    if isinstance(source, Journal):
        if source.get_run(run_id) is None:
            raise UnknownRunError(
                f"cannot diff run {run_id!r}: it is not in journal {source.url}", run_id=run_id
            )
        return source.frames(run_id)
    return iter(source)


def _first(a: str, b: str, steps_a: list[StepView], steps_b: list[StepView]) -> RunDiff | None:
    for index in range(max(len(steps_a), len(steps_b))):
        sa = steps_a[index] if index < len(steps_a) else None
        sb = steps_b[index] if index < len(steps_b) else None
        found = (a, b, index)
        if sa is None or sb is None:
            return _at(*found, "missing", sa, sb, [])
        if (sa.kind, sa.name) != (sb.kind, sb.name):
            diff = diff_values(
                {"kind": sa.kind, "name": sa.name}, {"kind": sb.kind, "name": sb.name}
            )
            return _at(*found, "step", sa, sb, diff)
        diff = diff_values(sa.args, sb.args, "$.args")
        if diff:
            return _at(*found, "args", sa, sb, diff)
        if sa.status != sb.status:
            diff = [("$.status", sa.status, sb.status)]
            return _at(
                *found, "status", sa, sb, diff + diff_values(sa.outcome, sb.outcome, "$.outcome")
            )
        diff = diff_values(sa.outcome, sb.outcome, "$.outcome")
        if diff:
            return _at(*found, "outcome", sa, sb, diff)
    return None


def _at(
    a: str, b: str, index: int, what: str, sa: StepView | None, sb: StepView | None, diff: Any
) -> RunDiff:
    return RunDiff(a=a, b=b, index=index, what=what, step_a=sa, step_b=sb, diff=diff)


def diff_runs(
    a: str,
    b: str,
    *,
    journal: Journal | None = None,
    journal_b: Journal | None = None,
    frames_a: Iterable[Frame] | None = None,
    frames_b: Iterable[Frame] | None = None,
) -> RunDiff | None:
    """Return where runs ``a`` and ``b`` first differ, or None when their steps and ends agree.

    Steps (model, tool and value steps, in seq order) are compared pairwise:
    first kind and name, then arguments (model-minted ids left out), then
    status (done, error, blocked, in flight), then outcome (a model
    response without its volatile parts: see the module docstring); the runs'
    ends (status, output, error) are compared always and reported in
    :attr:`RunDiff.ends` (or as the difference itself when every step agrees).
    Model requests are compared in full (prefix deltas resolved). Every value
    is the user's (a ``Decimal`` as a ``Decimal``, not its encoding).

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
    steps_a, end_a = _steps(_frames_of(src_a, a), a)
    steps_b, end_b = _steps(_frames_of(src_b, b), b)
    ends = diff_values(end_a, end_b, "$.run_end")
    found = _first(a, b, steps_a, steps_b)
    if found is not None:
        return attrs.evolve(found, ends=ends)
    if ends:
        return RunDiff(
            a=a,
            b=b,
            index=len(steps_a),
            what="output",
            step_a=None,
            step_b=None,
            diff=ends,
            ends=ends,
        )
    return None
