"""Which runs a recoverer can continue now, and why it leaves the others alone.

A run can be continued from several states, and each has its own reason to
wait. :func:`resumable_runs` reads every run not ended (``running``,
``suspended``, ``paused``) and says, per run, whether ``recover`` drives it
and why (:class:`Candidate`):

==============  ==================================================  ==========
state           when                                                recover
==============  ==================================================  ==========
interrupted     ``running``, no live lease, no write for ``stale``  drives it
                seconds (a crash, a deploy)
held            ``running`` under another worker's live lease       leaves it
fresh           ``running``, written less than ``stale`` s ago      leaves it
blocked         ``running``, a side effect in flight that no        leaves it
                person resolved (``redrive resolve``)
resolved        ``running``, its side effect in flight resolved     drives it
suspended       ``suspended``, an approval without a decision       leaves it
approved        ``suspended``, every approval decided               drives it
paused          ``paused`` on what waiting clears (a rate limit,    drives it
                retries used up), its ``Retry-After`` (else
                ``stale`` seconds) elapsed
paused (wait)   ``paused``, that wait not elapsed yet               leaves it
paused (park)   ``paused`` on what a person clears (a quota, a      leaves it
                budget): ``redrive resume RUN`` once settled
==============  ==================================================  ==========

Asked for one status (``status="suspended"``...), every stale run of that
status is driven, as before: the operator chose them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Literal

import attrs

from ._entry import import_paths as _import_paths
from ._entry import resolve as _resolve
from .frames import Kind
from .replay import (
    PAUSED_NOTE,
    Pause,
    RecordedStep,
    StepReader,
    ToolAsk,
    declared_spec,
    in_flight_action,
    pending_approvals,
)
from .storage import Journal, RunRecord, RunStatus, held_by_other

__all__ = [
    "RESUMABLE",
    "Candidate",
    "blocked_step",
    "in_flight",
    "paused_reason",
    "resumable_runs",
]

#: The statuses a run can be continued from.
RESUMABLE = (RunStatus.RUNNING.value, RunStatus.SUSPENDED.value, RunStatus.PAUSED.value)

CandidateState = Literal[
    "interrupted",
    "held",
    "fresh",
    "blocked",
    "resolved",
    "suspended",
    "approved",
    "paused",
]


@attrs.frozen(kw_only=True)
class Candidate:
    """One run a recoverer looked at: whether it drives it, and why.

    Attributes:
        record: the run's index row.
        state: what the run is waiting for (see the module's table).
        drive: True when ``recover`` re-drives it now.
        why: one line for a person.
    """

    record: RunRecord
    state: CandidateState
    drive: bool
    why: str

    @property
    def run_id(self) -> str:
        """The run."""
        return self.record.run_id


def in_flight(step: RecordedStep, max_attempts: int = 3) -> tuple[str, bool]:
    """What a resume does with tool step ``step`` in flight: the engine's own decision.

    The tool's declaration is read from this process (import the run's entrypoint
    first); a tool not defined here is judged from its record (restart safe or
    read-only as recorded; no ``recover()`` known).

    Returns:
        ``(action, declared here)``: action ``"rerun"``, ``"recover"``, ``"block"``
        or ``"retry_limit"`` (see :func:`redrive.replay.in_flight_action`).
    """
    spec = declared_spec(step.name)
    if spec is not None:
        safe, has_recover = spec.restart_safe or spec.read_only, spec.recover is not None
    else:
        safe, has_recover = step.harmless, False
    ask = ToolAsk(
        step=step,
        restart_safe=safe,
        has_recover=has_recover,
        can_write=True,
        exhausted=False,
        failed_at=None,
        max_attempts=max_attempts,
        known_seq=0,
        may_wait=False,
        leased=False,
        claim_age=0.0,
        busy_timeout=0.0,
    )
    return in_flight_action(ask), spec is not None


def blocked_step(journal: Journal, record: RunRecord) -> RecordedStep | None:
    """The side effect in flight that stops run ``record`` until a person settles it, or None.

    A run is blocked when it is ``running``, no worker holds a live lease on it,
    and a tool step started and has no outcome (its worker died inside the body)
    that a resume would not re-run nor ask ``recover()`` about (:func:`in_flight`:
    the tool as declared in this process, else as recorded): resuming it raises
    ``SideEffectRetryBlockedError``, and a queue adapter parks its job
    (:mod:`redrive.queues`). ``redrive resolve RUN SEQ`` settles it.

    Args:
        journal: the run's journal.
        record: the run's index row.

    Returns:
        The first such step (its ``seq`` is what ``redrive resolve`` takes), or None.
    """
    if record.status != RunStatus.RUNNING.value or held_by_other(record, None):
        return None
    for step in StepReader().read(journal.frames(record.run_id)):
        if step.kind == "tool" and step.end is None:
            action, _declared = in_flight(step)
            if action in ("block", "retry_limit"):
                return step
    return None


def paused_reason(journal: Journal, run_id: str) -> Pause | None:
    """Why run ``run_id`` last paused (its last ``paused`` note), or None when it never did."""
    found: Pause | None = None
    for frame in journal.frames(run_id):
        if frame.kind == Kind.NOTE.value and frame.name == PAUSED_NOTE:
            data = frame.data().get("data")
            if isinstance(data, dict):
                found = Pause.from_dict(data)
    return found


def _running(journal: Journal, record: RunRecord, stale: float, now: float) -> Candidate:
    if record.lease_expires is not None and record.lease_expires > now:
        who = record.lease_owner or "another worker"
        return Candidate(
            record=record,
            state="held",
            drive=False,
            why=f"held by {who} (lease for {record.lease_expires - now:.0f} s more): left to it",
        )
    if record.updated_at > now - stale:
        return Candidate(
            record=record,
            state="fresh",
            drive=False,
            why=f"last written {now - record.updated_at:.0f} s ago, under --stale {stale:g} s: "
            "its worker may still be running it",
        )
    step = blocked_step(journal, record)
    if step is not None:
        return Candidate(
            record=record,
            state="blocked",
            drive=False,
            why=f"blocked at seq {step.seq}: tool {step.name!r} was in flight and is not "
            f"restart safe; a person settles it first: redrive resolve {record.run_id} "
            f"{step.seq} --done|--not-done",
        )
    in_flight_now = [
        s
        for s in StepReader().read(journal.frames(record.run_id))
        if s.kind == "tool" and s.end is None
    ]
    if any(s.resolved_not_done for s in in_flight_now):
        return Candidate(
            record=record,
            state="resolved",
            drive=True,
            why="interrupted with a side effect in flight, which a person resolved",
        )
    settle = ""
    if in_flight_now:
        action, _declared = in_flight(in_flight_now[0])
        settle = {"rerun": "; its step in flight is re-run (restart safe)"}.get(
            action, "; its step in flight is settled by the tool's recover()"
        )
    return Candidate(
        record=record,
        state="interrupted",
        drive=True,
        why=f"interrupted: no write for {now - record.updated_at:.0f} s and no live lease" + settle,
    )


def _suspended(journal: Journal, record: RunRecord) -> Candidate:
    pending = pending_approvals(journal, record.run_id)
    if pending:
        names = ", ".join(repr(p["name"]) for p in pending)
        return Candidate(
            record=record,
            state="suspended",
            drive=False,
            why=f"waits for a decision on approval {names}: redrive decide "
            f"{record.run_id} NAME --approve|--reject",
        )
    return Candidate(
        record=record,
        state="approved",
        drive=True,
        why="suspended on an approval that is now decided",
    )


def _paused(journal: Journal, record: RunRecord, stale: float, now: float) -> Candidate:
    pause = paused_reason(journal, record.run_id)
    text = pause.text() if pause is not None else (record.error or "paused")
    if pause is not None and not pause.retry:
        return Candidate(
            record=record,
            state="paused",
            drive=False,
            why=f"{text}; waiting does not clear it: settle the cause, then redrive resume "
            f"{record.run_id}",
        )
    after = pause.retry_after if pause is not None else None
    wait = stale if after is None else after
    if record.updated_at + wait > now:
        said = "the provider asked to wait" if after is not None else "paused under --stale"
        return Candidate(
            record=record,
            state="paused",
            drive=False,
            why=f"{text}; {said}: {record.updated_at + wait - now:.0f} s more to wait",
        )
    return Candidate(record=record, state="paused", drive=True, why=text)


def _declare_tools(record: RunRecord, import_paths: Sequence[str]) -> None:
    """Import a run's entrypoint (best effort), so its tools are declared in this process."""
    if record.entrypoint:
        with _import_paths(list(import_paths)), contextlib.suppress(Exception):
            _resolve(record.entrypoint)


