"""Tool steps as data: a tool's resume behaviour, a step's plan, recorded tool errors.

:class:`ToolSpec` is how a tool behaves on resume (built by ``@redrive.tool``),
:class:`Recovery` what its ``recover()`` hook found, :class:`ToolPlan` what the
run decided for one call; the functions encode and rebuild a tool's exception.

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

import contextlib
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal

import attrs

from ..errors import RecordedToolError
from ..frames import canonical
from ._retry import retry_requested
from ._samecall import ToolParams
from ._steps import RecordedStep

__all__ = [
    "Recovery",
    "ToolPlan",
    "ToolSpec",
    "declared_spec",
    "rebuild_error",
    "remember_spec",
    "tool_error_retryable",
]


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
        params: its parameters and their canonical defaults (computed when it is
            declared): a call that adds a parameter at its default is still the
            recorded call (see :mod:`redrive.replay._samecall`).
    """

    name: str
    restart_safe: bool = False
    read_only: bool = False
    recover: Callable[[dict[str, Any], str], Recovery] | None = None
    retryable: tuple[type[BaseException], ...] = ()
    declared: bool = True
    params: ToolParams = attrs.field(factory=ToolParams, eq=False)


#: per tool name, its distinct resume behaviours declared in this process (latest spec of each)
_SPECS: dict[str, dict[tuple[bool, bool, str | None], ToolSpec]] = {}
_SPECS_LOCK = threading.Lock()


def _behaviour(spec: ToolSpec) -> tuple[bool, bool, str | None]:
    """What of ``spec`` decides a resume: restart safe, read-only, which ``recover()``.

    The hook is named by module and qualified name: a module imported again declares the
    same hook.
    """
    hook = spec.recover
    where = None
    if hook is not None:
        where = f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', repr(hook))}"
    return (spec.restart_safe, spec.read_only, where)


def remember_spec(spec: ToolSpec) -> None:
    """Note how tool ``spec.name`` behaves on resume, as declared in this process."""
    with _SPECS_LOCK:
        kinds = _SPECS.setdefault(spec.name, {})
        kinds.pop(_behaviour(spec), None)  # the latest declaration last
        kinds[_behaviour(spec)] = spec


def declared_spec(name: str) -> ToolSpec | None:
    """How tool ``name`` behaves on resume as declared in this process, or None (not defined).

    One process may declare two tools of the same name (two agents in one worker, a
    test session): they may disagree. The answer is then the most careful of them,
    whatever the order they were declared in: restart safe (or read-only) only when every
    declaration says so, a ``recover()`` hook only when every declaration has the same
    one. A report made from it (``redrive plan``, ``runs --status blocked``, ``recover``)
    never takes a side effect for safe to re-run because another tool of its name is.
    """
    with _SPECS_LOCK:
        declared = list(_SPECS.get(name, {}).values())
    if not declared:
        return None
    latest = declared[-1]
    if len(declared) == 1:
        return latest
    hooks = {_behaviour(spec)[2] for spec in declared}
    return attrs.evolve(
        latest,
        restart_safe=all(spec.restart_safe or spec.read_only for spec in declared),
        read_only=all(spec.read_only for spec in declared),
        recover=latest.recover if len(hooks) == 1 else None,
    )


@attrs.define
class ToolPlan:
    """What the run decided for one tool call: its seq, key, and outcome when replayed."""

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


def error_payload(exc: BaseException, retryable: bool) -> dict[str, Any]:
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
    fields = _plain_fields(exc)
    if fields:
        payload["fields"] = fields
    notes = getattr(exc, "__notes__", None)  # PEP 678: kept, so the replayed error has them
    if isinstance(notes, list) and notes:
        payload["notes"] = [note for note in notes if isinstance(note, str)]
    return payload


def _plain_fields(exc: BaseException) -> dict[str, Any]:
    """The exception's own attributes (``vars(exc)``) that are plain values, canonical form.

    What a loop reads off a caught error besides its message (``err.code``,
    ``err.status``): kept so the replayed error has them. Attributes holding
    objects (a request, a response, a client) are left out; so are private
    (``_x``) and dunder names.
    """
    out: dict[str, Any] = {}
    for name, value in getattr(exc, "__dict__", {}).items():
        if not isinstance(name, str) or name.startswith("_"):
            continue
        try:
            out[name] = canonical(value, f"error.{name}")
        except TypeError:
            continue
    return out


