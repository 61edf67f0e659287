"""Safe advice: the next steps an error proposes, as data, and their text (DESIGN C5).

Every next step an error proposes keeps the resume contract's invariants when
followed (invariant 17). A side effect whose outcome is unknown is settled by
a person first (``redrive resolve``); a policy that tells the model comes
next; code changes come last, each with the condition under which it is safe
(``restart_safe=True`` only for a tool that dedupes on its idempotency key).
The message's "What to do" is rendered from the steps by
:func:`render_next_steps`, so the text and the data never disagree.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from .errors import NextStep, NextStepAction

__all__ = [
    "after_end_advice",
    "blocked_next_steps",
    "divergence_next_steps",
    "render_next_steps",
    "retry_limit_next_steps",
]


def render_next_steps(steps: Sequence[NextStep]) -> str:
    """Return the "What to do" part of an error message for ``steps`` ("" for none).

    Args:
        steps: the error's next steps, safest first.

    Returns:
        ``"What to do:"`` and one numbered line per step, safest first.
    """
    if not steps:
        return ""
    lines = ["What to do:"]
    lines += [f"  {i}. {step.text}" for i, step in enumerate(steps, start=1)]
    return "\n".join(lines)


def after_end_advice(run_id: str) -> str:
    """What to do with a run that ended (succeeded, failed, cancelled): text only.

    Replaying it read-only runs nothing. A fork continues it in a new run, and
    is safe only after its last side-effecting tool step: a fork before a
    finished side effect makes the new run run it again. (No "start a new
    run_id": a new run of the same job repeats every side effect it made.)
    """
    return (
        "Replay it read-only (live=False); to continue it in a new run, fork it at a seq "
        "after its last side-effecting tool step (`redrive show "
        f"{shlex.quote(run_id)}` lists them; a fork before a finished side effect runs it "
        "again)."
    )


def _resolve(run_id: str, seq: int, tool: str, idempotency_key: str) -> NextStep:
    run, at = shlex.quote(run_id), str(seq)
    return NextStep(
        NextStepAction.RESOLVE,
        f"check the external system for this {tool} call (idempotency key "
        f"{idempotency_key}), then record what you found: `redrive resolve {run} {at} --done "
        "RESULT_JSON --reason TEXT` if it took effect (resuming hands the loop that result, "
        f"the body does not run), or `redrive resolve {run} {at} --not-done --reason TEXT` if "
        "it did not (resuming runs it once, with the same idempotency key)",
        {"seq": seq, "outcomes": ["done", "not_done"]},
    )


def _person(run_id: str, tool: str, idempotency_key: str) -> NextStep:
    run = shlex.quote(run_id)
    commands = [f"redrive show {run}", f"redrive cancel {run} --reason TEXT"]
    return NextStep(
        NextStepAction.PERSON,
        f"a person decides: check the external system for the earlier {tool} call "
        f"(idempotency key {idempotency_key}) and look at the run with `{commands[0]}`; "
        f"to stop it, `{commands[1]}`",
        {"commands": commands},
    )


def _tell_model(tool: str) -> NextStep:
    return NextStep(
        NextStepAction.POLICY,
        "or resume with on_in_flight='tell_model': the loop gets a not_safely_resumable "
        f"outcome for this {tool} call (nothing runs) and the model reconciles",
        {"options": {"on_in_flight": "tell_model"}},
    )


def _restart_safe(tool: str) -> NextStep:
    return NextStep(
        NextStepAction.RESUME,
        f"only if {tool} dedupes on the idempotency key (the external system ignores a "
        "second request with the same key): declare it restart_safe=True, then resume; "
        "otherwise this would repeat its side effect",
        {"after": "restart_safe", "only_if": "the tool dedupes on the idempotency key"},
    )


def _recover_hook(tool: str) -> NextStep:
    return NextStep(
        NextStepAction.RESUME,
        f"give {tool} a recover(args, idempotency_key) hook that asks the external system "
        "what became of the call (Recovery.done / not_done / unknown), then resume",
        {"after": "recover"},
    )


def blocked_next_steps(
    *,
    run_id: str,
    seq: int,
    tool: str,
    idempotency_key: str,
    resolvable: bool,
    retry: bool,
    has_recover: bool,
) -> tuple[NextStep, ...]:
    """The next steps of a ``SideEffectRetryBlockedError`` (and of ``redrive recover``'s line).

    Args:
        run_id: the run.
        seq: the blocked step's seq (its ``tool_start``; the failed call's for a retry).
        tool: the tool's name.
        idempotency_key: the key the blocked call's body received (or would have).
        resolvable: the step at ``seq`` is in flight (no outcome), so a person can
            ``redrive resolve`` it; False for a step that has an outcome (a
            retryable error that ended the run, or the failed call a retry repeats).
        retry: the call is blocked because the same call failed earlier.
        has_recover: the tool already has a ``recover()`` hook.

    Returns:
        RESOLVE (resolvable) or PERSON first, then the ``tell_model`` policy,
        then the code changes, each with the condition that makes it safe.
    """
    first = (
        _resolve(run_id, seq, tool, idempotency_key)
        if resolvable
        else _person(run_id, tool, idempotency_key)
    )
    code = [_restart_safe(tool)]
    if not retry and not has_recover:  # recover() is asked about an unsettled step, not a retry
        code.insert(0, _recover_hook(tool))
    return (first, _tell_model(tool), *code)


def retry_limit_next_steps(
    *,
    run_id: str,
    seq: int,
    tool: str,
    idempotency_key: str,
    attempts: int,
    restart_safe: bool,
) -> tuple[NextStep, ...]:
    """The next steps of a ``RetryLimitExceededError`` (an in-flight step started too often).

    Args:
        run_id: the run.
        seq: the step's seq.
        tool: the tool's name.
        idempotency_key: the step's key.
        attempts: how many times it was started.
        restart_safe: the tool is restart safe or read-only (another start is harmless).

    Returns:
        RESOLVE first (a resolution as not done runs it once more), then a
        person finding why the worker dies in it; a higher ``max_attempts`` only
        for a restart-safe tool.
    """
    steps = [
        _resolve(run_id, seq, tool, idempotency_key),
        NextStep(
            NextStepAction.PERSON,
            f"find out why the worker dies while {tool} runs (its logs; `redrive show "
            f"{shlex.quote(run_id)}` lists the attempts) before starting it again",
            {"commands": [f"redrive show {shlex.quote(run_id)}"]},
        ),
    ]
    if restart_safe:
        steps.append(
            NextStep(
                NextStepAction.POLICY,
                f"{tool} is restart safe, so another start is harmless: resume with "
                f"max_attempts={attempts + 1} or more",
                {"options": {"max_attempts": attempts + 1}},
            )
        )
    return tuple(steps)


def divergence_next_steps(
    *, run_id: str, seq: int, kind: str, side_effects_from: Sequence[int], show: str
) -> tuple[NextStep, ...]:
    """The next steps of a ``DivergenceError`` at ``seq`` (the loop no longer makes the record).

    A fork before ``seq`` drops every recorded step from ``seq`` on, and the new
    run makes them again: it is proposed only when none of them is a
    side-effecting tool call (finished or in flight). Otherwise a person
    decides (``redrive what-changed``, ``redrive show``, ``redrive cancel``) and
    the run can be finished on the code version that recorded it.

    Args:
        run_id: the run.
        seq: the seq of the recorded step the loop diverged from.
        kind: that step's kind (a model step may be replayed despite drift).
        side_effects_from: seqs of the side-effecting tool steps (not read-only,
            not restart safe) recorded at or after ``seq``.
        show: the command that shows the run (naming its journal).

    Returns:
        FORK first when it is safe, else PERSON and a RESUME on the recorded code;
        for a model step, a policy that replays the recorded response with a warning.
    """
    run = shlex.quote(run_id)
    steps: list[NextStep] = []
    if not side_effects_from:
        steps.append(
            NextStep(
                NextStepAction.FORK,
                f"if the change is intended, fork the run before seq {seq} "
                f"(redrive.fork(journal, {run_id!r}, {seq}, NEW_RUN_ID)): no side-effecting "
                "tool step was recorded from there on, so nothing runs twice",
                {"before": seq},
            )
        )
    else:
        listed = ", ".join(str(s) for s in side_effects_from[:5])
        commands = [f"redrive what-changed {run}", show, f"redrive cancel {run} --reason TEXT"]
        steps.append(
            NextStep(
                NextStepAction.PERSON,
                f"a person decides: side-effecting tool steps were recorded at seq {listed} "
                f"(at or after seq {seq}), so a fork or a new run would run them again; see "
                f"`{commands[0]}` and `{commands[1]}`, and to stop the run, `{commands[2]}`",
                {"commands": commands},
            )
        )
    if kind == "model":
        steps.append(
            NextStep(
                NextStepAction.POLICY,
                "to replay recorded model responses despite the prompt change, resume with "
                "replay=ReplayPolicy(model='warn')",
                {"options": {"replay": {"model": "warn"}}},
            )
        )
    steps.append(
        NextStep(
            NextStepAction.RESUME,
            "finish the run with the code version that recorded it (its fingerprint names "
            f"it: `redrive what-changed {run}`), then deploy the change for new runs",
            {"code": "recorded"},
        )
    )
    return tuple(steps)
