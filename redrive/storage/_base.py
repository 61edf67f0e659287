"""The Journal protocol and the records every backend shares (and the helpers they all run).

The names live in :mod:`._records` (the records), :mod:`._protocol` (the
protocol), :mod:`._checks` (the write path's checks) and :mod:`._runindex`
(sweeps, leases, cancel); backends import them from here.
"""

from __future__ import annotations

from ._checks import (
    appended,
    cancelled_error,
    check_append,
    check_delete,
    check_fence,
    check_open,
    check_size,
    frame_size,
    held_by_other,
    unknown_run,
)
from ._protocol import Journal
from ._records import Decision, RunRecord, RunStatus, RunUpdate
from ._runindex import (
    IMPORT_OWNER,
    RunIndexOps,
    cancel_frame,
    cancel_run,
    cancel_text,
    scrubbed_text,
)

__all__ = [
    "IMPORT_OWNER",
    "Decision",
    "Journal",
    "RunIndexOps",
    "RunRecord",
    "RunStatus",
    "RunUpdate",
    "appended",
    "cancel_frame",
    "cancel_run",
    "cancel_text",
    "scrubbed_text",
    "cancelled_error",
    "check_append",
    "check_size",
    "frame_size",
    "check_delete",
    "check_open",
    "check_fence",
    "held_by_other",
    "unknown_run",
]
