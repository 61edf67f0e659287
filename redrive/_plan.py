"""A resume plan: what resuming a run will do, step by step, before anything runs.

:func:`plan` reads the run's journal and the current code (its tools as
declared in this process, after importing the run's entrypoint; its
fingerprint, through :func:`redrive.what_changed`) and says, for each recorded
step, what a resume does with it, using the engine's own decisions
(:func:`redrive.replay.in_flight_action` for a step in flight), and never
writes anything:

=============  ================================================================
action         meaning
=============  ================================================================
``replay``     its recorded outcome is handed back (no call, no body)
``live``       a model step in flight: the request is sent again; or, after
               the record, the loop continues live (new steps are recorded)
``rerun``      a tool step in flight whose body runs again (restart safe, or
               resolved not done by a person)
``recover``    a tool step in flight whose ``recover()`` hook is asked first
``block``      a tool step in flight that cannot be re-run safely: the resume
               stops there (``SideEffectRetryBlockedError``); a person decides
``wait``       an approval without a decision: the run suspends again
``diverge``    the current code asks otherwise than the record (strict replay
               raises ``DivergenceError`` there); a person decides
``reask``      a drifted model step re-asked live (``on_drift="continue_live"``)
=============  ================================================================

With ``replay=True`` (the default) the entrypoint is also re-driven
replay-only over a private in-memory copy of the run (as ``redrive
what-changed`` does: no model call, no tool body, the journal untouched) to
find the first step the current code asks for differently.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from ._resumable import in_flight, paused_reason
from ._whatchanged import Change, WhatChanged, what_changed
from .errors import UnknownRunError
from .replay import (
    Pause,
    RecordedStep,
    iter_steps,
    pending_approvals,
)
from .storage import Journal, RunStatus, check_row

__all__ = ["PlanStep", "ResumePlan", "aplan", "plan"]

Action = Literal["replay", "live", "rerun", "recover", "block", "wait", "diverge", "reask"]
#: What the resume as a whole comes to.
Outcome = Literal["finished", "continues", "stops", "suspends", "ended"]


@attrs.frozen(kw_only=True)
class PlanStep:
    """One step of a resume plan.

    Attributes:
        seq: the recorded step's seq (None: after the record, or an approval not asked yet).
        kind: ``"model"``, ``"tool"``, ``"value"``, ``"approval"``, or ``"live"``.
        name: the step's name (tool, model, approval).
        action: what the resume does with it (see the module doc).
        why: one line for a person.
        decide: True when a person must decide here (and ``why`` names the command).
    """

    seq: int | None
    kind: str
    name: str
    action: Action
    why: str
    decide: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "name": self.name,
            "action": self.action,
            "why": self.why,
            "decide": self.decide,
        }


@attrs.frozen(kw_only=True)
class ResumePlan:
    """What resuming a run will do (see :func:`plan`).

    Attributes:
        run_id: the run.
        status: its status now.
        outcome: ``finished`` (replays to its recorded end: nothing live),
            ``continues`` (replays, then goes live), ``stops`` (at a step a
            person decides), ``suspends`` (an approval still undecided), ``ended``
            (failed or cancelled: it cannot resume).
        steps: the plan, in seq order.
        changes: fingerprint parts that differ from the current code.
        pause: why the run paused, when it is ``paused``.
        replayed: with ``replay=True``, how many steps the dry replay answered
            before stopping (None without it).
        note: one line on the run as a whole (why it ended, why it paused).
    """

    run_id: str
    status: str
    outcome: Outcome
    steps: tuple[PlanStep, ...]
    changes: tuple[Change, ...] = ()
    pause: Pause | None = None
    replayed: int | None = None
    note: str = ""

    @property
    def first_decision(self) -> PlanStep | None:
        """The first step a person must decide, or None."""
        return next((s for s in self.steps if s.decide), None)

    def count(self, action: str) -> int:
        """How many steps the plan gives ``action``."""
        return sum(1 for s in self.steps if s.action == action)

    def summary(self) -> str:
        """The plan for a person (what ``redrive plan`` prints)."""
        head = {
            "finished": "replays to its recorded end: nothing runs live",
            "continues": "replays its record, then continues live",
            "stops": "stops at a step a person must decide",
            "suspends": "suspends again: an approval has no decision",
            "ended": "cannot resume",
        }[self.outcome]
        lines = [f"run {self.run_id} ({self.status}): {head}"]
        if self.note:
            lines.append(f"  {self.note}")
        for c in self.changes:
            lines.append(f"  changed {c.part}: {c.detail or f'{c.recorded!r} -> {c.current!r}'}")
        for s in self.steps:
            where = "after" if s.seq is None else f"seq {s.seq:>3}"
            mark = "  <- a person decides" if s.decide else ""
            lines.append(f"  {where}  {s.action:<8} {s.kind} {s.name}: {s.why}{mark}")
        first = self.first_decision
        if first is not None:
            at = "" if first.seq is None else f" at seq {first.seq}"
            lines.append(f"first decision{at}: {first.why}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        first = self.first_decision
        return {
            "run_id": self.run_id,
            "status": self.status,
            "outcome": self.outcome,
            "note": self.note,
            "steps": [s.to_dict() for s in self.steps],
            "first_decision": None if first is None else first.to_dict(),
            "changes": [c.to_dict() for c in self.changes],
            "pause": None if self.pause is None else self.pause.to_dict(),
            "replayed": self.replayed,
        }


def _in_flight(step: RecordedStep, run_id: str, max_attempts: int) -> PlanStep:
    """What a resume does with a tool step in flight, by the engine's own decision."""
    action, declared = in_flight(step, max_attempts)
    source = "" if declared else " (tool not defined in this process: judged from its record)"

    def made(act: Action, why: str, decide: bool = False) -> PlanStep:
        return PlanStep(
            seq=step.seq, kind="tool", name=step.name, action=act, why=why + source, decide=decide
        )

    resolve = f"redrive resolve {run_id} {step.seq} --done|--not-done"
    if action == "rerun":
        why = (
            "in flight, resolved not done by a person: its body runs again"
            if step.resolved_not_done
            else "in flight, restart safe: its body runs again"
        )
        return made("rerun", why)
    if action == "recover":
        return made("recover", "in flight: its recover() hook is asked whether it took effect")
    if action == "retry_limit":
        return made(
            "block",
            f"in flight after {step.attempts} starts (max_attempts={max_attempts}): {resolve}",
            True,
        )
    return made(
        "block",
        "in flight, not restart safe and no recover(): whether it took effect is unknown; "
        + resolve,
        True,
    )


