"""The run active in this context, the idempotency key of the tool running now,
and the step-boundary hook used by crash tests."""

from __future__ import annotations

import contextvars
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["check_lost_context", "current_run", "idempotency_key", "set_boundary_hook"]

_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("redrive_run", default=None)
_current_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "redrive_idempotency_key", default=None
)

#: Called at every step boundary when set (tests use it to crash at a point).
_boundary_hook: Callable[[str, dict[str, Any]], None] | None = None


def set_boundary_hook(hook: Callable[[str, dict[str, Any]], None] | None) -> None:
    """Install ``hook(boundary, info)``, called at each step boundary (None removes it).

    Boundaries: ``model_before`` (about to call the model), ``model_after``
    (response received, before its frames are queued), ``model_recorded``
    (its frames written per ``model_commit``, result not yet returned), ``tool_claimed``
    (``tool_start`` durable, body not started), ``tool_body_done`` (body
    returned or raised, outcome not yet journaled), ``tool_recorded``
    (outcome durable, result not yet returned). ``info`` has ``run_id``,
    ``seq``, ``name``. Used by crash tests; see :mod:`redrive.testing`.
    """
    global _boundary_hook
    _boundary_hook = hook


def _boundary(point: str, run_id: str, seq: int, name: str) -> None:
    hook = _boundary_hook
    if hook is not None:
        hook(point, {"run_id": run_id, "seq": seq, "name": name})


def current_run() -> Run | None:
    """Return the run active in this context (thread / asyncio task), or None."""
    return _current.get()


def idempotency_key() -> str | None:
    """Return the idempotency key of the tool step executing now, or None.

    The key is ``"{run_id}:{seq}:{tool}"`` (seq of the step's ``tool_start``),
    the same on every resume of the run; pass it to a payment or email API so
    that a re-executed step is deduplicated downstream. None outside a tool
    body run by redrive.
    """
    return _current_key.get()


#: Runs entered in this process, by the thread that entered them: {id(run): (run_id, thread id)}.
_entered: dict[int, tuple[str, int]] = {}
_entered_lock = threading.Lock()


def _enter(run: Run) -> None:
    with _entered_lock:
        _entered[id(run)] = (run.run_id, threading.get_ident())


def _leave(run: Run) -> None:
    with _entered_lock:
        _entered.pop(id(run), None)


def check_lost_context(kind: str, name: str) -> None:
    """Warn when a step is called outside any run while a run is active in another thread.

    That is nearly always a loop that handed work to a thread pool without
    its context (``ThreadPoolExecutor`` does not copy contextvars): the call is
    neither recorded nor replayed. Called by recorders on their pass-through path.
    """
    if not _entered or _current_key.get() is not None:
        return
    me = threading.get_ident()
    with _entered_lock:
        others = [run_id for run_id, thread in _entered.values() if thread != me]
    if others:
        warnings.warn(
            f"{kind} {name!r} was called outside any run while run {others[0]!r} is active in "
            "another thread, so it is neither recorded nor replayed. If it belongs to that run, "
            "carry the run's context into the thread: "
            "pool.submit(contextvars.copy_context().run, fn, ...).",
            RuntimeWarning,
            stacklevel=3,
        )
