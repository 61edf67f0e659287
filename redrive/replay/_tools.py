"""Tool steps: replay a recorded outcome, or claim the step and run the body.

Also the resume policy for a tool step that was in flight or failed: restart
safety, ``recover()``, the block and the not-safely-resumable outcome.

Idempotency keys are per logical operation (one intended call across its
attempts): a call's body gets ``"{run_id}:{seq}:{tool}"`` with the seq of the
operation's first attempt. A call of the same tool with the same canonical
arguments after that operation's retryable failure, in the same run or after a
resume, is a retry and gets the same key; a call after a success or a
permanent error is a new operation with a new key. A loop that means a new
operation after a retryable failure passes an argument that tells the two
apart (e.g. ``attempt=2``, or a ``request_id`` from ``redrive.uuid4()``). Every
``tool_start`` records the key its body received, so a resume reads it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import attrs

from ..errors import (
    DivergenceError,
    DivergenceReason,
    RecordedToolError,
    SideEffectRetryBlockedError,
)
from ..frames import Kind, call_key, canonical, decode, encode, rebuild, store
from ._blocked import blocked_error, retry_limit_error
from ._claims import Claims
from ._context import _boundary, _observe
from ._cursor import RecordedStep, decode_outcome
from ._diff import caller_location, diff_values, format_diff
from ._engine import (
    AskRecover,
    Block,
    Claim,
    Miss,
    Replay,
    Rerun,
    RetryLimit,
    StopBusy,
    ToolAsk,
    WaitForWorker,
    decide_in_flight,
    decide_tool,
)
from ._policy import match_view, redact_paths
from ._retry import retry_requested
from ._state import Issue
from ._writer import _Adopted

__all__ = ["Recovery", "ToolSpec", "ToolSteps", "rebuild_error"]

T = TypeVar("T")


@attrs.frozen
class Recovery:
    """What a tool's ``recover(args, idempotency_key)`` found about an in-flight call.

    Build with :meth:`done`, :meth:`not_done` or :meth:`unknown`.
    """

    state: Literal["done", "not_done", "unknown"]
    result: Any = None
    reason: str = ""

    @classmethod
    def done(cls, result: Any) -> Recovery:
        """The call completed with ``result``: journal it, do not run the body."""
        return cls("done", result)

    @classmethod
    def not_done(cls) -> Recovery:
        """The call never took effect: run the body now."""
        return cls("not_done")

    @classmethod
    def unknown(cls, reason: str = "") -> Recovery:
        """The outcome cannot be told: block the step."""
        return cls("unknown", reason=reason)


@attrs.frozen(kw_only=True)
class ToolSpec:
    """How a tool behaves on resume (built by :func:`redrive.tool`).

    Attributes:
        name: the tool's step name.
        restart_safe: True when re-running an in-flight call is harmless.
        read_only: the tool has no side effect (implies restart safe).
        recover: ``fn(args: dict, idempotency_key: str) -> Recovery`` or None.
        retryable: exception types after which the run stays resumable.
        declared: whether ``restart_safe`` was declared (False: the name heuristic decided).
    """

    name: str
    restart_safe: bool = False
    read_only: bool = False
    recover: Callable[[dict[str, Any], str], Recovery] | None = None
    retryable: tuple[type[BaseException], ...] = ()
    declared: bool = True


@attrs.define
class _Plan:
    seq: int
    key: str
    name: str
    turn: int
    replayed: bool = False
    value: Any = None
    error: BaseException | None = None
    match_key: str = ""
    #: a recorded step whose tool runs live (``live_tools``): its outcome is checked, not written
    check: RecordedStep | None = None
    #: the lease epoch the body runs under (its fencing token), None without a lease
    fencing_token: int | None = None


def _error_payload(exc: BaseException, retryable: bool) -> dict[str, Any]:
    cls = type(exc)
    try:
        args = canonical(list(exc.args), "error.args")
    except TypeError:
        args = None
    payload: dict[str, Any] = {
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "module": cls.__module__,
        "qualname": cls.__qualname__,
        "message": str(exc),
        "args": args,
        "retryable": retryable,
    }
    if retry_requested(exc):  # a retry signal: the next same call continues this operation
        payload["retry_requested"] = True
    return payload


def rebuild_error(run_id: str, seq: int, tool: str, error: dict[str, Any]) -> BaseException:
    """Rebuild a recorded tool exception as its own type, or a RecordedToolError.

    The type is only looked up in modules already imported (a journal never
    causes an import), must be an Exception subclass, and must accept the
    recorded ``args``.
    """
    module = sys.modules.get(str(error.get("module")))
    obj: Any = module
    for part in str(error.get("qualname", "")).split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    args = error.get("args")
    if isinstance(obj, type) and issubclass(obj, Exception) and isinstance(args, list):
        try:
            rebuilt = obj(*args)
        except Exception:
            rebuilt = None
        if rebuilt is not None and str(rebuilt) == error.get("message"):
            return rebuilt
    return RecordedToolError(
        f"run {run_id!r} seq {seq}: tool {tool!r} raised {error.get('type')}: "
        f"{error.get('message')} when it was recorded (the type cannot be rebuilt here, so it "
        "is replayed as this error)",
        run_id=run_id,
        seq=seq,
        tool=tool,
        error_type=error.get("type"),
        error_message=error.get("message"),
    )


def _comparable(value: Any) -> Any:
    """A value's canonical form for comparing outcomes (its repr when it has none)."""
    try:
        return canonical(value)
    except (TypeError, ValueError):
        return repr(value)


