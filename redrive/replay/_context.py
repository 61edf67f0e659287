"""The run active in this context, and the process-wide state around it.

That is: the idempotency key of the tool running now, the step-boundary hook
used by crash tests, and the registry of the runs active in this process (so a
call that lost its run's context joins it or fails closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import LostRunContextError

__all__ = [
    "LostRunContextError",
    "active_runs",
    "current_run",
    "fencing_token",
    "idempotency_key",
    "join_run",
    "outside_run",
    "set_boundary_hook",
    "set_step_observer",
]

#: The run active in this context: a :class:`~redrive.replay.Run` (typed by the
#: functions of :mod:`._active`, which sit above the Run; this module sits below it).
Run = Any

_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("redrive_run", default=None)
_current_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "redrive_idempotency_key", default=None
)
_current_fence: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "redrive_fencing_token", default=None
)
_outside: contextvars.ContextVar[bool] = contextvars.ContextVar("redrive_outside", default=False)

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


#: Told what a run's execution does, when set (:func:`set_step_observer`; ``redrive.otel`` uses it).
_step_observer: Callable[[str, dict[str, Any]], None] | None = None


def set_step_observer(observer: Callable[[str, dict[str, Any]], None] | None) -> None:
    """Install ``observer(event, info)``, told what each run's execution does (None removes it).

    Events: ``opened`` (``run``: the :class:`Run`, as it starts or resumes),
    ``frames`` (``run_id``, ``frames``: the frames just appended, durable per
    their commit), ``replayed`` (``run_id``, ``step``: the
    :class:`~redrive.replay.RecordedStep` handed back from the record) and
    ``closed`` (``run``, ``error``: the exception the execution ended with, or
    None). The observer runs on the thread that did the work (for an async run,
    a worker thread for ``frames``); whatever it raises is logged and dropped,
    so an observer never changes what a run does.
    """
    global _step_observer
    _step_observer = observer


def _observe(event: str, **info: Any) -> None:
    observer = _step_observer
    if observer is None:
        return
    try:
        observer(event, info)
    except Exception:  # an observer never changes what a run does
        import logging

        logging.getLogger("redrive").exception("redrive step observer failed on %r", event)


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


def fencing_token() -> int | None:
    """Return the fencing token of the tool body executing now, or None.

    The token is the run's lease epoch (an int, larger on every takeover of
    the run) under which the body's claim was made and confirmed just before
    the body started (``redrive.run(..., lease=seconds)``; None without a
    lease, and outside a tool body run by redrive). Pass it, with the run id,
    to a downstream system that supports fencing (a storage write conditioned
    on ``token >= last token seen for this run``, as in Kleppmann's "How to do
    distributed locking", 2016): a worker that froze inside its body past its
    lease is then refused there, the one window redrive cannot close itself.
    """
    return _current_fence.get()


#: Runs entered (bound) in this process and not yet left: ``{id(run): (run, thread, task)}``
#: with weak references, so an abandoned, collected run leaves by itself.
_entered: dict[
    int,
    tuple[
        weakref.ref[Run],
        weakref.ref[threading.Thread],
        weakref.ref[asyncio.Task[Any]] | None,
    ],
] = {}
_entered_lock = threading.Lock()


def _enter(run: Run) -> None:
    try:
        task: asyncio.Task[Any] | None = asyncio.current_task()
    except RuntimeError:  # no running event loop: a sync run
        task = None
    entry = (
        weakref.ref(run),
        weakref.ref(threading.current_thread()),
        weakref.ref(task) if task is not None else None,
    )
    with _entered_lock:
        _entered[id(run)] = entry


def _leave(run: Run) -> None:
    with _entered_lock:
        _entered.pop(id(run), None)


#: Live runs open in this process, by ``(id(journal), run_id)``: the Run, the thread and
#: asyncio task that opened it, and where (for the error). Weak, as ``_entered``.
_open: dict[
    tuple[int, str],
    tuple[
        weakref.ref[Run],
        weakref.ref[threading.Thread],
        weakref.ref[asyncio.Task[Any]] | None,
        str,
    ],
] = {}

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def opener() -> tuple[threading.Thread, asyncio.Task[Any] | None, str]:
    """Who opens a run now: this thread, its asyncio task, and a description with the caller's line.

    The line is the first frame outside redrive and ``contextlib`` (the user's
    ``with`` / ``async with``, or the decorated function's call).
    """
    thread = threading.current_thread()
    try:
        task: asyncio.Task[Any] | None = asyncio.current_task()
    except RuntimeError:
        task = None
    frame = sys._getframe(1)
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE)
        or os.path.basename(frame.f_code.co_filename) == "contextlib.py"
    ):
        frame = frame.f_back
    where = f"thread {thread.name!r}"
    if task is not None:
        where += f", asyncio task {task.get_name()!r}"
    where += f", opened at {frame.f_code.co_filename}:{frame.f_lineno}"
    return thread, task, where


def open_here(
    run: Run, thread: threading.Thread, task: asyncio.Task[Any] | None, where: str
) -> tuple[str, bool] | None:
    """Record ``run`` as the live block of its run in this process, unless another one is.

    A block already open counts unless it was abandoned (its Run collected, its
    thread ended, its task done, or, for a sync block entered in this very
    thread, it is not the run in the caller's context: a block left unexited).

    Returns:
        None when recorded; else ``(where the other block is, same_flow)``:
        ``same_flow`` when it was opened by this very thread without a task (or
        this task), which waiting would deadlock.
    """
    key = (id(run.journal), run.run_id)
    me = (
        weakref.ref(run),
        weakref.ref(thread),
        weakref.ref(task) if task is not None else None,
        where,
    )
    with _entered_lock:
        found = _open.get(key)
        if found is not None:
            run_ref, thread_ref, task_ref, there = found
            other, other_thread = run_ref(), thread_ref()
            other_task = task_ref() if task_ref is not None else None
            gone = (
                other is None
                or other_thread is None
                or not other_thread.is_alive()
                or (task_ref is not None and (other_task is None or other_task.done()))
                or (other_thread is thread and task_ref is None and _current.get() is not other)
            )
            if not gone and other is not run:
                same = other_thread is thread and (task_ref is None or other_task is task)
                return there, same
        _open[key] = me
        return None


def close_here(run: Run) -> None:
    """Forget ``run`` as its run's live block in this process (its block ended)."""
    key = (id(run.journal), run.run_id)
    with _entered_lock:
        found = _open.get(key)
        if found is not None and found[0]() is run:
            del _open[key]


def active_runs() -> list[Run]:
    """Return the runs active in this process that a call from here could belong to.

    A run is active from its ``with`` / ``async with`` entry to its exit. Left
    out, as abandoned: a run whose object was collected, whose entering thread
    has ended, whose entering asyncio task is done, and a sync run entered in
    the calling thread itself (its block is not on this thread's stack when
    the caller has no run in its context, unless it was abandoned unexited).

    Returns:
        The runs, in the order they were entered.
    """
    me = threading.current_thread()
    found: list[Run] = []
    with _entered_lock:
        entries = list(_entered.items())
    for key, (run_ref, thread_ref, task_ref) in entries:
        run, thread = run_ref(), thread_ref()
        task = task_ref() if task_ref is not None else None
        gone = (
            run is None
            or thread is None
            or not thread.is_alive()
            or (task_ref is not None and (task is None or task.done()))
        )
        if gone:
            with _entered_lock:
                if _entered.get(key) == (run_ref, thread_ref, task_ref):
                    del _entered[key]
            continue
        if thread is me and task_ref is None:
            continue
        assert run is not None
        found.append(run)
    return found


@contextlib.contextmanager
def outside_run() -> Iterator[None]:
    """Make the calls in this block plain calls, whatever runs are active in the process.

    For code that shares a process with runs but belongs to none of them (a
    web server's other endpoints, a health check calling a tool function):
    without it, a step called with no run in its context joins the one run
    active in the process (see :func:`join_run`). Threads started by
    :func:`redrive.replay.executor` inside the block inherit it; a run
    entered inside the block is current as usual.

    Yields:
        Nothing; the mark is undone on exit.
    """
    token = _outside.set(True)
    try:
        yield
    finally:
        _outside.reset(token)


def join_run(kind: str, name: str) -> Run | None:
    """Return the run a step called here belongs to, or None for a plain call.

    The run in the caller's context when there is one. Inside a tool body run
    by redrive (a black box: what it calls is part of its one outcome), None.
    Otherwise the caller lost its run's context (a ``ThreadPoolExecutor``
    worker, ``loop.run_in_executor``, a ``threading.Thread``...): it joins the
    one run active in the process (see :func:`active_runs`), and with none
    active it is a plain call, as outside any run.

    Args:
        kind: what is called, for the error: ``"tool"``, ``"model"``, ``"http"``.
        name: the step's name.

    Returns:
        The run to record the step in, or None to call straight through.

    Raises:
        LostRunContextError: no run in the caller's context while several runs
            are active in the process (the step would belong to one of them,
            which cannot be told); nothing has run.
    """
    run = _current.get()
    if run is not None or not _entered or _current_key.get() is not None or _outside.get():
        return run
    active = active_runs()
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    run_ids = tuple(sorted(r.run_id for r in active))
    thread = threading.current_thread().name
    raise LostRunContextError(
        f"{kind} {name!r} was called from thread {thread!r}, whose context carries no run, "
        f"while runs {', '.join(map(repr, run_ids))} are active in this process: it would run "
        "unrecorded, so it did not run. Carry the run's context into the thread: "
        "pool.submit(contextvars.copy_context().run, fn, ...), redrive.executor() in place of "
        "ThreadPoolExecutor, or asyncio.to_thread(fn, ...) in place of "
        "loop.run_in_executor(None, fn, ...).",
        run_ids=run_ids,
        thread=thread,
        step=f"{kind} {name!r}",
    )