def _recorded(step: RecordedStep, run_id: str, max_attempts: int) -> PlanStep:
    if step.end is None and step.kind == "tool":
        return _in_flight(step, run_id, max_attempts)
    if step.end is None:  # a model request without its response: sent again
        return PlanStep(
            seq=step.seq,
            kind=step.kind,
            name=step.name,
            action="live",
            why="in flight (no response recorded): the request is sent again",
        )
    what = {"done": "recorded outcome", "error": "recorded error", "blocked": "recorded block"}
    return PlanStep(
        seq=step.seq,
        kind=step.kind,
        name=step.name,
        action="replay",
        why=f"{what.get(step.status, 'recorded outcome')} handed back",
    )


def _changed(
    steps: list[PlanStep], found: WhatChanged, on_drift: str, run_id: str
) -> list[PlanStep]:
    """Mark the recorded steps the current code would ask for differently."""
    risky = {s.seq: s for s in found.steps if s.blocking}
    out = []
    for step in steps:
        risk = risky.get(step.seq) if step.seq is not None else None
        if risk is None or step.action != "replay":
            out.append(step)
        elif step.kind == "model" and on_drift == "continue_live":
            out.append(attrs.evolve(step, action="reask", why=f"re-asked live: {risk.why}"))
        else:
            out.append(
                attrs.evolve(
                    step,
                    action="diverge",
                    why=f"{risk.why}; strict replay raises DivergenceError here: resume with "
                    f"the code that recorded it, fork before it, or (a model step) "
                    f"on_drift='continue_live' (redrive what-changed {run_id})",
                    decide=True,
                )
            )
    return out


