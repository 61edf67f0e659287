"""What a dry replay's stop means, for :func:`redrive.what_changed` (see :mod:`._whatchanged`).

The dry replay re-drives a run replay-only (no model call, no tool body) over a
private copy. Where it stops without a divergence, these say whether that is
an answer: the code raising where a finished run succeeded breaks the replay
(``redrive check`` fails it as ``error``); a stop where an unfinished run goes
live, with recorded steps still unreplayed, leaves it undecided.
"""

from __future__ import annotations

from .errors import ReplayMissError
from .replay import RecordedStep, Run, unreplayed_steps
from .storage import Journal, RunStatus

__all__ = ["past_live", "raised_where"]


def raised_where(copy: Journal, run: Run, run_id: str, exc: Exception) -> tuple[int, str] | None:
    """Where and why the code raising ``exc`` breaks the dry replay of run ``run_id``.

    Returns:
        ``(seq, why)``: the first recorded step it did not replay (-1: none left) and a
        sentence, when the run finished (succeeded) and now raises; None for an
        unfinished run (a resume raises there too; nothing drifted).
    """
    record = copy.get_run(run_id)
    if record is None or record.status != RunStatus.SUCCEEDED.value:
        return None
    left = unreplayed_steps(run) or []
    return (
        left[0].seq if left else -1,
        f"the current code raises {type(exc).__name__}: {exc} where the finished run "
        "succeeded (a replayed outcome, such as a recorded retry signal, it no longer handles?)",
    )


def past_live(exc: ReplayMissError, left: list[RecordedStep]) -> str:
    """Why a dry replay that stopped where the run goes live cannot tell the rest, or "".

    Args:
        exc: the replay miss (its seq, kind and name: the step that goes live).
        left: the recorded steps not replayed yet. None left: the resume goes on
            live and never diverges (returns "").
    """
    if not left:
        return ""
    names = ", ".join(f"seq {s.seq} {s.kind} {s.name}" for s in left[:3])
    more = f" and {len(left) - 3} more" if len(left) > 3 else ""
    return (
        f"the replay stops at seq {exc.seq} ({exc.kind} {exc.name}), where a resume goes live "
        f"(no model call or tool body runs here), while {len(left)} recorded step(s) are not "
        f"replayed yet ({names}{more}): a strict resume may still diverge on them. What to "
        "do: read what a resume does at each step with `redrive plan RUN`."
    )
