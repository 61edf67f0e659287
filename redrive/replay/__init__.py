"""Replay: runs, the cursor over recorded steps, matching, divergence, resume policy."""

from ._cursor import Cursor, RecordedStep, ReplayDriftWarning
from ._diff import diff_values, format_diff
from ._policy import ReplayPolicy
from ._run import (
    Recovery,
    Run,
    ToolSpec,
    current_run,
    idempotency_key,
    rebuild_error,
    run,
    set_boundary_hook,
)

__all__ = [
    "Cursor",
    "RecordedStep",
    "Recovery",
    "ReplayDriftWarning",
    "ReplayPolicy",
    "Run",
    "ToolSpec",
    "current_run",
    "diff_values",
    "format_diff",
    "idempotency_key",
    "rebuild_error",
    "run",
    "set_boundary_hook",
]