def plan(
    journal: Journal,
    run_id: str,
    *,
    import_paths: Sequence[str] = (),
    replay: bool = True,
    on_drift: str = "raise",
    max_attempts: int = 3,
) -> ResumePlan:
    """Say what resuming ``run_id`` will do, step by step, without any side effect.

    Args:
        journal: the run's journal (read only; never written).
        run_id: the run.
        import_paths: directories put at the front of ``sys.path`` while the
            run's entrypoint is imported (which defines its tools).
        replay: also re-drive the entrypoint replay-only over an in-memory copy
            to find the first step the current code asks differently (no model
            call, no tool body). False: compare fingerprints only.
        on_drift: the resume's drift policy (``"raise"``: strict; ``"continue_live"``).
        max_attempts: the resume's ``max_attempts`` (starts allowed for a step in flight).

    Returns:
        A :class:`ResumePlan`.

    Raises:
        UnknownRunError: no such run. JournalCorruptError: a damaged record.
    """
    record = journal.get_run(run_id)
    if record is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {journal.url}: check the run id (redrive runs)",
            run_id=run_id,
        )
    check_row(record, journal.url)
    status = RunStatus(record.status)
    if status in (RunStatus.FAILED, RunStatus.CANCELLED):
        return ResumePlan(
            run_id=run_id,
            status=record.status,
            outcome="ended",
            steps=(),
            note=f"it ended {record.status}"
            + (f": {record.error}" if record.error else "")
            + "; a resume raises TerminalRunError (fork it to run again: redrive.fork)",
        )
    found = what_changed(journal, run_id, import_paths=import_paths, replay=replay)
    steps = [_recorded(s, run_id, max_attempts) for s in iter_steps(journal.frames(run_id))]
    note = ""
    left = (record.lease_expires or 0.0) - time.time()
    if left > 0 and record.lease_owner is not None:
        note = (
            f"held by {record.lease_owner!r} for {left:.0f} s "
            "more (its lease): a resume before then is refused (RunBusyError); a worker that "
            "died lets it lapse"
        )
    if status is RunStatus.SUCCEEDED:
        # a live resume hands back the recorded output without re-driving the code
        note = "it succeeded: a resume returns its recorded output (redrive check re-drives it)"
    else:
        steps = _changed(steps, found, on_drift, run_id)
    pause = paused_reason(journal, run_id) if status is RunStatus.PAUSED else None
    if pause is not None:
        note = (
            (note + "; " if note else "")
            + pause.text()
            + ("" if pause.retry else "; waiting does not clear it: settle the cause first")
        )
    for approval in pending_approvals(journal, run_id):
        steps.append(
            PlanStep(
                seq=None,
                kind="approval",
                name=str(approval["name"]),
                action="wait",
                why=f"no decision yet: redrive decide {run_id} {approval['name']} "
                "--approve|--reject",
                decide=True,
            )
        )
    if status is RunStatus.SUCCEEDED:
        outcome: Outcome = "finished"
    else:
        first = next((s for s in steps if s.decide), None)
        if first is None:
            outcome = "continues"
            steps.append(
                PlanStep(
                    seq=None,
                    kind="live",
                    name="loop",
                    action="live",
                    why="the loop continues live from the end of the record: new steps are "
                    "claimed and recorded",
                )
            )
        else:
            outcome = "suspends" if first.action == "wait" else "stops"
    return ResumePlan(
        run_id=run_id,
        status=record.status,
        outcome=outcome,
        steps=tuple(steps),
        changes=tuple(c for c in found.changes if c.detail != "new"),
        pause=pause,
        replayed=found.replayed,
        note=note,
    )


async def aplan(
    journal: Journal,
    run_id: str,
    *,
    import_paths: Sequence[str] = (),
    replay: bool = True,
    on_drift: str = "raise",
    max_attempts: int = 3,
) -> ResumePlan:
    """The async face of :func:`plan` (its journal reads and dry replay run off the event loop).

    Same arguments, result and errors as :func:`plan`.
    """
    return await asyncio.to_thread(
        plan,
        journal,
        run_id,
        import_paths=import_paths,
        replay=replay,
        on_drift=on_drift,
        max_attempts=max_attempts,
    )
