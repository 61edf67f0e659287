"""A run's lifecycle events, logged under the ``redrive`` logger (see :mod:`redrive._log`)."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from .._log import log_event
from ..errors import DivergenceError, LeaseLostError, SideEffectRetryBlockedError
from ._context import _observe

__all__ = ["log_closed", "log_opened"]


class _RunView(Protocol):
    """What the lifecycle log reads of a run (a :class:`~redrive.replay.Run`)."""

    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def live(self) -> bool: ...
    @property
    def entrypoint(self) -> str | None: ...
    @property
    def resumed(self) -> bool: ...
    @property
    def replayed_steps(self) -> int: ...
    @property
    def live_steps(self) -> int: ...
    @property
    def reasked(self) -> list[dict[str, Any]]: ...


def _counts(run: _RunView) -> dict[str, int]:
    return {"replayed": run.replayed_steps, "live": run.live_steps}


def log_opened(run: _RunView, *, resumed_at: int, known_seq: int) -> None:
    """Log ``start`` (a new run) or ``resume`` (an existing one, with where it resumed).

    Args:
        run: the run.
        resumed_at: the seq it resumed at.
        known_seq: the first seq written while this execution is alive (the
            step observer's ``opened`` event carries it).
    """
    _observe("opened", run=run, known_seq=known_seq)
    event = "resume" if run.resumed else "start"
    log_event(
        event,
        run.run_id,
        f"run {run.run_id!r} {'resumed' if run.resumed else 'started'} "
        f"(status {run.status}, live={run.live})",
        status=run.status,
        entrypoint=run.entrypoint,
        live_run=run.live,
        seq=resumed_at if run.resumed else 0,
    )


def log_closed(run: _RunView, exc: BaseException | None, *, lease_lost: bool) -> None:
    """Log how this execution of a run ended: finish, blocked, divergence, lease lost...

    ``lease_lost``: this worker lost the run's lease during the execution.
    """
    _observe("closed", run=run, error=exc)
    counts = _counts(run)
    tail = f"{counts['replayed']} step(s) replayed, {counts['live']} live"
    rid = run.run_id
    if isinstance(exc, DivergenceError):
        log_event(
            "divergence",
            rid,
            f"run {rid!r} diverged from its journal at seq {exc.seq} ({exc.kind} {exc.name}); "
            + tail,
            level=logging.WARNING,
            seq=exc.seq,
            step=exc.name,
            paths=[path for path, _a, _b in exc.diff or []],
            **counts,
        )
    elif isinstance(exc, SideEffectRetryBlockedError):
        log_event(
            "blocked",
            rid,
            f"run {rid!r} blocked at seq {exc.seq}: a side effect in flight was not re-run; "
            + tail,
            level=logging.WARNING,
            seq=exc.seq,
            **counts,
        )
    elif isinstance(exc, LeaseLostError) or lease_lost:
        log_event(
            "lease_lost",
            rid,
            f"run {rid!r} lost its lease; this worker stopped writing; " + tail,
            level=logging.WARNING,
            **counts,
        )
    elif exc is None or run.status in ("succeeded", "failed", "cancelled", "suspended", "paused"):
        level = logging.ERROR if run.status == "failed" else logging.INFO
        level = logging.WARNING if run.status == "paused" else level
        log_event(
            run.status if run.status in ("suspended", "paused") else "finish",
            rid,
            f"run {rid!r} ended {run.status}; " + tail,
            level=level,
            status=run.status,
            reasked=len(run.reasked),
            error=None if exc is None else f"{type(exc).__name__}: {exc}",
            **counts,
        )
    else:
        log_event(
            "interrupted",
            rid,
            f"run {rid!r} stopped, resumable ({type(exc).__name__}: {exc}); " + tail,
            level=logging.WARNING,
            status=run.status,
            error=f"{type(exc).__name__}: {exc}",
            **counts,
        )