def resumable_runs(
    journal: Journal,
    *,
    stale: float = 60.0,
    entrypoint: str | None = None,
    status: str | None = None,
    now: float | None = None,
    import_paths: Sequence[str] = (),
) -> list[Candidate]:
    """Every run not ended, each with whether ``recover`` drives it now and why; oldest first.

    Args:
        journal: the journal.
        stale: seconds since a ``running`` run's last write before it counts as
            interrupted (a run under a live lease never does); also how long a run
            paused on what waiting clears waits when the provider named no delay.
        entrypoint: only runs whose entrypoint contains this text.
        status: None (every resumable state, by the module's table), or one of
            ``running``, ``suspended``, ``paused``: every run of that status with
            no live lease (and, for ``running``, stale) is driven.
        now: the current time, seconds since the epoch (default: ``time.time()``).
        import_paths: directories put at the front of ``sys.path`` while each
            run's entrypoint is imported (it declares the run's tools, whose
            ``recover()`` or restart safety decides whether a run is blocked; an
            entrypoint that cannot be imported leaves its tools judged as recorded).

    Raises:
        ValueError: ``stale`` is negative, or ``status`` is not a resumable status.
    """
    if stale < 0:
        raise ValueError(f"stale={stale!r}: use a number of seconds, 0 or more")
    if status is not None and status not in RESUMABLE:
        raise ValueError(
            f"status={status!r}: recover continues {', '.join(map(repr, RESUMABLE))} runs"
        )
    now = time.time() if now is None else now
    found: list[Candidate] = []
    for wanted in (status,) if status is not None else RESUMABLE:
        for record in journal.runs(status=wanted):
            if entrypoint and (record.entrypoint is None or entrypoint not in record.entrypoint):
                continue
            if wanted == RunStatus.RUNNING.value:
                _declare_tools(record, import_paths)
                candidate = _running(journal, record, stale, now)
                if status is not None and candidate.state in ("blocked", "resolved"):
                    candidate = attrs.evolve(candidate, drive=True)
            elif record.lease_expires is not None and record.lease_expires > now:
                candidate = Candidate(
                    record=record, state="held", drive=False, why="held by another worker"
                )
            elif status is not None:
                candidate = Candidate(
                    record=record,
                    state="approved" if wanted == RunStatus.SUSPENDED.value else "paused",
                    drive=True,
                    why=f"{wanted}, asked for with --status {wanted}",
                )
            elif wanted == RunStatus.SUSPENDED.value:
                candidate = _suspended(journal, record)
            else:
                candidate = _paused(journal, record, stale, now)
            found.append(candidate)
    found.sort(key=lambda c: c.record.updated_at)
    return found