def _same_error(recorded: dict[str, Any], error: BaseException | None) -> bool:
    """True when ``error`` is of the recorded exception's type (by name, or rebuilt as it)."""
    if error is None:
        return False
    names = {cls.__name__ for cls in type(error).__mro__} | {
        f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__
    }
    return recorded.get("type") in names


def _mark_retryable(exc: BaseException, retryable: bool) -> None:
    """Remember on the exception itself whether the tool error that raised it is retryable."""
    with contextlib.suppress(AttributeError, TypeError):  # an exception refusing attributes
        exc.__redrive_retryable__ = retryable  # type: ignore[attr-defined]


def tool_error_retryable(exc: BaseException) -> bool | None:
    """Return whether ``exc`` came from a tool step marked retryable (None: not a tool's)."""
    found = getattr(exc, "__redrive_retryable__", None)
    return found if isinstance(found, bool) else None


class ToolSteps(Claims):
    """The tool-step part of a Run."""

    def _step_key(self, step: RecordedStep, name: str) -> str:
        """The idempotency key a recorded tool step's body received (as its ``tool_start`` says)."""
        return step.idempotency_key or f"{self.run_id}:{step.seq}:{name}"

    def _tool_begin(self, spec: ToolSpec, arguments: dict[str, Any], issue: Issue) -> _Plan:
        # A lost claim under on_busy="wait" adopts the winner's frames (_adopt) and
        # matches the step again: now it replays the winner's outcome. (The caller,
        # begin_tool / abegin_tool, settled the flow's open steps first.)
        while True:
            with self._adopting():
                try:
                    plan = self._tool_begin_once(spec, arguments, issue)
                except _Adopted:
                    continue
            if not plan.replayed:
                # the claim committed: the body starts only if this worker still holds
                # the run's lease (fencing reaches the body, not only the journal)
                plan.fencing_token = self._lease.fence(plan.seq, spec.name)
            return plan

    def _tool_ask(self, spec: ToolSpec, step: RecordedStep | None, key: str) -> ToolAsk:
        """What the engine needs to decide this tool step (read under the run's lock)."""
        cursor = self._cursor
        return ToolAsk(
            step=step,
            restart_safe=spec.restart_safe or spec.read_only,
            has_recover=spec.recover is not None,
            can_write=self._can_write,
            # only ended_run reads it, and only for a step that ended in an error: the
            # check reads the rest of the journal, so no other step pays for it
            exhausted=cursor is not None
            and step is not None
            and step.end is not None
            and step.end.kind == Kind.TOOL_ERROR.value
            and cursor.nothing_opened_after(step.end.seq),
            failed_at=self._failed_keys.get((spec.name, key)),
            retry_requested=self._open_operations.retry_requested(spec.name, key),
            max_attempts=self.max_attempts,
            known_seq=self._known_seq,
            may_wait=self._adoptable,
            leased=self.lease is not None,
            claim_age=time.time() - step.start.at if step is not None else 0.0,
            busy_timeout=self.busy_timeout,
        )

    def _tool_begin_once(self, spec: ToolSpec, arguments: dict[str, Any], issue: Issue) -> _Plan:
        stored = self._prepare(arguments, "args")
        key = call_key(spec.name, match_view(stored, kind="tool"), tree=True)  # stored: canonical
        with self._lock:
            turn = issue.turn
            step = self._match("tool", spec.name, stored, key, issue)
            ask = self._tool_ask(spec, step, key)
            decision = decide_tool(ask)
            if isinstance(decision, Replay):
                self.replayed_steps += 1
                plan = self._tool_replayed(spec, decision.step, key)
                if self._runs_live(spec.name, decision.step):
                    plan.replayed, plan.check = False, decision.step
                else:
                    _observe("replayed", run_id=self.run_id, step=decision.step)
                return plan
            if isinstance(decision, StopBusy | WaitForWorker):
                self._wait_for_worker(decision)  # returns: presumed live, it was not
                decision = decide_in_flight(ask)
            if isinstance(decision, Block) and decision.retry:
                # the block names the key of the operation the call would have retried
                idem = self._open_operations.peek(spec.name, key) or (
                    f"{self.run_id}:{decision.seq}:{spec.name}"
                )
                if not decision.write:
                    raise self._blocked_error(spec, decision.seq, stored, idem, 1, retry=True)
                return self._blocked(
                    spec, decision.seq, stored, key, turn, 1, idem, retry=True, issue=issue
                )
            if step is not None:
                assert not isinstance(decision, Claim | Replay | StopBusy | WaitForWorker)
                return self._tool_in_flight(spec, step, stored, key, decision)
            self._check_live("tool", spec.name, stored, key)
            seq = self._writer.next_seq
            # a retry of an operation whose last attempt failed retryably keeps its key
            idem = self._open_operations.take(spec.name, key) or f"{self.run_id}:{seq}:{spec.name}"
            with self._writer.unqueue_on_failure():
                self._writer.queue(
                    Kind.TOOL_START,
                    spec.name,
                    {
                        "args": stored,
                        "turn": turn,
                        "restart_safe": spec.restart_safe,
                        "read_only": spec.read_only,
                        "idempotency_key": idem,
                        "issue": issue.payload(),  # who asked: see Cursor.match
                    },
                    key,
                )
                self._flush()
            self.live_steps += 1
        _boundary("tool_claimed", self.run_id, seq, spec.name)
        return _Plan(seq=seq, key=idem, name=spec.name, turn=turn, match_key=key)

    def _runs_live(self, name: str, step: RecordedStep) -> bool:
        """True when the recorded tool step ``name`` runs its body again (``live_tools``).

        Only a step that ended (a result or an error) runs: a blocked retry or an
        outcome settled by ``recover()`` is handed back as recorded.
        """
        chosen = self.live_tools
        wanted = chosen is True or (not isinstance(chosen, bool) and name in chosen)
        return wanted and step.end is not None and not step.data.get("blocked")

    def _check_live_tool(
        self, spec: ToolSpec, plan: _Plan, result: Any, error: BaseException | None
    ) -> None:
        """Compare a live-run tool's outcome with the recorded one (``live_tools``).

        Raises:
            DivergenceError: the body returned another result, raised where the
                record has a result, or returned where the record has an error
                (``diff`` names the paths under ``$.result`` / ``$.error``).
        """
        step = plan.check
        assert step is not None and step.end is not None
        outcome = decode_outcome(step)
        found: dict[str, Any]
        if error is not None:
            found = {"error": {"type": type(error).__name__, "message": str(error)}}
        else:
            if self._redact:
                result = redact_paths(result, self._redact)
            found = {"result": _comparable(result)}
        if step.end.kind == Kind.TOOL_ERROR.value:
            recorded_error = outcome.get("error") or {}
            expected: dict[str, Any] = {
                "error": {
                    "type": recorded_error.get("type"),
                    "message": recorded_error.get("message"),
                }
            }
        else:
            where = f"run {self.run_id!r} seq {step.seq}: tool {spec.name!r} result"
            expected = {"result": _comparable(rebuild(outcome.get("result"), where=where))}
        if "error" in expected and "error" in found:
            # exception types compare by name (a rebuilt error may be a RecordedToolError)
            found["error"]["type"] = (
                expected["error"]["type"]
                if _same_error(expected["error"], error)
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
            f"run {self.run_id!r} diverged from its journal at seq {step.seq}: the tool "
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
            run_id=self.run_id,
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

    def _tool_replayed(self, spec: ToolSpec, step: RecordedStep, key: str) -> _Plan:
        outcome = decode_outcome(step)
        idem = self._step_key(step, spec.name)
        plan = _Plan(seq=step.seq, key=idem, name=spec.name, turn=step.turn, replayed=True)
        assert step.end is not None
        if not step.data.get("blocked"):  # a blocked retry was no attempt of its operation
            self._open_operations.began(spec.name, key, idem)
        if step.end.kind == Kind.TOOL_ERROR.value:
            error = outcome.get("error") or {}
            plan.error = rebuild_error(self.run_id, step.seq, spec.name, error)
            _mark_retryable(plan.error, bool(error.get("retryable")))
            self._note_failure(
                spec,
                key,
                step.seq,
                idem,
                retryable=error.get("retryable") is True,
                asked_again=error.get("retry_requested") is True,
            )
        else:
            where = f"run {self.run_id!r} seq {step.seq}: tool {spec.name!r} result"
            plan.value = rebuild(outcome.get("result"), where=where)
        return plan

    def _tool_in_flight(
        self,
        spec: ToolSpec,
        step: RecordedStep,
        stored: Any,
        key: str,
        decision: Miss | RetryLimit | AskRecover | Rerun | Block,
    ) -> _Plan:
        idem = self._step_key(step, spec.name)  # every attempt of the step keeps its key
        self._check_live("tool", spec.name, stored, key)  # a Miss raises here
        self._open_operations.began(spec.name, key, idem)
        if step.args is not None:
            stored = step.args  # errors and recover() speak of the call that was in flight
        if isinstance(decision, RetryLimit):
            raise retry_limit_error(
                run_id=self.run_id,
                tool=spec.name,
                seq=step.seq,
                arguments=stored,
                idempotency_key=idem,
                attempts=step.attempts,
                max_attempts=self.max_attempts,
                restart_safe=spec.restart_safe or spec.read_only,
            )
        if isinstance(decision, AskRecover):
            return self._recover(spec, step, stored, key, idem)
        if isinstance(decision, Rerun):
            return self._rerun(spec, step, idem, key)
        assert isinstance(decision, Block)
        return self._blocked(
            spec,
            step.seq,
            stored,
            key,
            step.turn,
            step.attempts,
            idem,
            cause=decision.cause,
            resolvable=step.end is None,
        )

    def _recover(
        self, spec: ToolSpec, step: RecordedStep, stored: Any, key: str, idem: str
    ) -> _Plan:
        """Ask the tool's ``recover()`` about an in-flight step and carry out its answer."""
        assert spec.recover is not None
        try:
            found = spec.recover(dict(stored), idem)
        except Exception as exc:
            raise self._blocked_error(
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
            self._flush()
            self.replayed_steps += 1
            return _Plan(
                seq=step.seq, key=idem, name=spec.name, turn=step.turn, replayed=True, value=value
            )
        if found.state == "unknown":
            return self._blocked(
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
        return self._rerun(spec, step, idem, key)

    def _rerun(self, spec: ToolSpec, step: RecordedStep, idem: str, key: str) -> _Plan:
        with self._writer.unqueue_on_failure():
            self._writer.queue(
                Kind.NOTE,
                spec.name,
                {"event": "attempt", "step": step.seq, "attempt": step.attempts + 1},
            )
            self._flush()
        self.live_steps += 1
        _boundary("tool_claimed", self.run_id, step.seq, spec.name)
        return _Plan(seq=step.seq, key=idem, name=spec.name, turn=step.turn, match_key=key)

    def _blocked_error(
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
        return blocked_error(
            run_id=self.run_id,
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

    def _blocked(
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
    ) -> _Plan:
        error = self._blocked_error(spec, seq, stored, idem, attempts, cause, retry, resolvable)
        if self.on_in_flight == "raise":
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
        self._flush()
        return _Plan(seq=seq, key=idem, name=spec.name, turn=turn, replayed=True, value=value)

    def _result(self, value: Any) -> tuple[Any, Any]:
        """Return (the result as journaled, what the loop gets): a replay hands back the same."""
        packed, handed = store(value, "result")
        if self._redact:  # redact= covers results too; the live loop still gets the real value
            packed = store(redact_paths(handed, self._redact), "result")[0]
        return packed, handed

    def _tool_done(self, spec: ToolSpec, plan: _Plan, value: Any) -> Any:
        if plan.check is not None:  # live_tools: checked against the record, nothing written
            handed = store(value, "result")[1]
            self._check_live_tool(spec, plan, handed, None)
            return handed
        _boundary("tool_body_done", self.run_id, plan.seq, spec.name)
        try:
            packed, result = self._result(value)
        except Exception as exc:  # a codec may raise anything: the step is failed, not in flight
            error = TypeError(
                f"run {self.run_id!r} seq {plan.seq}: tool {spec.name!r} ran, but its result "
                f"cannot be journaled: {exc}. Return plain data, or give the tool a "
                "result_type/codec. The call is recorded as failed so it is not re-run."
            )
            self._tool_failed(spec, plan, error)
            raise error from None
        with self._lock:
            self._writer.queue(Kind.TOOL_DONE, spec.name, {"step": plan.seq, "result": packed})
            self._flush()
        _boundary("tool_recorded", self.run_id, plan.seq, spec.name)
        return result

    def _note_failure(
        self,
        spec: ToolSpec,
        match_key: str,
        seq: int,
        idem: str,
        *,
        retryable: bool,
        asked_again: bool,
    ) -> None:
        """Remember a failed attempt (live or replayed) for the calls that follow it.

        A body that ran and failed may have had its side effect, retryable or
        not: the same call again in this run is blocked unless the tool is
        restart safe, or the body asked to be called again (a retry signal,
        read by the engine from the operation ledger). A retryable error or a
        retry signal leaves the operation open, so its retry keeps the key.
        """
        if not (spec.restart_safe or spec.read_only):
            self._failed_keys[(spec.name, match_key)] = seq
        self._open_operations.failed(
            spec.name, match_key, idem, retryable=retryable, retry_requested=asked_again
        )

    def _tool_failed(self, spec: ToolSpec, plan: _Plan, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError | GeneratorExit):
            return  # cancelled mid-body: the outcome is unknown, the step stays in flight
        if plan.check is not None:  # live_tools: checked against the record, nothing written
            if isinstance(exc, Exception):
                self._check_live_tool(spec, plan, None, exc)
            return
        retryable = bool(
            isinstance(exc, spec.retryable + self.retryable)
            or getattr(exc, "retryable", None) is True
            or getattr(exc, "is_retryable", None) is True
        )
        if not isinstance(exc, Exception):
            return
        _boundary("tool_body_done", self.run_id, plan.seq, spec.name)
        with self._lock:
            self._writer.queue(
                Kind.TOOL_ERROR,
                spec.name,
                {"step": plan.seq, "error": _error_payload(exc, retryable)},
            )
            self._flush()
            if plan.match_key:
                self._note_failure(
                    spec,
                    plan.match_key,
                    plan.seq,
                    plan.key,
                    retryable=retryable,
                    asked_again=retry_requested(exc),
                )
        _mark_retryable(exc, retryable)
        _boundary("tool_recorded", self.run_id, plan.seq, spec.name)
