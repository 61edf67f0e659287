"""What a divergence report says: the recorded step, the step asked for, their diff, what to do.

Built by the cursor (:mod:`._cursor`) when the replayed loop asks for a step
that differs from its record.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..errors import DivergenceError
from ._diff import ABSENT, caller_location, diff_values, format_diff, short
from ._steps import RecordedStep

__all__ = ["Found", "ReplayDriftWarning", "divergence_error", "grown_list"]


class ReplayDriftWarning(UserWarning):
    """A step drifted from its record and was replayed anyway (policy ``"warn"``).

    Attributes:
        run_id: the run.
        seq: the recorded step's seq.
        kind: the step's kind (``"model"``, ``"tool"``, ``"value"``).
        name: the step's name.
        recorded: the recorded canonical arguments.
        replayed: the canonical arguments asked for now (``redrive check --update``
            writes them into an updated fixture).
        diff: ``(path, recorded, replayed)`` leaves.
    """

    run_id: str | None = None
    seq: int | None = None
    kind: str | None = None
    name: str | None = None
    recorded: Any = None
    replayed: Any = None
    diff: list[tuple[str, Any, Any]] | None = None


@attrs.frozen
class Found:
    """The step the replayed loop asked for."""

    kind: str
    name: str
    key: str
    args: Any


#: said when a replayed model request only adds items to the recorded one: a store of the
#: framework's own resent what an interrupted attempt had saved in it
STORED_HISTORY_HINT = (
    "  the replayed request only adds items to the recorded one: a conversation store the "
    "framework keeps itself (an Agents SDK session, a LangGraph checkpointer, a saved "
    "message history) most likely resent what the interrupted attempt had stored in it. "
    "Let redrive own that history on resume: wrap an Agents SDK session in "
    "redrive.integrations.openai_agents.RecordedSession, invoke a LangGraph graph with "
    "redrive.integrations.langgraph.invoke, or build the history from the run's input "
    "(see docs/framework-state.md)."
)


def _subsequence(short_list: list[Any], long_list: list[Any]) -> bool:
    """True when every item of ``short_list`` is in ``long_list``, in order."""
    items = iter(long_list)
    return all(any(item == other for other in items) for item in short_list)


def grown_list(recorded: Any, replayed: Any, path: str = "$") -> tuple[str, int, int] | None:
    """The first list the replayed arguments grew: ``(path, recorded items, items added)``.

    A list grew when the replayed one holds every recorded item, in order,
    and more (a conversation history with turns inserted or appended).
    """
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in recorded:
            if key in replayed:
                found = grown_list(recorded[key], replayed[key], f"{path}.{key}")
                if found is not None:
                    return found
        return None
    if isinstance(recorded, list | tuple) and isinstance(replayed, list | tuple):
        old, new = list(recorded), list(replayed)
        if len(new) > len(old) and _subsequence(old, new):
            return path, len(old), len(new) - len(old)
        if len(new) == len(old):
            for index, (a, b) in enumerate(zip(old, new, strict=True)):
                found = grown_list(a, b, f"{path}[{index}]")
                if found is not None:
                    return found
    return None


def _history_hint(run_id: str, grown: tuple[str, int, int]) -> str:
    where, kept, added = grown
    return (
        f"  the replayed request's {where} holds the {kept} recorded items, in order, and "
        f"{added} more: the conversation the loop sent is longer than when run {run_id!r} "
        "recorded this step. A history the loop read from a store of its own (pydantic-ai "
        "message_history, a saved chat, an Agents SDK session, a LangGraph checkpointer) was "
        "most likely written by an attempt of this run that did not finish. Nothing was sent "
        "for this step. Put the store back as it was when the run started (the recorded "
        "request shows it) and write the run's messages to it only after run.finish "
        "returned (or when a redelivered job finds run.finished); an Agents SDK session or a "
        "LangGraph checkpointer redrive owns for you (RecordedSession, "
        "redrive.integrations.langgraph.invoke; see docs/framework-state.md)."
    )


def divergence_error(
    run_id: str,
    step: RecordedStep,
    found: Found,
    *,
    closest: RecordedStep | None,
    recent: list[str],
) -> DivergenceError:
    """Build the :class:`DivergenceError` for a recorded step and the step asked for.

    When the step asked for is of another kind or name than the recorded
    one at this point, the diff is taken against the nearest unconsumed
    recorded step of the asked-for kind and name (if the journal has one),
    so a changed tool argument is named (``$.amount``) even when an
    unconsumed step of another kind (a model step a lenient rule left
    behind) comes first. The error's ``caller`` is the user's frame that
    asked for the step (``file:line in function``), when it can be told.
    The run adds the next steps (``next_steps`` and the message's "What to
    do"), from the whole record: see :mod:`._advice`.
    """
    same = step.kind == found.kind and step.name == found.name
    closest = None if same else closest
    if same:
        diff = diff_values(step.args, found.args)
    elif closest is not None:
        diff = diff_values(closest.args, found.args)
    else:
        diff = []
    caller = caller_location()
    lines = [
        f"run {run_id!r} diverged from its journal at seq {step.seq}: "
        + (
            f"the {step.kind} step {step.name!r} was called with different arguments."
            if same
            else f"the loop asked for {found.kind} {found.name!r} where the journal has "
            f"{step.kind} {step.name!r}."
        ),
        f"  recorded: {step.kind} {step.name} key {step.key}",
        f"  replayed: {found.kind} {found.name} key {found.key}",
    ]
    if caller is not None:
        lines.append(f"  called from: {caller}")
    if diff and closest is not None:
        lines.append(
            f"  differences from the nearest recorded {closest.kind} {closest.name!r} "
            f"(seq {closest.seq}; recorded -> replayed):"
        )
        lines.append(format_diff(diff))
    elif diff:
        lines.append("  differences (recorded -> replayed):")
        lines.append(format_diff(diff))
    elif not same:
        lines.append(f"  replayed arguments: {short(found.args)}")
    grown = grown_list(step.args, found.args) if same and step.kind == "model" else None
    if grown is not None:
        lines.append(_history_hint(run_id, grown))
    elif same and step.kind == "model" and diff and all(r is ABSENT for _, r, _ in diff):
        lines.append(STORED_HISTORY_HINT)
    if recent:
        lines.append("  last matching steps: " + "; ".join(recent))
    else:
        lines.append("  no step matched before this one")
    return DivergenceError(
        "\n".join(lines),
        run_id=run_id,
        seq=step.seq,
        kind=step.kind,
        name=step.name,
        found_kind=found.kind,
        found_name=found.name,
        expected=step.args,
        found=found.args,
        expected_key=step.key,
        found_key=found.key,
        diff=diff,
        context=list(recent),
        caller=caller,
    )
