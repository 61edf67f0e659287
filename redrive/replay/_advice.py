"""Safe advice for a divergence: the next steps a ``DivergenceError`` proposes (pure).

DESIGN invariant 17: every next step an error proposes keeps the invariants
when followed. A fork copies a run's steps before a seq and runs the rest
live, so it is proposed only before a seq with no side-effecting tool step
(finished, failed or in flight) at or after it: following it never runs a
finished side effect again. Where no automatic step is safe, a person
decides (``PERSON``, with the commands to look and to decide), and the run
can still be finished on the code it was recorded with (``RESUME`` with
``{"code": "recorded"}``).

:func:`divergence_next_steps` computes the steps from the recorded steps;
:meth:`redrive.errors.ReplayError.with_next_steps` sets them on an error and
renders its message's "What to do" from them (one place), so the message and
``next_steps`` say the same.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from ..errors import NextStep, NextStepAction
from ..storage import parse_journal_url
from ._steps import RecordedStep

__all__ = [
    "cli_command",
    "divergence_next_steps",
    "first_safe_fork",
    "side_effecting",
]


def side_effecting(step: RecordedStep) -> bool:
    """True for a recorded tool step whose body has an effect a re-run repeats.

    A tool step declared neither ``read_only`` nor ``restart_safe``, whatever
    became of it (done, failed, blocked or in flight: its body may have run).
    """
    data = step.data
    return step.kind == "tool" and not (data.get("read_only") or data.get("restart_safe"))


def first_safe_fork(steps: Iterable[RecordedStep]) -> int:
    """The smallest seq a fork may be made before without re-running a side effect.

    Args:
        steps: every recorded step of the run (consumed or not, live or replayed).

    Returns:
        One past the opening seq of the run's last side-effecting tool step
        (0 when it has none): a fork before any seq at or above it copies
        every side effect, so the forked run replays them.
    """
    last = -1
    for step in steps:
        if side_effecting(step):
            last = max(last, step.seq)
    return last + 1


def cli_command(source: str, command: str, run_id: str, *rest: str) -> str:
    """The ``redrive`` command line for ``command`` on ``run_id`` in the journal ``source``.

    Args:
        source: the journal's URL ("" or the default file: no ``--journal``).
        command: the subcommand (``"show"``, ``"what-changed"``...).
        run_id: the run.
        *rest: further arguments, as typed (not quoted).
    """
    tail = " ".join((shlex.quote(run_id), *rest))
    if source and parse_journal_url(source).scheme == "rdj":
        return f"redrive {command} {shlex.quote(source)}" + (f" {' '.join(rest)}" if rest else "")
    if source and source not in ("runs.duckdb", ":memory:"):
        return f"redrive --journal {shlex.quote(source)} {command} {tail}"
    return f"redrive {command} {tail}"


def divergence_next_steps(
    run_id: str,
    seq: int,
    steps: Sequence[RecordedStep],
    *,
    source: str = "",
    policy: NextStep | None = None,
) -> tuple[NextStep, ...]:
    """The next steps of a divergence at recorded seq ``seq``, safest first.

    Args:
        run_id: the run.
        seq: the recorded step the loop diverged at (or the first one it left unasked).
        steps: every recorded step of the run (to find side effects at or after ``seq``).
        source: the journal's URL, for the commands.
        policy: a replay policy that keeps the invariants for this divergence, or None.

    Returns:
        ``FORK`` before ``seq`` when no side-effecting tool step is recorded at
        or after it, then ``RERECORD``; else ``PERSON`` (what-changed, show,
        cancel) and ``RESUME`` with ``{"code": "recorded"}``. ``policy`` comes
        after a fork and before the person's steps' resume.
    """
    show = cli_command(source, "show", run_id)
    if seq >= first_safe_fork(steps):
        fork = NextStep(
            NextStepAction.FORK,
            f"if the change is intended, fork the run before seq {seq} and continue the fork "
            f"on the new code: redrive.fork(journal, {run_id!r}, {seq}, NEW_RUN_ID) (no side "
            "effect is recorded at or after that seq, so the fork repeats none)",
            {"before": seq},
        )
        rerecord = NextStep(
            NextStepAction.RERECORD,
            "or record a new run (a new run_id); to look at the record run " + f"`{show}`",
        )
        return (fork, *((policy,) if policy else ()), rerecord)
    commands = [cli_command(source, "what-changed", run_id), show]
    cancel = "cancel it"
    if not source or parse_journal_url(source).scheme != "rdj":  # an export is read-only
        commands.append(cli_command(source, "cancel", run_id, "--reason", "..."))
        cancel = f"cancel it (`{commands[2]}`)"
    person = NextStep(
        NextStepAction.PERSON,
        "a person decides: side effects are recorded at or after seq "
        f"{seq}, so neither a fork nor a re-record may be made without re-running them; "
        f"look at what changed (`{commands[0]}`) and at the record (`{commands[1]}`), then "
        f"finish the run on the code it was recorded with, or {cancel}",
        {"commands": commands},
    )
    resume = NextStep(
        NextStepAction.RESUME,
        "resume the run on the code version it was recorded with (the run's fingerprint "
        f"names it: `{commands[0]}`): it replays to where it stopped and goes on",
        {"code": "recorded"},
    )
    return (person, *((policy,) if policy else ()), resume)
