"""Resuming across a code change: ``ReplayPolicy(on_drift="continue_live")`` carried out.

:func:`continue_live` re-asks a drifted model step live (the decision is
:func:`~._engine.decide_drift`; the cursor supersedes the recorded step) and
journals a ``reasked`` note; :func:`supersede_leftovers` lets a shorter new
path leave harmless recorded steps unasked. Both write only through the run's
journal writer.
"""

from __future__ import annotations

from .._log import log_event
from ..errors import DivergenceError
from ..frames import Kind
from ._cursor import Cursor, RecordedStep
from ._engine import decide_drift
from ._fingerprint import REASKED
from ._state import RunState
from ._writer import JournalWriter

__all__ = ["continue_live", "supersede_leftovers"]


def supersede_leftovers(state: RunState, writer: JournalWriter, left: list[RecordedStep]) -> bool:
    """After a re-ask, drop recorded steps the new path never asked for, when harmless.

    Under ``on_drift="continue_live"``, once a model step was re-asked the
    loop may take a shorter path: recorded model and value steps, and
    finished read-only tool steps, it did not ask for are superseded (a
    ``reasked`` note each, reason ``"not asked after the code changed"``).
    Any other leftover (a side effect the new path does not account for)
    is not: the caller raises ``DivergenceError``.

    Returns:
        True when every leftover was superseded.
    """
    if state.config.policy.on_drift != "continue_live" or not state.can_write:
        return False
    harmless = all(
        s.kind in ("model", "value")
        or (s.kind == "tool" and bool(s.data.get("read_only")) and s.end is not None)
        for s in left
    )
    if not harmless:
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
    note = {
        "step": old.seq if old is not None else None,
        "event": "reasked",
        "name": name,
        "recorded_name": old.name if old is not None else None,
        "turn": turn,
        "paths": [path for path, _a, _b in diff],
        "recorded_key": old.key if old is not None else None,
        "key": key,
        "reason": "the model request drifted from its record (the code changed); "
        "re-asked live under on_drift='continue_live'",
    }
    writer.queue(Kind.NOTE, REASKED, note)
    state.reasked.append(note)
    log_event(
        "reasked",
        state.run_id,
        f"run {state.run_id!r}: model step {name!r} re-asked live (its request drifted "
        f"from seq {note['step']}; on_drift='continue_live')",
        seq=note["step"],
        step=name,
        paths=note["paths"],
    )
    return True
