"""The errors of a tool step that must not run: blocked, or started too often (DESIGN C5).

Their advice is data (``next_steps``, :mod:`redrive._advice`), safest first,
and their "What to do" is rendered from it: a person settles the unknown
outcome first (``redrive resolve`` for a step in flight), then the
``tell_model`` policy; code changes come last, each with its condition.
"""

from __future__ import annotations

from typing import Any

from .._advice import blocked_next_steps, render_next_steps, retry_limit_next_steps
from ..errors import RetryLimitExceededError, SideEffectRetryBlockedError
from ._diff import short

__all__ = ["blocked_error", "retry_limit_error"]


def blocked_error(
    *,
    run_id: str,
    tool: str,
    seq: int,
    arguments: Any,
    idempotency_key: str,
    attempts: int,
    has_recover: bool,
    cause: str = "",
    retry: bool = False,
    resolvable: bool = False,
) -> SideEffectRetryBlockedError:
    """Return the ``SideEffectRetryBlockedError`` for a tool call redrive will not run.

    Args:
        run_id: the run.
        tool: the tool's name.
        seq: the step the block is about (the failed call's, for a retry).
        arguments: the call's canonical arguments.
        idempotency_key: the key of the operation the call belongs to.
        attempts: how many times the step was started.
        has_recover: the tool has a ``recover()`` hook.
        cause: why the outcome is unknown ("" when nothing more is known).
        retry: the same call failed earlier (not an interrupted call).
        resolvable: the step at ``seq`` is in flight (no outcome): ``redrive
            resolve`` can settle it.
    """
    what = (
        f"tool {tool!r} already ran at seq {seq} and failed; calling it again with the "
        "same arguments could repeat its side effect"
        if retry
        else f"tool {tool!r} was in flight at seq {seq} when the run stopped: it "
        "started, and whether its side effect happened is unknown"
    )
    steps = blocked_next_steps(
        run_id=run_id,
        seq=seq,
        tool=tool,
        idempotency_key=idempotency_key,
        resolvable=resolvable and not retry,
        retry=retry,
        has_recover=has_recover,
    )
    return SideEffectRetryBlockedError(
        f"run {run_id!r}: {what}. It is not restart-safe, so redrive will not run it "
        f"again.\n  arguments: {short(arguments)}\n  idempotency key: {idempotency_key}\n"
        + (f"  cause: {cause}\n" if cause else "")
        + render_next_steps(steps),
        run_id=run_id,
        seq=seq,
        tool=tool,
        arguments=arguments,
        idempotency_key=idempotency_key,
        attempts=attempts,
        next_steps=steps,
    )


def retry_limit_error(
    *,
    run_id: str,
    tool: str,
    seq: int,
    arguments: Any,
    idempotency_key: str,
    attempts: int,
    max_attempts: int,
    restart_safe: bool,
) -> RetryLimitExceededError:
    """Return the ``RetryLimitExceededError`` for an in-flight step started ``attempts`` times.

    Args:
        run_id: the run.
        tool: the tool's name.
        seq: the step's seq.
        arguments: the call's canonical arguments.
        idempotency_key: the step's key.
        attempts: how many times it was started.
        max_attempts: the run's limit.
        restart_safe: the tool is restart safe or read-only.
    """
    steps = retry_limit_next_steps(
        run_id=run_id,
        seq=seq,
        tool=tool,
        idempotency_key=idempotency_key,
        attempts=attempts,
        restart_safe=restart_safe,
    )
    return RetryLimitExceededError(
        f"run {run_id!r} seq {seq}: tool {tool!r} was started {attempts} times without "
        f"finishing (limit {max_attempts}); the run stops instead of looping.\n"
        f"  arguments: {short(arguments)}\n  idempotency key: {idempotency_key}\n"
        + render_next_steps(steps),
        run_id=run_id,
        seq=seq,
        tool=tool,
        arguments=arguments,
        idempotency_key=idempotency_key,
        attempts=attempts,
        next_steps=steps,
    )
