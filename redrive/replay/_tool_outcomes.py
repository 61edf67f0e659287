"""What happens to a tool step once its body ran, or when it was in flight.

:class:`ToolOutcomes` journals a body's result or exception (durable before
the loop sees it), checks a body run on replay (``live_tools``) against the
record, and carries out the resume policy for a step in flight: its
``recover()``, a re-run, or the block (``SideEffectRetryBlockedError``, or the
not-safely-resumable outcome handed to the model).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import (
    DivergenceError,
    DivergenceReason,
    SideEffectRetryBlockedError,
)
from ..frames import Kind, decode, encode, rebuild, store
from ._appender import Appender
from ._blocked import blocked_error
from ._context import _boundary
from ._diff import caller_location, diff_values, format_diff
from ._failure import tool_error_is_retryable
from ._flows import Issue
from ._operations import OperationLedger
from ._policy import redact_paths
from ._retry import retry_requested
from ._state import RunState
from ._steps import RecordedStep
from ._toolspec import (
    Recovery,
    ToolPlan,
    ToolSpec,
    comparable,
    error_payload,
    mark_retryable,
    same_error,
)
from ._writer import JournalWriter

__all__ = ["ToolOutcomes"]


class ToolOutcomes:
    """A run's tool outcomes: results and errors journaled, in-flight steps settled.

    Args:
        state: the run's state.
        writer: the run's journal writer.
        ledger: the run's logical operations (a failed call is remembered there).
        appender: the durable write path.
    """

    def __init__(
        self, state: RunState, writer: JournalWriter, ledger: OperationLedger, appender: Appender
    ) -> None:
        self._state = state
        self._config = state.config
        self._writer = writer
        self._ledger = ledger
        self._appender = appender

    def _check_live_tool(
        self, spec: ToolSpec, plan: ToolPlan, result: Any, error: BaseException | None
    ) -> None:
        """Compare a live-run tool's outcome with the recorded one (``live_tools``).

        Raises:
            DivergenceError: the body returned another result, raised where the
                record has a result, or returned where the record has an error
                (``diff`` names the paths under ``$.result`` / ``$.error``).
        """
        step = plan.check
        assert step is not None and step.end is not None
        outcome = step.decode_outcome()
        found: dict[str, Any]
        if error is not None:
            found = {"error": {"type": type(error).__name__, "message": str(error)}}
        else:
            if self._config.redact_paths:
                result = redact_paths(result, self._config.redact_paths)
            found = {"result": comparable(result)}
        if step.end.kind == Kind.TOOL_ERROR.value:
            recorded_error = outcome.get("error") or {}
            expected: dict[str, Any] = {
                "error": {
                    "type": recorded_error.get("type"),
                    "message": recorded_error.get("message"),
                }
            }
        else:
            where = f"run {self._state.run_id!r} seq {step.seq}: tool {spec.name!r} result"
            expected = {"result": comparable(rebuild(outcome.get("result"), where=where))}
        if "error" in expected and "error" in found:
            # exception types compare by name (a rebuilt error may be a RecordedToolError)
            found["error"]["type"] = (
                expected["error"]["type"]
                if same_error(expected["error"], error)
                else found["error"]["type"]
            )
        diff = diff_values(expected, found)
        if diff:
            raise self._live_tool_divergence(spec, step, expected, found, diff)

    def _live_tool_divergence(
        self,
        spec: ToolSpec,
        step: RecordedStep,
        expected: Any,
        found: Any,
        diff: list[tuple[str, Any, Any]],
    ) -> DivergenceError:
        caller = caller_location()
        lines = [
            f"run {self._state.run_id!r} diverged from its journal at seq {step.seq}: the tool "
            f"{spec.name!r} ran live (live_tools) and its outcome differs from the record.",
            *([f"  called from: {caller}"] if caller is not None else []),
            "  differences (recorded -> live):",
            format_diff(diff),
            "What to do: if the tool's new behaviour is intended, re-record the run; to hand "
            "back the recorded outcome without running the body, leave the tool out of "
            "live_tools; to look at what it returned then, run "
            "`redrive show` on the run's journal.",
        ]
        return DivergenceError(
            "\n".join(lines),
            run_id=self._state.run_id,
            seq=step.seq,
            kind="tool",
            name=spec.name,
            found_kind="tool",
            found_name=spec.name,
            expected=expected,
            found=found,
            expected_key=step.key,
            found_key=step.key,
            diff=diff,
            reason=DivergenceReason.OUTCOME,
            caller=caller,
        )

    def recover(
        self, spec: ToolSpec, step: RecordedStep, stored: Any, key: str, idem: str
    ) -> ToolPlan:
        """Ask the tool's ``recover()`` about an in-flight step and carry out its answer."""
        assert spec.recover is not None
        try:
            found = spec.recover(dict(stored), idem)
        except Exception as exc:
            raise self.blocked_error(
                spec,
                step.seq,
                stored,
                idem,
                step.attempts,
                cause=f"its recover() raised {type(exc).__name__}: {exc}",
                resolvable=step.end is None,
            ) from exc
        if not isinstance(found, Recovery):
            raise TypeError(
                f"tool {spec.name!r}: recover() returned {found!r}; return "
                "redrive.Recovery.done(result), .not_done() or .unknown()"
            )
        if found.state == "done":
            packed, value = self._result(found.result)
            self._writer.queue(
                Kind.TOOL_DONE,
                spec.name,
                {"step": step.seq, "result": packed, "recovered": True},
            )
            self._appender.flush()
            self._state.replayed_steps += 1
            return ToolPlan(
                seq=step.seq, key=idem, name=spec.name, turn=step.turn, replayed=True, value=value
            )
        if found.state == "unknown":
            return self.blocked(
                spec,
                step.seq,
                stored,
                key,
                step.turn,
                step.attempts,
                idem,
                cause=found.reason or "recover() could not tell",
                resolvable=step.end is None,
            )
        return self.rerun(spec, step, idem, key)

    def rerun(self, spec: ToolSpec, step: RecordedStep, idem: str, key: str) -> ToolPlan:
        with self._writer.unqueue_on_failure():
            self._writer.queue(
                Kind.NOTE,
                spec.name,
                {"event": "attempt", "step": step.seq, "attempt": step.attempts + 1},
            )
            self._appender.flush()
        self._state.live_steps += 1
        _boundary("tool_claimed", self._state.run_id, step.seq, spec.name)
        return ToolPlan(seq=step.seq, key=idem, name=spec.name, turn=step.turn, match_key=key)

    def blocked_error(
        self,
        spec: ToolSpec,
        seq: int,
        stored: Any,
        idem: str,
        attempts: int,
        cause: str = "",
        retry: bool = False,
        resolvable: bool = False,
    ) -> SideEffectRetryBlockedError:
        """The error for a call redrive will not run (see :func:`~._blocked.blocked_error`)."""
        return blocked_error(
            run_id=self._state.run_id,
            tool=spec.name,
            seq=seq,
            arguments=stored,
            idempotency_key=idem,
            attempts=attempts,
            has_recover=spec.recover is not None,
            cause=cause,
            retry=retry,
            resolvable=resolvable,
        )

    def blocked(
        self,
        spec: ToolSpec,
        seq: int,
        stored: Any,
        key: str,
        turn: int,
        attempts: int,
        idem: str,
        cause: str = "",
        retry: bool = False,
        issue: Issue | None = None,
        resolvable: bool = False,
    ) -> ToolPlan:
        error = self.blocked_error(spec, seq, stored, idem, attempts, cause, retry, resolvable)
        if self._config.on_in_flight == "raise":
            raise error
        outcome = {
            "status": "not_safely_resumable",
            "tool": spec.name,
            "arguments": decode(encode(stored)),  # plain values, as a replay decodes them
            "idempotency_key": idem,
            "rerun": False,
            "reason": (
                "this call was interrupted while running; it was not re-run to avoid a "
                "duplicate side effect"
                if not retry
                else "this call failed earlier with the same arguments; it was not retried to "
                "avoid a duplicate side effect"
            ),
            "reconcile": (
                f"check whether {spec.name} took effect (idempotency key {idem}) before "
                "deciding what to do; do not assume it did or did not"
            ),
        }
        if cause:
            outcome["cause"] = cause
        packed, value = self._result(outcome)
        if retry:
            self._writer.mark_first()  # a resume's note takes its seq first
            new_seq = self._writer.next_seq
            start: dict[str, Any] = {
                "args": stored,
                "turn": turn,
                "restart_safe": False,
                "read_only": False,
                "idempotency_key": idem,
                "blocked": True,
            }
            if issue is not None:
                start["issue"] = issue.payload()
            self._writer.queue(Kind.TOOL_START, spec.name, start, key)
            self._writer.queue(Kind.TOOL_DONE, spec.name, {"step": new_seq, "result": packed})
            seq = new_seq
        else:
            self._writer.queue(Kind.TOOL_DONE, spec.name, {"step": seq, "result": packed})
        self._appender.flush()
        return ToolPlan(seq=seq, key=idem, name=spec.name, turn=turn, replayed=True, value=value)

    def _result(self, value: Any) -> tuple[Any, Any]:
        """Return (the result as journaled, what the loop gets): a replay hands back the same."""
        packed, handed = store(value, "result")
        if (
            self._config.redact_paths
        ):  # redact= covers results too; the live loop still gets the real value
            packed = store(redact_paths(handed, self._config.redact_paths), "result")[0]
        return packed, handed

    def tool_done(self, spec: ToolSpec, plan: ToolPlan, value: Any) -> Any:
        if plan.check is not None:  # live_tools: checked against the record, nothing written
            handed = store(value, "result")[1]
            self._check_live_tool(spec, plan, handed, None)
            return handed
        _boundary("tool_body_done", self._state.run_id, plan.seq, spec.name)
        try:
            packed, result = self._result(value)
        except Exception as exc:  # a codec may raise anything: the step is failed, not in flight
            error = TypeError(
                f"run {self._state.run_id!r} seq {plan.seq}: tool {spec.name!r} ran, but its "
                "result "
                f"cannot be journaled: {exc}. Return plain data, or give the tool a "
                "result_type/codec. The call is recorded as failed so it is not re-run."
            )
            self.tool_failed(spec, plan, error)
            raise error from None
        with self._state.lock:
            self._writer.queue(Kind.TOOL_DONE, spec.name, {"step": plan.seq, "result": packed})
            self._appender.flush()
        _boundary("tool_recorded", self._state.run_id, plan.seq, spec.name)
        return result

    def tool_failed(self, spec: ToolSpec, plan: ToolPlan, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError | GeneratorExit):
            return  # cancelled mid-body: the outcome is unknown, the step stays in flight
        if plan.check is not None:  # live_tools: checked against the record, nothing written
            if isinstance(exc, Exception):
                self._check_live_tool(spec, plan, None, exc)
            return
        retryable = tool_error_is_retryable(exc, spec.retryable + self._config.retryable)
        if not isinstance(exc, Exception):
            return
        _boundary("tool_body_done", self._state.run_id, plan.seq, spec.name)
        with self._state.lock:
            self._writer.queue(
                Kind.TOOL_ERROR,
                spec.name,
                {"step": plan.seq, "error": error_payload(exc, retryable)},
            )
            self._appender.flush()
            if plan.match_key:
                self._ledger.note_failure(
                    spec.name,
                    plan.match_key,
                    plan.seq,
                    plan.key,
                    side_effecting=not (spec.restart_safe or spec.read_only),
                    retryable=retryable,
                    asked_again=retry_requested(exc),
                )
        mark_retryable(exc, retryable)
        _boundary("tool_recorded", self._state.run_id, plan.seq, spec.name)
