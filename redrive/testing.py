"""Helpers for users' own crash tests: die at a chosen step boundary.

A crash test runs the agent loop in a child process, kills it at a boundary,
resumes in a new process, and checks a side-effect log kept outside both::

    # in the child process (e.g. your worker's entry point)
    redrive.testing.install_from_env()          # reads REDRIVE_CRASH_AT

    # in the test
    env = {**os.environ, "REDRIVE_CRASH_AT": "tool_claimed:send_email"}
    subprocess.run([sys.executable, "-m", "myapp.worker", job_id], env=env)  # dies -9
    subprocess.run([sys.executable, "-m", "myapp.worker", job_id])           # resumes

Boundaries (see :func:`redrive.replay.set_boundary_hook`): ``model_before``,
``model_after``, ``model_recorded``, ``tool_claimed``, ``tool_body_done``,
``tool_recorded``.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import attrs

from .replay import set_boundary_hook

__all__ = ["BOUNDARIES", "CrashPoint", "SimulatedCrash", "crash_at", "install_from_env"]

#: Every boundary a crash can be injected at, in the order a step passes them.
BOUNDARIES = (
    "model_before",
    "model_after",
    "model_recorded",
    "tool_claimed",
    "tool_body_done",
    "tool_recorded",
)


class SimulatedCrash(BaseException):
    """Raised at the boundary by ``crash_at(..., kill=False)`` (in-process tests).

    A BaseException, so ordinary ``except Exception`` handlers in the loop do
    not swallow it. Note that a ``with redrive.run(...)`` block still sees it
    on exit (and records a failed run); only a real kill leaves a run exactly
    as a crash does.
    """


@attrs.define
class CrashPoint:
    """A pending crash: at the ``nth`` time ``point`` is reached (for step ``name``)."""

    point: str
    name: str | None = None
    nth: int = 1
    kill: bool = True
    seen: int = 0

    def __call__(self, point: str, info: dict[str, Any]) -> None:
        """Count ``point`` (for ``name``); at the ``nth`` time, crash the process (or raise)."""
        if point != self.point or (self.name is not None and info.get("name") != self.name):
            return
        self.seen += 1
        if self.seen != self.nth:
            return
        if self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedCrash(
            f"simulated crash at {point} of {info.get('name')} seq {info.get('seq')}"
        )


def crash_at(point: str, name: str | None = None, *, nth: int = 1, kill: bool = True) -> CrashPoint:
    """Install a crash at the ``nth`` passage of boundary ``point`` (of step ``name``).

    Args:
        point: one of :data:`BOUNDARIES`.
        name: only count steps of this name (tool name, or model step name); None: any.
        nth: which passage (1-based) dies.
        kill: True sends SIGKILL to this process (a real crash: nothing after it
            runs, no ``finally``); False raises :class:`SimulatedCrash`.

    Returns:
        The installed :class:`CrashPoint` (replaces any earlier boundary hook).

    Raises:
        ValueError: an unknown boundary or ``nth < 1``.
    """
    if point not in BOUNDARIES:
        raise ValueError(f"unknown boundary {point!r}; use one of {', '.join(BOUNDARIES)}")
    if nth < 1:
        raise ValueError(f"nth={nth}: passages are counted from 1")
    crash = CrashPoint(point, name, nth, kill)
    set_boundary_hook(crash)
    return crash


def install_from_env(variable: str = "REDRIVE_CRASH_AT") -> CrashPoint | None:
    """Install a crash described by an environment variable, if set.

    The value is ``point[:name[:nth]]``, e.g. ``tool_claimed:send_email:1``;
    the name may itself contain colons (``model_recorded:openai:POST /chat/completions``)
    and a trailing ``:N`` is read as ``nth``.

    Returns:
        The installed :class:`CrashPoint`, or None when the variable is unset or empty.

    Raises:
        ValueError: a malformed value.
    """
    spec = os.environ.get(variable, "")
    if not spec:
        return None
    point, _, rest = spec.partition(":")
    nth = 1
    head, sep, last = rest.rpartition(":")
    if sep and last.isdigit():
        rest, nth = head, int(last)
    elif sep and not last:
        raise ValueError(f"{variable}={spec!r}: expected point[:name[:nth]]")
    elif sep and last.lstrip("-").isdigit():
        raise ValueError(f"{variable}={spec!r}: nth must be a positive integer")
    name = rest or None
    return crash_at(point, name, nth=nth)
