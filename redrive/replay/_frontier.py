"""The frontier rule: when a flow has replayed all of its own record and may go live.

A worker that stopped mid-run leaves each flow's record ending where that
flow was, and steps of other flows may be recorded after it. A flow past its
own record goes live although other flows' steps are still to be replayed;
never while a step of its own waits, nor while a step waits that no flow of
this execution can ask for any more (the code moved that call: CONTRACT C1).
Pure: it reads the recorded index and asks the flow tracker, writes nothing.
"""

from __future__ import annotations

from ._callers import Claimable, point, position, started_by
from ._flows import Issue
from ._recorded import RecordedIndex
from ._steps import RecordedStep

__all__ = ["past_flow_record"]


def past_flow_record(
    idx: RecordedIndex,
    kind: str,
    issue: Issue,
    *,
    reorders: bool,
    claimable: Claimable | None,
) -> bool:
    """True when a model or tool step asked at ``issue`` is past its flow's record.

    That is so when the run did not end (no ``run_end``), its steps were
    recorded with issue positions (journals recorded before them keep the
    strict rule: before the ``causal`` run flag, only model steps had
    positions, so only they may go live here), and none is recorded at this
    one (one there with other arguments is a divergence). Threads that race
    to issue from one point take their positions in the order they reach it,
    so for them a position names the flow only when the loop orders their
    first calls.

    Args:
        idx: the recorded index, loaded whole.
        kind: ``"model"`` or ``"tool"``.
        issue: where the caller issued the step.
        reorders: a lenient rule matches steps out of their positions.
        claimable: who may still ask for a recorded position (the flow tracker's
            :meth:`~._flows.FlowTracker.may_still_issue`), or None.
    """
    if idx.superseded:
        # a model step was re-asked live (on_drift="continue_live"): the steps after it
        # carry other issue positions than their record, so no flow's record can be told
        # to end here; a step that matches nothing diverges (a drifted tool never runs)
        return False
    if idx.reader.run_end is not None or (idx.saw_model and "model" not in idx.positioned):
        return False
    if kind != "model" and kind not in idx.positioned:
        return False
    if kind == "tool" and reorders and idx.side_effect_waiting() is not None:
        # a lenient rule matched steps out of their positions: a flow's own recorded
        # side effect may wait where its positions no longer lead (CONTRACT C4)
        return False
    kinds = idx.positioned | {"model"}
    steps = [s for s in idx.order if s.seq in idx.steps and s.kind in kinds]
    if any(position(s) is None for s in steps):
        return False
    if kind == "tool" and _own_effect_waits(idx, steps, issue):
        return False
    # any step recorded from this flow's point, or by a flow it starts there, and not yet
    # replayed keeps it from going live: a renamed, dropped or moved call must diverge;
    # so does a step no flow of this execution can ask for any more (its point was left
    # behind: the code moved the call, e.g. across a model step, CONTRACT C1)
    return not any(
        point(s) == issue.point
        or started_by(s, issue)
        or _starter_waits(s, issue)
        or _orphaned(idx, s, claimable)
        for s in steps
    )


def _starter_waits(step: RecordedStep, issue: Issue) -> bool:
    """True when ``step`` was recorded where a flow that started the caller's stood then.

    Same parent, a shorter spawn path leading to the caller's: a batch member counts as
    started where its starter stood, and may not go live past a step its starter still
    waits to replay there (the starter's call dropped or moved; model rule A1).
    """
    found = point(step)
    if found is None:
        return False
    parent, spawn = found
    mine = issue.spawn
    return parent == issue.parent and len(spawn) < len(mine) and mine[: len(spawn)] == spawn


def _own_effect_waits(idx: RecordedIndex, steps: list[RecordedStep], issue: Issue) -> bool:
    """True when a side effect of the caller's own flow, recorded from a later point, waits.

    The caller is a flow started (spawn path ``S``) by the flow standing at its parent
    ``p``. A waiting side-effecting tool step recorded by the flow that the same starter
    started under the same path ``S`` at a later point ``q`` of its own (or by a flow
    that one started) is the caller's own record: the code changed where the starter
    starts it (a call of the starter dropped, or taken by a member), so a new tool call
    of the caller is no step past its flow's record: a side effect must not run again
    under a new key while its record waits (invariant 15; model rule A1). A sibling's
    record (another spawn index, the same or another point) does not count: parallel
    tool calls resumed in another order each go on past their own record.

    A shared flow (silent copies of one context: its spawn path names no caller) and a
    caller standing at a step of this execution (its starter's path not in the record)
    are never held by this rule.
    """
    mine = issue.spawn
    parent = issue.parent
    if not mine or issue.shared or parent > idx.read_to:
        return False
    base = idx.lineage.get(parent, ()) if parent >= 0 else ()
    n, k = len(base), len(mine)
    for step in steps:
        if step.kind != "tool" or step.harmless:
            continue
        lineage = idx.lineage.get(step.seq, ())
        if len(lineage) < n + k or lineage[:n] != base:
            continue
        branch = lineage[n : n + k]
        start = branch[0][0]
        if (
            start > parent
            and all(at == start for at, _i in branch)
            and (tuple(i for _at, i in branch) == mine)
        ):
            return True
    return False


def _orphaned(idx: RecordedIndex, step: RecordedStep, claimable: Claimable | None) -> bool:
    """True when no flow of the running execution can ask for ``step`` where it was recorded.

    So when the step it was issued after was replayed (or it was issued by a flow the
    root started) and no flow stands there, or will, to issue it: the flow that would
    have moved on without asking for it.
    """
    found = position(step)
    if found is None or claimable is None:
        return False
    parent, spawn, occ = found
    if parent >= 0 and parent in idx.steps:
        return False  # its parent still waits to be replayed: a flow will stand there
    if parent < 0 and not spawn:
        return False  # the root's own point: threads whose start redrive cannot see
    return not claimable(parent, spawn, step.name, occ)
