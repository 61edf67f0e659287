"""Replay: runs, the cursor over recorded steps, matching, divergence, resume policy."""

from ._approval import await_approval, pending_approvals
from ._context import LostRunContextError, active_runs, join_run, outside_run
from ._cursor import Cursor, ReplayDriftWarning
from ._delta import expand_frames
from ._diff import diff_values, format_diff
from ._executor import RunExecutor, executor
from ._fork import RunDiff, StepView, diff_runs, fork
from ._handle import ModelStep, StepSource, ToolStep, ValueStep
from ._policy import ReplayPolicy
from ._run import (
    Recovery,
    Run,
    RunOptions,
    ToolSpec,
    current_run,
    fencing_token,
    idempotency_key,
    rebuild_error,
    run,
    set_boundary_hook,
)
from ._steps import RecordedStep, StepReader, iter_steps

__all__ = [
    "Cursor",
    "LostRunContextError",
    "ModelStep",
    "RecordedStep",
    "Recovery",
    "ReplayDriftWarning",
    "ReplayPolicy",
    "Run",
    "RunDiff",
    "RunExecutor",
    "RunOptions",
    "StepReader",
    "StepSource",
    "StepView",
    "ToolSpec",
    "ToolStep",
    "ValueStep",
    "active_runs",
    "await_approval",
    "current_run",
    "diff_runs",
    "diff_values",
    "executor",
    "expand_frames",
    "fencing_token",
    "fork",
    "format_diff",
    "idempotency_key",
    "iter_steps",
    "join_run",
    "outside_run",
    "pending_approvals",
    "rebuild_error",
    "run",
    "set_boundary_hook",
]
