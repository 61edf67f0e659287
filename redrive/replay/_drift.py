"""Resuming across a code change: ``ReplayPolicy(on_drift="continue_live")`` carried out.

:func:`continue_live` re-asks a drifted model step live (the decision is
:func:`~._engine.decide_drift`; the cursor supersedes the recorded step) and
journals a ``reasked`` note; :func:`supersede_leftovers` lets a shorter new
path leave harmless recorded steps unasked. Both write only through the run's
journal writer.
"""

from __future__ import annotations

from typing import Any

from .._log import log_event
from ..errors import DivergenceError, NextStep, NextStepAction
from ..frames import Kind
from ._advice import divergence_next_steps
from ._cursor import Cursor, RecordedStep
from ._engine import decide_drift
from ._fingerprint import REASKED
from ._state import RunState
from ._steps import iter_steps
from ._writer import JournalWriter

__all__ = ["advice_for", "continue_live", "leftovers", "supersede_leftovers"]


def _superseding(step: RecordedStep) -> bool:
    """True for a recorded step a new path may leave unasked: no side effect goes unseen.

    Model and value steps, and read-only tool steps (CONTRACT C6), finished or in
    flight: a read-only body changes nothing outside, and the loop never saw the
    outcome of one cut in flight, so leaving it unasked hides nothing.
    """
    if step.kind in ("model", "value"):
        return True
    return step.kind == "tool" and bool(step.data.get("read_only"))


def leftovers(state: RunState, remaining: list[RecordedStep]) -> list[RecordedStep]:
    """The recorded steps the finished loop left unasked that count against it (C6).

    A lenient rule lets recorded steps of its kind go unasked (removed calls),
    except a side effect: a side-effecting tool step (finished or in flight)
    the new path does not account for always counts.
    """
    policy = state.config.policy
    return [s for s in remaining if policy.rule(s.kind) != "lenient" or not _superseding(s)]


def _continue_live_step(state: RunState) -> NextStep:
    policy = state.config.policy
    replay = {
        "tool": policy.tool,
        "model": policy.model,
        "value": policy.value,
        "ignore": list(policy.ignore),
        "on_drift": "continue_live",
    }
    return NextStep(
        NextStepAction.POLICY,
        "resume with replay=ReplayPolicy(on_drift='continue_live') (your rules kept): a "
        "drifted model step is re-asked live, a read-only call the new code inserted runs "
        "live, finished side effects are replayed and never re-run, and a change that would "
        "re-run one still stops before its body",
        {"options": {"replay": replay}},
    )


def advice_for(
    state: RunState,
    exc: DivergenceError,
    *,
    harmless: bool = False,
    left: list[RecordedStep] | None = None,
) -> tuple[NextStep, ...]:
    """The safe next steps of a divergence of this run (see :mod:`._advice`).

    Reads the run's whole record (the error path only). Proposes
    ``on_drift="continue_live"`` only where taking it keeps the invariants
    and gets further: model drift, a read-only (or restart-safe) tool call
    the record lacks, or a shorter path that leaves only model, value and
    read-only steps unasked; never for a replay-only or finished run.

    Args:
        state: the run's state.
        exc: the divergence (its ``seq`` is the recorded step concerned).
        harmless: the tool call asked for is read-only or restart-safe.
        left: the unasked recorded steps, for a loop that finished short.
    """
    if exc.seq is None:
        return exc.next_steps
    config = state.config
    steps = list(iter_steps(config.journal.frames(state.run_id), state.run_id, verify=False))
    if left is not None:
        helps = all(_superseding(s) for s in left)
    else:
        model_drift = exc.kind == "model" and exc.found_kind == "model"
        helps = model_drift or (exc.found_kind == "tool" and harmless)
    policy = None
    if helps and state.can_write and config.policy.on_drift != "continue_live":
        policy = _continue_live_step(state)
    source = state.cursor.source if state.cursor is not None else ""
    return divergence_next_steps(state.run_id, exc.seq, steps, source=source, policy=policy)


