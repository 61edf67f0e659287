"""Pause instead of fail: which errors stop a run ``paused`` (resumable, with why), in one table.

A run whose block ends on an error that waiting or a person can clear (the
provider's rate limit, an exhausted quota, a budget the user set, a transient
error that outlasted the client's own retries) stops with status ``paused``:
resumable, listed by ``redrive runs --status paused``, continued by ``redrive
resume`` or ``redrive recover``, and the reason is kept in the run record
(its ``error``) and in a ``paused`` note. The error still propagates to the
caller (code after the ``with`` block never mistakes a paused run for a
finished one).

What pauses is one ordered table, :func:`pause_rules`: the first rule that
matches some exception of the tree under the error (its causes, contexts and
group members, see :func:`._failure.under`) decides the pause's kind. In order:

=====================  ============================================  =============
kind                   matches                                       retry later?
=====================  ============================================  =============
``requested``          a :class:`PauseRun` (raised by user code) or  as it says
                       an exception marked with :func:`mark_pause`
(added rows)           :func:`pause_on` types (a budget error)       as declared
``quota``              provider rows (``redrive.recorders``): an     no
                       exhausted quota (429 ``insufficient_quota``)
``rate_limit``         provider rows: HTTP 429, a rate-limit class   yes, after
                                                                     ``Retry-After``
``retries_exhausted``  any transient error (the run stays            yes
                       resumable by :mod:`._failure`'s verdict)
=====================  ============================================  =============

A redrive error (a side effect in flight, a divergence) is never a pause: a
person settles it (``redrive runs --status blocked``). A ``TerminalRunError``
anywhere in the tree means the run cannot continue: no pause.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..errors import BudgetExceededError, ReplayError, TerminalRunError
from ._failure import MAX_NODES, under, verdict
from ._toolspec import tool_error_retryable

__all__ = [
    "PAUSED_NOTE",
    "Pause",
    "PauseRule",
    "PauseRun",
    "add_pause_rule",
    "mark_pause",
    "pause_of",
    "pause_on",
    "pause_rules",
]

#: Name of the note a paused run's block writes (its data: :meth:`Pause.to_dict`).
PAUSED_NOTE = "paused"

_MARK = "__redrive_pause__"


@attrs.frozen(kw_only=True)
class Pause:
    """Why a run paused.

    Attributes:
        kind: the table row that matched (``"rate_limit"``, ``"quota"``,
            ``"budget"``, ``"retries_exhausted"``, ``"requested"``...).
        reason: for people: the error that paused it (``"RateLimitError: ..."``).
        retry: True when waiting alone may clear it (a queue retries the job
            later); False when a person acts first (raise the quota or budget).
        retry_after: seconds the provider asked to wait (``Retry-After``), or None.
        error_type: the class name of the matched exception.
    """

    kind: str
    reason: str
    retry: bool
    retry_after: float | None = None
    error_type: str = ""

    def text(self) -> str:
        """The run record's ``error`` while paused: ``"paused (rate_limit): ..."``."""
        return f"paused ({self.kind}): {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (the ``paused`` note's payload)."""
        return {
            "kind": self.kind,
            "reason": self.reason,
            "retry": self.retry,
            "retry_after": self.retry_after,
            "error_type": self.error_type,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pause:
        """Read a ``paused`` note's payload back (unknown fields ignored)."""
        after = data.get("retry_after")
        return cls(
            kind=str(data.get("kind", "")),
            reason=str(data.get("reason", "")),
            retry=bool(data.get("retry", False)),
            retry_after=float(after) if isinstance(after, int | float) else None,
            error_type=str(data.get("error_type", "")),
        )


class PauseRun(Exception):
    """Raise inside a run to stop it ``paused`` (resumable) with a reason.

    The run's block records the pause (status ``paused``, the reason in its
    record) and the exception propagates to the caller. Subclass it, or use
    :func:`pause_on` for an exception class of your own.

    Args:
        reason: why, for people (kept in the run record).
        kind: the pause's kind (default ``"requested"``).
        retry: True when waiting alone may clear it (a queue retries the job
            later, after ``retry_after`` seconds when given).
        retry_after: seconds to wait before trying again, or None.
    """

    def __init__(
        self,
        reason: str,
        *,
        kind: str = "requested",
        retry: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.pause_kind = kind
        self.pause_retry = retry
        self.pause_retry_after = retry_after
        setattr(self, _MARK, kind)


def mark_pause(
    exc: BaseException, kind: str, *, retry: bool = False, retry_after: float | None = None
) -> BaseException:
    """Mark ``exc`` so a run it ends pauses with ``kind`` (returns ``exc``; see :class:`PauseRun`).

    An exception that refuses attributes is returned unmarked.
    """
    try:
        setattr(exc, _MARK, kind)
        exc.pause_retry = retry  # type: ignore[attr-defined]
        exc.pause_retry_after = retry_after  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        pass
    return exc


def _never(exc: BaseException) -> float | None:
    return None


@attrs.frozen(kw_only=True)
class PauseRule:
    """One row of the pause table.

    Attributes:
        kind: the pause's kind when it matches.
        matches: ``matches(exc) -> bool`` for one exception of the tree (never raises:
            an exception from it counts as no match).
        retry: waiting alone may clear it (see :attr:`Pause.retry`).
        retry_after: ``retry_after(exc) -> seconds | None`` (a ``Retry-After`` header).
        source: who added the row, for people (``"redrive"``, ``"redrive.recorders"``...).
    """

    kind: str
    matches: Callable[[BaseException], bool]
    retry: bool
    retry_after: Callable[[BaseException], float | None] = _never
    source: str = "redrive"


def _marked(exc: BaseException) -> bool:
    return isinstance(getattr(exc, _MARK, None), str)


def _transient(exc: BaseException) -> bool:
    found, _decided = verdict(exc)
    return found is True and not isinstance(exc, ReplayError)


#: The first row: an explicit pause. The last: any transient error (kept last by add_pause_rule).
_REQUESTED = PauseRule(kind="requested", matches=_marked, retry=False)
_EXHAUSTED = PauseRule(kind="retries_exhausted", matches=_transient, retry=True)
_RULES: list[PauseRule] = [_REQUESTED, _EXHAUSTED]
_LOCK = threading.Lock()


def pause_rules() -> tuple[PauseRule, ...]:
    """Return the pause table, in the order it is read (the first match decides)."""
    with _LOCK:
        return tuple(_RULES)


def add_pause_rule(rule: PauseRule) -> None:
    """Add a row to the pause table, after the rows added before it and before the last.

    The last row (``retries_exhausted``: any transient error) stays last; the
    first (``requested``) first. Adding a rule equal to one in the table does nothing.
    """
    with _LOCK:
        if rule not in _RULES:
            _RULES.insert(len(_RULES) - 1, rule)


def pause_on(
    *types: type[BaseException], kind: str, retry: bool = False, source: str = "user"
) -> PauseRule:
    """Make a run that ends on one of ``types`` pause with ``kind``; return the added row.

    Example: ``pause_on(BudgetExceededError, kind="budget")``: a run that reaches
    its budget stops ``paused`` (a person raises the budget, then resumes it).

    Args:
        *types: exception classes (a subclass matches too).
        kind: the pause's kind.
        retry: True when waiting alone may clear it (a queue retries later).
        source: who added the row, for people.

    Raises:
        TypeError: no types, or one is not an exception class.
    """
    if not types or not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise TypeError(f"pause_on{types!r}: give one or more exception classes")
    rule = PauseRule(kind=kind, matches=_InstanceOf(types), retry=retry, source=source)
    add_pause_rule(rule)
    return rule


@attrs.frozen
class _InstanceOf:
    """A rule's test: an instance of ``types`` (equal for equal types: a row is added once)."""

    types: tuple[type[BaseException], ...]

    def __call__(self, exc: BaseException) -> bool:
        return isinstance(exc, self.types)


#: A run budget reached (``max_tokens`` / ``max_cost``, raised before a live model call):
#: waiting does not clear it; a person raises the budget and resumes the run.
_BUDGET = PauseRule(kind="budget", matches=_InstanceOf((BudgetExceededError,)), retry=False)
_RULES.insert(1, _BUDGET)


def _match(rule: PauseRule, exc: BaseException) -> Pause | None:
    try:
        if not rule.matches(exc):
            return None
        after = rule.retry_after(exc)
    except Exception:  # a rule that fails on a hostile exception: no match
        return None
    retry = rule.retry
    if _marked(exc):
        kind = str(getattr(exc, _MARK))
        retry = bool(getattr(exc, "pause_retry", False))
        marked_after = getattr(exc, "pause_retry_after", None)
        after = float(marked_after) if isinstance(marked_after, int | float) else None
    else:
        kind = rule.kind
    return Pause(
        kind=kind,
        reason=f"{type(exc).__name__}: {exc}"[:2000],
        retry=retry,
        retry_after=after,
        error_type=type(exc).__name__,
    )


def pause_of(exc: BaseException, declared: tuple[type[BaseException], ...] = ()) -> Pause | None:
    """Whether ``exc`` (what ended a run's block) pauses the run, and why.

    Reads the tree under ``exc`` (its causes, contexts, group members) once per
    row of :func:`pause_rules`, in the table's order: the first row matching
    some exception decides. Below an exception a redrive mark decided (a redrive
    error, a ``retryable`` flag, a ``retryable=`` type of the run) nothing is
    read, as :mod:`._failure` reads the tree; a redrive error is no pause
    unless a row names it; a ``retryable=`` type is ``retries_exhausted``. A tool
    body's error recorded as not retryable is no pause (a resume replays it: no
    wait clears it), whatever it is: the run fails.

    Args:
        exc: the exception that ended the block.
        declared: the run's ``retryable=`` exception types.

    Returns:
        The :class:`Pause`, or None (the run fails, or stays running for a person).
    """
    nodes: list[BaseException] = []
    seen: set[int] = set()
    stack = [exc]
    while stack and len(seen) < MAX_NODES:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, TerminalRunError):
            return None
        _found, decided = verdict(node, declared, providers=False)
        if tool_error_retryable(node) is False:
            continue  # a tool's recorded outcome: a resume replays it, so no wait clears it
        nodes.append(node)
        if not decided:  # a redrive mark decides for the tree below it (as _failure reads it)
            stack.extend(reversed(under(node)))
    for rule in pause_rules():
        for node in nodes:
            if rule is _EXHAUSTED and declared and isinstance(node, declared):
                return _match(PauseRule(kind=rule.kind, matches=_always, retry=True), node)
            found = _match(rule, node)
            if found is not None:
                return found
    return None


def _always(exc: BaseException) -> bool:
    return True
