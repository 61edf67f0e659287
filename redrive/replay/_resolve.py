"""A person settles an in-flight tool step whose outcome is unknown (``redrive resolve``).

A non-restart-safe tool that was in flight when its worker died blocks the
run (``SideEffectRetryBlockedError``): nobody knows whether its side effect
happened. Someone who checked the outside system records the answer here,
with who and why, through the journal's conditional append:

* **done**, with the result the tool would have returned: a ``tool_done``
  frame (marked ``recovered`` and ``resolved``); every later resume and
  replay hands that result to the loop, as if the body had returned it.
* **not done**: a ``resolved`` note; the next resume runs the body again
  (an ``attempt``, with the same idempotency key), whatever the tool's
  declarations say.
"""

from __future__ import annotations

import shlex
import time
from typing import Any, Literal

from .._scrub import DEFAULT as _SCRUB
from ..errors import AppendConflictError, TerminalRunError, UnknownRunError
from ..frames import Kind, make_frame, store
from ..storage import Journal, RunStatus
from ._steps import RecordedStep, iter_steps

__all__ = ["resolve_step"]

#: Name of the note that records a resolution as not done.
RESOLVED_EVENT = "resolved"


def _in_flight_step(journal: Journal, run_id: str, seq: int) -> RecordedStep:
    """Return the tool step opened at ``seq`` of run ``run_id``, checking it is in flight."""
    found: RecordedStep | None = None
    for step in iter_steps(journal.frames(run_id), run_id):
        if step.seq == seq:
            found = step
            break
    if found is None:
        raise LookupError(
            f"run {run_id!r} has no step opened at seq {seq}; list its steps and their seqs "
            f"with `redrive show {shlex.quote(run_id)}`"
        )
    if found.kind != "tool":
        raise ValueError(
            f"run {run_id!r} seq {seq} is a {found.kind} step ({found.name!r}); only a tool "
            "step in flight can be resolved"
        )
    if not found.in_flight:
        raise ValueError(
            f"run {run_id!r} seq {seq} (tool {found.name!r}) is not in flight: it already has "
            f"an outcome ({found.status}), which nothing may replace"
        )
    if found.resolved_not_done:
        raise ValueError(
            f"run {run_id!r} seq {seq} (tool {found.name!r}) was already resolved as not done; "
            "the next resume runs it again"
        )
    return found


def resolve_step(
    journal: Journal,
    run_id: str,
    seq: int,
    *,
    state: Literal["done", "not_done"],
    by: str,
    reason: str,
    result: Any = None,
) -> RecordedStep:
    """Record a person's answer for the in-flight tool step at ``seq``.

    Args:
        journal: a writable journal holding the run.
        run_id: the run.
        seq: the seq of the step's ``tool_start`` (as ``redrive show`` lists it).
        state: ``"done"`` (the side effect happened; ``result`` is what the tool
            returned) or ``"not_done"`` (it did not; the next resume runs it again).
        by: who checked (free text, non-empty; secrets scrubbed).
        reason: what they checked (free text, non-empty; secrets scrubbed).
        result: for ``"done"``, the tool's result as plain data (JSON-like).

    Returns:
        The step as recorded before the resolution (its ``name``, ``args``...).

    Raises:
        UnknownRunError: no such run.
        TerminalRunError: the run already ended (succeeded, failed or cancelled).
        LookupError: no step opened at ``seq``.
        ValueError: the step is not a tool step, is not in flight (it has an
            outcome), was already resolved, ``state`` is neither choice, or
            ``by``/``reason`` is empty.
        TypeError: ``result`` cannot be journaled.
        RunBusyError: a worker holds an unexpired lease on the run (it may be
            running this very step); retry once the lease has lapsed.
        PermissionError: the journal is read-only (an ``.rdj`` file).
    """
    if state not in ("done", "not_done"):
        raise ValueError(f"state must be 'done' or 'not_done', not {state!r}")
    if not by or not reason:
        raise ValueError("resolving a step needs who checked (by) and why (reason): both non-empty")
    by, reason = _SCRUB.text(by) or "", _SCRUB.text(reason) or ""
    packed = store(result, "result")[0] if state == "done" else None
    while True:
        record = journal.get_run(run_id)
        if record is None:
            raise UnknownRunError(
                f"no run {run_id!r} in journal {journal.url}; list runs with `redrive runs`",
                run_id=run_id,
            )
        if RunStatus(record.status).terminal:
            raise TerminalRunError(
                f"run {run_id!r} already ended with status {record.status}"
                + (f" ({record.error})" if record.error else "")
                + "; its steps can no longer be resolved and nothing was changed.",
                run_id=run_id,
                seq=record.next_seq,
                status=record.status,
            )
        step = _in_flight_step(journal, run_id, seq)
        who: dict[str, Any] = {"by": by, "reason": reason, "at": time.time()}
        payload: dict[str, Any]
        if state == "done":
            kind = Kind.TOOL_DONE
            payload = {"step": seq, "result": packed, "recovered": True, "resolved": who}
        else:
            kind = Kind.NOTE
            payload = {"event": RESOLVED_EVENT, "step": seq, "state": "not_done", **who}
        frame = make_frame(
            run_id=run_id,
            seq=record.next_seq,
            kind=kind,
            name=step.name,
            payload=payload,
            prev_chain=record.last_chain,
        )
        try:
            # no epoch: refused (RunBusyError) while a worker holds the run's lease
            journal.append(run_id, [frame], expected_seq=record.next_seq)
        except AppendConflictError:
            continue  # a worker appended meanwhile: read the run again
        return step
