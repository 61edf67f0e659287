"""Replay: runs, the cursor over recorded steps, matching, divergence, resume policy."""

from ._approval import await_approval, pending_approvals
from ._context import LostRunContextError, active_runs, join_run, outside_run, set_step_observer
from ._cursor import Cursor, ReplayDriftWarning
from ._delta import expand_frames
from ._diff import ABSENT, diff_values, format_diff, short
from ._executor import RunExecutor, executor
from ._fingerprint import (
    REASKED,
    Fingerprint,
    app_version,
    current_tools,
    read_fingerprint,
    register_tool,
    tool_digest,
)
from ._fork import RunDiff, StepView, diff_runs, fork
from ._handle import ModelStep, StepSource, ToolStep, ValueStep
from ._policy import ReplayPolicy, match_view, set_default_on_drift
from ._redirect import Redirect, redirect_runs, redirected, sending_live, sends_live
from ._resolve import resolve_step
from ._retry import RetryRequested, mark_retry_requested, retry_requested
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
from ._state import unknown_live_tools
from ._steps import RecordedStep, StepReader, iter_steps

__all__ = [
    "ABSENT",
    "Cursor",
    "Fingerprint",
    "LostRunContextError",
    "ModelStep",
    "REASKED",
    "RecordedStep",
    "Recovery",
    "Redirect",
    "ReplayDriftWarning",
    "ReplayPolicy",
    "RetryRequested",
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
    "app_version",
    "await_approval",
    "current_run",
    "current_tools",
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
    "mark_retry_requested",
    "match_view",
    "outside_run",
    "pending_approvals",
    "read_fingerprint",
    "rebuild_error",
    "redirect_runs",
    "redirected",
    "register_tool",
    "resolve_step",
    "retry_requested",
    "run",
    "sending_live",
    "sends_live",
    "set_boundary_hook",
    "set_default_on_drift",
    "set_step_observer",
    "short",
    "tool_digest",
    "unknown_live_tools",
]
