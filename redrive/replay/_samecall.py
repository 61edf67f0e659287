"""When a tool call is the recorded call: the one rule for parameters added with a default.

A recorded tool call keeps its identity when the tool gains a parameter that
carries its declared default (CONTRACT C1): adding ``priority: str = "normal"``
to ``send_invoice`` leaves every recorded ``send_invoice(...)`` replayable,
whether the caller leaves ``priority`` out or a framework binds the default in
(pydantic-ai and the OpenAI Agents SDK call the function with every parameter
of its schema). A changed default, a removed or renamed parameter and a
non-default value stay different calls.

Journals keep their keys: a step's key is over the arguments as bound, and
the rule is asked only when no recorded step has the call's key
(:func:`as_recorded`), against the recorded steps the caller may be answered
by. The one rule is :func:`without_added_defaults`; the live run, a resume,
``redrive check``, ``check --update`` and ``what-changed`` (whose dry replay is
a resume) all reach it through :func:`as_recorded`. Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..frames import call_key, canonical, fingerprint
from ._policy import match_view

if TYPE_CHECKING:
    from ._cursor import Cursor
    from ._flows import Issue

__all__ = [
    "ToolParams",
    "as_recorded",
    "declared_params",
    "dropped_arguments",
    "remember_params",
    "tool_params",
    "without_added_defaults",
]


@attrs.frozen(kw_only=True)
class ToolParams:
    """A tool's parameters as the match needs them (computed once, when it is declared).

    Attributes:
        names: the parameters a call can bind, in order (``idempotency_key`` left out).
        open: the tool takes ``**kwargs`` (any argument name is one of its parameters).
        defaults: parameter name -> its default in canonical form; a default that
            has no canonical form (an ``object()`` sentinel) is left out, so a call
            passing it is never taken for the default.
    """

    names: tuple[str, ...] = ()
    open: bool = False
    defaults: Mapping[str, Any] = attrs.field(factory=dict, eq=False)


def tool_params(func: Callable[..., Any]) -> ToolParams:
    """Return the :class:`ToolParams` of a tool function (its signature, defaults canonical).

    Raises:
        ValueError, TypeError: ``func`` has no signature (as :func:`inspect.signature`).
    """
    names: list[str] = []
    defaults: dict[str, Any] = {}
    opened = False
    for param in inspect.signature(func).parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            opened = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL or param.name == "idempotency_key":
            continue
        names.append(param.name)
        if param.default is not inspect.Parameter.empty:
            # no canonical form (an object() sentinel): a call passing it is never the default
            with contextlib.suppress(TypeError, ValueError):
                defaults[param.name] = canonical(param.default, f"{param.name} default")
    return ToolParams(names=tuple(names), open=opened, defaults=defaults)


def without_added_defaults(
    recorded: Any, current: Any, defaults: Mapping[str, Any]
) -> dict[str, Any] | None:
    """THE rule: ``current`` without the parameters added since ``recorded`` at their default.

    A parameter is left out when the recorded arguments do not have it, the
    current ones do, and its value equals the tool's declared default now
    (compared in canonical form). Everything else stays: a changed default
    (the recorded call has the old value), a removed parameter, a non-default
    value.

    Args:
        recorded: a recorded tool step's canonical arguments.
        current: the call's canonical arguments now.
        defaults: the tool's canonical defaults, as its arguments are stored
            (scrubbed with the run's ``redact=`` patterns).

    Returns:
        The current arguments without those parameters, or None when none is
        left out (or either side is not a map of arguments).
    """
    if not isinstance(recorded, dict) or not isinstance(current, dict):
        return None
    added = [
        name
        for name, value in current.items()
        if name not in recorded
        and name in defaults
        and fingerprint(value) == fingerprint(defaults[name])
    ]
    if not added:
        return None
    return {name: value for name, value in current.items() if name not in added}


def dropped_arguments(recorded: Any, params: ToolParams) -> list[str]:
    """Return the recorded argument names that are no parameter of the tool now (sorted).

    A recorded call with such an argument cannot be asked again by the current
    code (a parameter removed or renamed), so it never replays; ``what-changed``
    says so for a step its dry replay did not reach.
    """
    if params.open or not isinstance(recorded, dict):
        return []
    return sorted(set(recorded) - set(params.names))


def as_recorded(
    cursor: Cursor,
    name: str,
    args: Any,
    key: str,
    defaults: Mapping[str, Any],
    *,
    turn: int | None,
    issue: Issue | None,
    scrub: Callable[[Any], Any],
) -> tuple[Any, str]:
    """Return a tool call's ``(arguments, key)`` in the form of the recorded call it is.

    Unchanged, unless no recorded step has the call's key and a recorded step
    of this tool that may answer the caller (the one at its issue position
    first) is the same call under :func:`without_added_defaults`: then the
    arguments without the added defaulted parameters and their key, so the
    match (and the logical operation's key) is the recorded step's. Cheap when
    the call passes no parameter at a declared default (nothing to look up).

    Args:
        cursor: the run's cursor over its recorded steps.
        name: the tool's step name.
        args: the call's canonical, scrubbed arguments.
        key: their match key.
        defaults: the tool's canonical defaults (as declared, unscrubbed).
        turn: the caller's turn.
        issue: where the caller issued the call, or None.
        scrub: makes a value as the run stores arguments (its ``redact=`` patterns).
    """
    if not isinstance(args, dict) or not any(p in args for p in defaults):
        return args, key
    waiting = cursor.waiting_calls("tool", name, args, key, turn=turn, issue=issue)
    if not waiting:
        return args, key
    stored_defaults = scrub({p: v for p, v in defaults.items() if p in args})
    for step in waiting:
        reduced = without_added_defaults(step.args, args, stored_defaults)
        if reduced is not None and cursor.key_of("tool", name, reduced) == step.key:
            return reduced, call_key(name, match_view(reduced, kind="tool"), tree=True)
    return args, key


_DECLARED: dict[str, ToolParams] = {}
_DECLARED_LOCK = threading.Lock()


def remember_params(name: str, params: ToolParams) -> None:
    """Note the parameters of tool ``name`` as declared in this process (the latest wins)."""
    with _DECLARED_LOCK:
        _DECLARED[name] = params


def declared_params(name: str) -> ToolParams | None:
    """Return the parameters of tool ``name`` as declared in this process, or None."""
    with _DECLARED_LOCK:
        return _DECLARED.get(name)
