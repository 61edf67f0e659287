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
    "blocked_next_steps",
    "render_next_steps",
    "retry_limit_next_steps",
]


def render_next_steps(steps: Sequence[NextStep]) -> str:
    """Return the "What to do" part of an error message for ``steps`` ("" for none).

    Args:
        steps: the error's next steps, safest first.

    Returns:
        ``"What to do, safest first:"`` and one numbered line per step.
    """
    if not steps:
        return ""
    lines = ["What to do, safest first:"]
    lines += [f"  {i}. {step.text}" for i, step in enumerate(steps, start=1)]
    return "\n".join(lines)


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