def _rebuilt(cls: type[Exception], args: list[Any], error: dict[str, Any]) -> Exception | None:
    """An instance of ``cls`` whose message is the recorded one, or None.

    First ``cls(*args)``; when its ``__init__`` wants other arguments (keyword-only
    ones, objects such as httpx's ``request=``/``response=``), the instance is made
    without calling it: ``cls.__new__(cls, *args)`` with the recorded ``args`` and plain
    attributes set back. Either is kept only when ``str()`` of it is the recorded
    message, so the replayed error reads as the live one did.
    """
    message = error.get("message")
    fields = error.get("fields")
    try:
        made: Exception | None = cls(*args)
    except Exception:
        made = None
    if made is not None:
        try:
            # attributes the constructor set from keyword arguments it was not given
            # here (``another_arg=7`` defaulting to None) are set back as recorded
            _set_fields(made, fields)
            if str(made) == message:
                return made
        except Exception:
            pass
    try:
        bare = cls.__new__(cls, *args)
        bare.args = tuple(args)
        _set_fields(bare, fields)
        return bare if str(bare) == message else None
    except Exception:  # a __str__ that needs what was left out, a slotted class: not rebuilt
        return None


def _set_fields(exc: Exception, fields: Any) -> None:
    """Set the recorded plain attributes on ``exc`` (private and dunder names skipped)."""
    if isinstance(fields, dict):
        for name, value in fields.items():
            if isinstance(name, str) and not name.startswith("_"):
                setattr(exc, name, value)


def _with_notes(exc: BaseException, error: dict[str, Any]) -> BaseException:
    """``exc`` with the recorded ``__notes__`` (PEP 678) added, as the live error had them."""
    notes = error.get("notes")
    if isinstance(notes, list):
        for note in notes:
            if isinstance(note, str):
                exc.add_note(note)
    return exc


def rebuild_error(run_id: str, seq: int, tool: str, error: dict[str, Any]) -> BaseException:
    """Rebuild a recorded tool exception as its own type, or a RecordedToolError.

    Its recorded ``__notes__`` (PEP 678 ``add_note``) are added back to it.

    The type is only looked up in modules already imported (a journal never
    causes an import) and must be an Exception subclass; it is rebuilt from the
    recorded ``args`` (and, for a type whose ``__init__`` takes other
    arguments, without calling it, its plain attributes set back: see
    :func:`_rebuilt`), and only when the rebuilt error's message is the
    recorded one.
    """
    module = sys.modules.get(str(error.get("module")))
    obj: Any = module
    for part in str(error.get("qualname", "")).split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    args = error.get("args")
    if isinstance(obj, type) and issubclass(obj, Exception) and isinstance(args, list):
        rebuilt = _rebuilt(obj, args, error)
        if rebuilt is not None:
            return _with_notes(rebuilt, error)
    return _with_notes(
        RecordedToolError(
            f"run {run_id!r} seq {seq}: tool {tool!r} raised {error.get('type')}: "
            f"{error.get('message')} when it was recorded (the type cannot be rebuilt here, so it "
            "is replayed as this error)",
            run_id=run_id,
            seq=seq,
            tool=tool,
            error_type=error.get("type"),
            error_message=error.get("message"),
        ),
        error,
    )


def comparable(value: Any) -> Any:
    """A value's canonical form for comparing outcomes (its repr when it has none)."""
    try:
        return canonical(value)
    except (TypeError, ValueError):
        return repr(value)


def same_error(recorded: dict[str, Any], error: BaseException | None) -> bool:
    """True when ``error`` is of the recorded exception's type (by name, or rebuilt as it)."""
    if error is None:
        return False
    names = {cls.__name__ for cls in type(error).__mro__} | {
        f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__
    }
    return recorded.get("type") in names


def mark_retryable(exc: BaseException, retryable: bool) -> None:
    """Remember on the exception itself whether the tool error that raised it is retryable."""
    with contextlib.suppress(AttributeError, TypeError):  # an exception refusing attributes
        exc.__redrive_retryable__ = retryable  # type: ignore[attr-defined]


def tool_error_retryable(exc: BaseException) -> bool | None:
    """Return whether ``exc`` came from a tool step marked retryable (None: not a tool's)."""
    found = getattr(exc, "__redrive_retryable__", None)
    return found if isinstance(found, bool) else None
