"""Approvals that survive a restart: suspend a run until a person decides.

``await_approval(name, payload)`` asks the journal for the decision on
``(run_id, name)``. With none yet, it journals an ``approval_requested`` note
(once per approval) and suspends the run: the ``with redrive.run(...)`` block
ends and the run's status is ``suspended``. ``journal.decide(run_id, name,
approved, by=...)`` records the decision (the first one wins); re-running the
loop resumes the run, which now gets the decision. The decision is journaled
as a value step, so every later replay returns it from the journal without
asking again, even if the decision store were to change.
"""

from __future__ import annotations

from typing import Any

from ..errors import DivergenceError
from ..frames import Kind
from ..storage import Decision, Journal
from ._active import current_run
from ._diff import diff_values, format_diff
from ._run import Suspended

__all__ = ["APPROVAL_STEP", "await_approval", "pending_approvals"]

#: Step name of journaled approval decisions (value steps labelled with the approval name).
APPROVAL_STEP = "approval"
_REQUESTED = "approval_requested"


def await_approval(name: str, payload: Any = None) -> Decision:
    """Return the recorded decision on approval ``name`` of the active run, or suspend the run.

    Args:
        name: the approval's name, unique within the run (e.g. ``"refund:ord-7"``).
        payload: what is being approved (canonical plain data); journaled with
            the request, and matched on replay: a strict replay whose payload
            changed raises ``DivergenceError`` rather than applying an old
            decision to a new request.

    Returns:
        The :class:`~redrive.storage.Decision` (``approved``, ``by``, ``at``,
        ``note``); a rejection is returned too, for the loop to act on.

    Raises:
        RuntimeError: no run is active (an approval needs a run to suspend).
        TypeError: ``name`` is not a non-empty string, or ``payload`` cannot be
            encoded canonically.
        BaseException (private): suspends the run when no decision is recorded
            yet; the run's exit turns it into status ``suspended`` and ends the
            ``with`` block. Do not catch it.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"await_approval: name must be a non-empty string, not {name!r}")
    run = current_run()
    if run is None:
        raise RuntimeError(
            f"await_approval({name!r}) was called outside a run; approvals suspend a run, so "
            "call it inside `with redrive.run(journal, run_id):`"
        )

    def decide() -> dict[str, Any]:
        found = run.journal.decision(run.run_id, name)
        asked, requested = _requested(run.journal, run.run_id, name)
        if found is not None and asked:
            current = run.redact({"payload": payload})["payload"]
            if requested != current:
                diff = diff_values(requested, current)
                raise DivergenceError(
                    f"run {run.run_id!r}: approval {name!r} was decided by {found.by!r} for "
                    "another payload than the loop asks for now; applying that decision "
                    f"would approve something nobody saw.\n  differences (approved -> asked):\n"
                    f"{format_diff(diff)}\nWhat to do: ask under a new approval name for the "
                    "new payload, or restore the code that made the original request.",
                    run_id=run.run_id,
                    seq=None,
                    kind="value",
                    name=APPROVAL_STEP,
                    found_kind="value",
                    found_name=APPROVAL_STEP,
                    expected=requested,
                    found=current,
                    expected_key=None,
                    found_key=None,
                    diff=diff,
                    context=[],
                )
        if found is None:
            # a fork cut after the request copies it: a changed payload is asked anew, so a
            # person decides on what the loop asks for now (the latest request counts)
            if not asked or requested != run.redact({"payload": payload})["payload"]:
                run.note(_REQUESTED, {"name": name, "payload": payload})
            raise Suspended(
                f"run {run.run_id!r} waits for approval {name!r}; record it with "
                f"journal.decide({run.run_id!r}, {name!r}, approved, by=...) and resume the run"
            )
        return {"approved": found.approved, "by": found.by, "at": found.at, "note": found.note}

    data = run.value_step(APPROVAL_STEP, name, decide, extra={"payload": payload})
    return Decision(
        run_id=run.run_id,
        name=name,
        approved=bool(data["approved"]),
        by=str(data["by"]),
        at=float(data["at"]),
        note=str(data.get("note", "")),
    )


def _requested(journal: Journal, run_id: str, name: str) -> tuple[bool, Any]:
    """Return (whether approval ``name`` was requested, the payload of its latest request)."""
    asked, payload = False, None
    for frame in journal.frames(run_id):
        if frame.kind == Kind.NOTE.value and frame.name == _REQUESTED:
            data = frame.data().get("data", {})
            if data.get("name") == name:
                asked, payload = True, data.get("payload")
    return asked, payload


def pending_approvals(journal: Journal, run_id: str) -> list[dict[str, Any]]:
    """Return the approvals run ``run_id`` requested that have no recorded decision.

    Returns:
        ``[{"name": ..., "payload": ...}]`` in first-request order, each with the payload of
        its latest request (a fork asked again for a changed payload); empty when none.
    """
    latest: dict[str, Any] = {}
    for frame in journal.frames(run_id):
        if frame.kind == Kind.NOTE.value and frame.name == _REQUESTED:
            data = frame.data().get("data", {})
            latest[str(data.get("name"))] = data.get("payload")
    return [
        {"name": name, "payload": payload}
        for name, payload in latest.items()
        if journal.decision(run_id, name) is None
    ]
