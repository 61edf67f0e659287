"""Replay: runs, the cursor over recorded steps, matching, divergence, resume policy."""

import typing as _typing

from .._lazy import lazy_names as _lazy_names
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
from ._engine import ToolAsk, in_flight_action
from ._executor import RunExecutor, executor
from ._failure import ErrorClassifier, leaves_resumable, set_error_classifier
from ._fingerprint import (
    REASKED,
    Fingerprint,
    app_version,
    current_tools,
    read_fingerprint,
    recorded_prompts,
    register_tool,
    tool_digest,
)
from ._fork import fork
from ._handle import ModelStep, StepSource, ToolStep, ValueStep
from ._lease import SHARED_JOURNAL_LEASE, takeover_grace
from ._pause import (
    PAUSED_NOTE,
    Pause,
    PauseRule,
    PauseRun,
    add_pause_rule,
    mark_pause,
    pause_of,
    pause_on,
    pause_rules,
)
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
from ._segments import (
    answer_steps,
    answered_before,
    await_open_tools,
    open_tools,
    refuse_new_tools,
    suspend,
    suspend_at_exit,
    wait_open_tools,
    watch_steps,
    write_queued,
)
from ._steps import RecordedStep, StepReader, iter_steps
from ._toolspec import Recovery, ToolSpec, declared_spec, rebuild_error, remember_spec
from ._usage import Price, RunUsage, Tokens, Usage, prices_of, read_usage, run_usage

if _typing.TYPE_CHECKING:
    from ._history import own_time, run_events
    from ._rundiff import RunDiff, StepView, diff_runs
    from ._timeline import render_compare, render_run

#: name -> module, imported on first use (PEP 562): comparing runs and rendering a
#: run's timeline (html, the page's assets) serve the command line and reports; a
#: run recording or replaying never calls them (issue 26)
_LAZY = {
    "RunDiff": "._rundiff",
    "StepView": "._rundiff",
    "diff_runs": "._rundiff",
    "own_time": "._history",
    "run_events": "._history",
    "render_compare": "._timeline",
    "render_run": "._timeline",
}

__all__ = [
    "ABSENT",
    "Cursor",
    "ErrorClassifier",
    "Expander",
    "Fingerprint",
    "LostRunContextError",
    "ModelStep",
    "PAUSED_NOTE",
    "Pause",
    "PauseRule",
    "PauseRun",
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
    "ToolAsk",
    "ToolParams",
    "ToolSpec",
    "ToolStep",
    "Usage",
    "ValueStep",
    "active_runs",
    "add_pause_rule",
    "answer_steps",
    "answered_before",
    "app_version",
    "await_approval",
    "await_open_tools",
    "current_run",
    "current_tools",
    "declared_params",
    "declared_spec",
    "diff_runs",
    "diff_values",
    "dropped_arguments",
    "executor",
    "expand_frames",
    "fencing_token",
    "fork",
    "format_diff",
    "idempotency_key",
    "in_flight_action",
    "is_user_file",
    "iter_steps",
    "join_run",
    "leaves_resumable",
    "mark_pause",
    "mark_retry_requested",
    "match_view",
    "open_tools",
    "outside_run",
    "own_time",
    "pause_of",
    "pause_on",
    "pause_rules",
    "pending_approvals",
    "prices_of",
    "read_fingerprint",
    "read_usage",
    "rebuild_error",
    "recorded_prompts",
    "redirect_runs",
    "redirected",
    "refuse_new_tools",
    "register_tool",
    "remember_params",
    "remember_spec",
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
    "suspend_at_exit",
    "takeover_grace",
    "tool_digest",
    "tool_params",
    "unknown_live_tools",
    "unreplayed_steps",
    "wait_open_tools",
    "watch_steps",
    "write_queued",
]


if not _typing.TYPE_CHECKING:  # type checkers see the names' imports above, not a catch-all
    __getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())