def supersede_leftovers(state: RunState, writer: JournalWriter, left: list[RecordedStep]) -> bool:
    """Drop recorded steps the new path never asked for, when harmless (CONTRACT C6).

    Under ``on_drift="continue_live"`` the loop may take a shorter path:
    recorded model and value steps, and read-only tool steps (finished or in
    flight), it did not ask for are superseded (a ``reasked`` note each, reason
    ``"not asked after the code changed"``).
    Any other leftover (a side effect the new path does not account for)
    is not: the caller raises ``DivergenceError``.

    Returns:
        True when every leftover was superseded.
    """
    if state.config.policy.on_drift != "continue_live" or not state.can_write:
        return False
    if not all(_superseding(s) for s in left):
        return False
    with state.lock:
        for step in left:
            note = {
                "step": step.seq,
                "event": "reasked",
                "name": None,
                "recorded_name": step.name,
                "turn": step.turn,
                "paths": [],
                "recorded_key": step.key,
                "key": None,
                "reason": "not asked after the code changed (the loop took a shorter path); "
                "superseded under on_drift='continue_live'",
            }
            writer.queue(Kind.NOTE, REASKED, note)
            state.reasked.append(note)
    return True


def continue_live(
    state: RunState,
    writer: JournalWriter,
    cursor: Cursor,
    kind: str,
    name: str,
    turn: int,
    key: str,
    exc: DivergenceError,
) -> bool:
    """Under ``on_drift="continue_live"``, re-ask a drifted model step live (True), or not.

    Journals a ``reasked`` note (the superseded step, the paths that
    changed, why) before the new request; see :func:`~._engine.decide_drift`.
    """
    on_drift = state.config.policy.on_drift
    if on_drift != "continue_live" or kind != "model":
        return False
    expected, others = cursor.drift_window(turn)
    decision = decide_drift(
        on_drift=on_drift,
        can_write=state.can_write,
        kind=kind,
        expected=expected,
        others_pending=others,
    )
    if decision is None:
        return False
    old = decision.step
    # the live request is stored as a prefix delta of the last one journaled: read the
    # whole record first, so the delta's base is the journal's last request
    cursor.remaining()
    if old is not None:
        cursor.supersede(old)
    diff = (exc.diff or []) if old is not None and exc.seq == old.seq else []
    note = _reasked_note(old, name, turn, key, [path for path, _a, _b in diff])
    writer.queue(Kind.NOTE, REASKED, note)
    state.reasked.append(note)
    what = (
        f"re-asked live (its request drifted from seq {old.seq}"
        if old is not None
        else "asked live (inserted by the code change: no recorded model step of its turn "
        "is left to supersede"
    )
    log_event(
        "reasked",
        state.run_id,
        f"run {state.run_id!r}: model step {name!r} {what}; on_drift='continue_live')",
        seq=old.seq if old is not None else None,
        step=name,
        paths=note["paths"],
    )
    return True


def _reasked_note(
    old: RecordedStep | None, name: str, turn: int, key: str, paths: list[str]
) -> dict[str, Any]:
    """The payload of the ``reasked`` note of a model step asked live under continue_live.

    ``step`` (the superseded recorded step's opening seq) is written only when a
    recorded step is superseded: the frame format types ``step`` as a seq (an int)
    wherever it appears, so a model step the new code inserted (nothing of its turn
    left to supersede) carries no ``step``, never ``None`` (the journal's check
    refuses it, and the note is written with the live step's frames, after the
    model was asked and paid).

    Args:
        old: the superseded recorded model step, or None (an inserted step).
        name: the step asked live.
        turn: the caller's turn.
        key: the live request's key.
        paths: the paths that drifted from ``old``'s request (empty for an inserted step).
    """
    note: dict[str, Any] = {"event": "reasked", "name": name}
    if old is not None:
        note["step"] = old.seq
    note.update(
        {
            "recorded_name": old.name if old is not None else None,
            "turn": turn,
            "paths": paths,
            "recorded_key": old.key if old is not None else None,
            "key": key,
            "reason": (
                "the model request drifted from its record (the code changed); "
                "re-asked live under on_drift='continue_live'"
                if old is not None
                else "a model step the code change inserted (no recorded model step of its "
                "turn is left to supersede); asked live under on_drift='continue_live'"
            ),
        }
    )
    return note
