"""The run active here, typed: the :class:`~._run.Run` in this context, or that a call joins.

The registry itself is :mod:`._context` (below the Run, so it holds runs untyped);
these functions sit above the Run and give its type back.
"""

from __future__ import annotations

from typing import cast

from . import _context
from ._run import Run
from ._steps import RecordedStep

__all__ = ["active_runs", "current_run", "join_run", "unreplayed_steps"]


def unreplayed_steps(run: Run) -> list[RecordedStep] | None:
    """The recorded steps ``run`` has not replayed (yet): None for a run with no record.

    Read after a dry replay (``redrive what-changed``) to tell the steps it
    reached from those it never asked for.
    """
    cursor = run._state.cursor
    return None if cursor is None else cursor.remaining()


def current_run() -> Run | None:
    """Return the run active in this context (thread / asyncio task), or None."""
    return cast("Run | None", _context.current_run())


def active_runs() -> list[Run]:
    """Return the runs active in this process that a call from here could belong to.

    See :func:`redrive.replay._context.active_runs`.
    """
    return cast("list[Run]", _context.active_runs())


def join_run(kind: str, name: str) -> Run | None:
    """Return the run a step called here belongs to, or None for a plain call.

    See :func:`redrive.replay._context.join_run` (it raises
    ``LostRunContextError`` when the run cannot be told).
    """
    return cast("Run | None", _context.join_run(kind, name))
