"""Replay: runs, the cursor over recorded steps, matching, divergence, resume policy."""

from ._active import active_runs, current_run, join_run, unreplayed_steps
from ._approval import await_approval, pending_approvals
from ._caller import is_user_file
from ._config import RunOptions, unknown_live_tools
from ._context import (
    LostRunContextError,
    fencing_token,
    idempotency_key,
    outside_run,
    set_boundary_hook,
    set_step_observer,
)
from ._cursor import Cursor
from ._delta import Expander, expand_frames
from ._diff import ABSENT, diff_values, format_diff, short
from ._divergence import ReplayDriftWarning
from ._executor import RunExecutor, executor
from ._failure import ErrorClassifier, leaves_resumable, set_error_classifier
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
from ._history import own_time, run_events
from ._lease import SHARED_JOURNAL_LEASE, takeover_grace
from ._policy import ReplayPolicy, match_view, set_default_on_drift
from ._redirect import Redirect, redirect_runs, redirected, sending_live, sends_live
from ._resolve import resolve_step
from ._retry import RetryRequested, mark_retry_requested, retry_requested
from ._run import Run, run
from ._samecall import (
    ToolParams,
    declared_params,
    dropped_arguments,
    remember_params,
    tool_params,
)
from ._segments import answered_before, suspend, write_queued
from ._steps import RecordedStep, StepReader, iter_steps
from ._timeline import render_compare, render_run
from ._toolspec import Recovery, ToolSpec, rebuild_error
from ._usage import Price, RunUsage, Tokens, Usage, prices_of, read_usage, run_usage

__all__ = [
    "ABSENT",
    "Cursor",
    "ErrorClassifier",
    "Expander",
    "Fingerprint",
    "LostRunContextError",
    "ModelStep",
    "Price",
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
    "RunUsage",
    "SHARED_JOURNAL_LEASE",
    "StepReader",
    "StepSource",
    "StepView",
    "Tokens",
    "ToolParams",
    "ToolSpec",
    "ToolStep",
    "Usage",
    "ValueStep",
    "active_runs",
    "answered_before",
    "app_version",
    "await_approval",
    "current_run",
    "current_tools",
    "declared_params",
    "diff_runs",
    "diff_values",
    "dropped_arguments",
    "executor",
    "expand_frames",
    "fencing_token",
    "fork",
    "format_diff",
    "idempotency_key",
    "is_user_file",
    "iter_steps",
    "join_run",
    "leaves_resumable",
    "mark_retry_requested",
    "match_view",
    "outside_run",
    "own_time",
    "pending_approvals",
    "prices_of",
    "read_fingerprint",
    "read_usage",
    "rebuild_error",
    "redirect_runs",
    "redirected",
    "register_tool",
    "remember_params",
    "render_compare",
    "render_run",
    "resolve_step",
    "retry_requested",
    "run",
    "run_events",
    "run_usage",
    "sending_live",
    "sends_live",
    "set_boundary_hook",
    "set_default_on_drift",
    "set_error_classifier",
    "set_step_observer",
    "short",
    "suspend",
    "takeover_grace",
    "tool_digest",
    "tool_params",
    "unknown_live_tools",
    "unreplayed_steps",
    "write_queued",
]
