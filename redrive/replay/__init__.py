"""Replay: runs, the cursor over recorded steps, matching, divergence, resume policy."""

from ._approval import await_approval, pending_approvals
from ._context import check_lost_context
from ._cursor import Cursor, ReplayDriftWarning
from ._delta import expand_frames
from ._diff import diff_values, format_diff
from ._fork import RunDiff, StepView, diff_runs, fork
from ._handle import ModelStep, StepSource, ToolStep, ValueStep
from ._policy import ReplayPolicy
from ._run import (
    Recovery,
    Run,
    RunOptions,
    ToolSpec,
    current_run,
    idempotency_key,
    rebuild_error,
    run,
    set_boundary_hook,
)
from ._steps import RecordedStep, StepReader, iter_steps

__all__ = [
    "Cursor",
    "ModelStep",
    "RecordedStep",
    "Recovery",
    "ReplayDriftWarning",
    "ReplayPolicy",
    "Run",
    "RunDiff",
    "RunOptions",
    "StepReader",
    "StepSource",
    "StepView",
    "ToolSpec",
    "ToolStep",
    "ValueStep",
    "await_approval",
    "check_lost_context",
    "current_run",
    "diff_runs",
    "diff_values",
    "expand_frames",
    "fork",
    "format_diff",
    "idempotency_key",
    "iter_steps",
    "pending_approvals",
    "rebuild_error",
    "run",
    "set_boundary_hook",
]
