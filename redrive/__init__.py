"""redrive: deterministic record/replay and crash-resume for LLM agent loops.

Wrap the model client and the tools once; run the loop inside
``redrive.run(journal, run_id)``. A retry with the same ``run_id`` replays
what finished and goes live at the first unfinished step.
"""

from __future__ import annotations

import typing as _typing

from ._lazy import lazy_names as _lazy_names
from .errors import (
    AppendConflictError,
    BudgetExceededError,
    DivergenceError,
    DivergenceReason,
    JournalCorruptError,
    JournalFormatError,
    JournalLockedError,
    JournalWriteError,
    LeaseLostError,
    LostRunContextError,
    NextStep,
    NextStepAction,
    RecordedToolError,
    ReplayError,
    ReplayMissError,
    RetryLimitExceededError,
    RunBusyError,
    RunBusyReason,
    RunEndedError,
    RunInputMismatchError,
    SideEffectRetryBlockedError,
    TerminalRunError,
    UnknownRunError,
)
from .frames import Frame, Kind, register_codec
from .recorders import model, now, random, tool, uuid4
from .replay import (
    Pause,
    PauseRun,
    Price,
    Recovery,
    ReplayDriftWarning,
    ReplayPolicy,
    RetryRequested,
    Run,
    RunUsage,
    await_approval,
    current_run,
    executor,
    fencing_token,
    fork,
    idempotency_key,
    outside_run,
    pause_on,
    run,
    run_usage,
    set_default_on_drift,
)
from .storage import Journal, RunStatus, open_journal

if _typing.TYPE_CHECKING:  # what the names below resolve to, for type checkers and readers
    from ._check import CheckReport, CheckResult, check_run, check_runs
    from ._durable import durable
    from ._plan import PlanStep, ResumePlan, aplan, plan
    from ._recover import RecoverReport, RecoverResult, recover_runs
    from ._resumable import paused_reason
    from ._runcheck import import_run
    from ._whatchanged import WhatChanged, run_fingerprint, what_changed
    from .recorders import wrap
    from .replay import diff_runs
    from .storage.rdj import export_run

    __version__: str

#: public name -> the module defining it, imported on first use of the name (PEP 562):
#: the checks, plans, recovery and export behind them are what the command line and
#: operators use, and ``wrap`` brings an SDK client's HTTP recording; a loop of
#: decorated tools and models (a worker, a pytest test) needs none of them, and
#: importing them cost every process tens of milliseconds (issue 26)
_LAZY = {
    "CheckReport": "._check",
    "CheckResult": "._check",
    "check_run": "._check",
    "check_runs": "._check",
    "durable": "._durable",
    "PlanStep": "._plan",
    "ResumePlan": "._plan",
    "aplan": "._plan",
    "plan": "._plan",
    "RecoverReport": "._recover",
    "RecoverResult": "._recover",
    "recover_runs": "._recover",
    "paused_reason": "._resumable",
    "import_run": "._runcheck",
    "WhatChanged": "._whatchanged",
    "run_fingerprint": "._whatchanged",
    "what_changed": "._whatchanged",
    "export_run": ".storage.rdj",
    "diff_runs": ".replay",  # comparing two runs (see redrive.replay)
    "wrap": ".recorders",  # an SDK client's HTTP recording (see redrive.recorders)
}


if not _typing.TYPE_CHECKING:  # type checkers see the names' imports above, not a catch-all
    _lazy_getattr, _lazy_dir = _lazy_names(__name__, _LAZY, globals())

    def __getattr__(name: str) -> object:
        """A public name imported on first use (:data:`_LAZY`), or ``redrive.__version__``.

        ``__version__`` is the installed distribution's version (reading the installed
        metadata at import cost every process a scan of ``sys.path``); ``"0"`` in a
        source checkout that is not installed.

        Raises:
            AttributeError: ``name`` is neither lazy nor ``__version__``.
        """
        if name != "__version__":
            return _lazy_getattr(name)
        import importlib.metadata

        try:
            version = importlib.metadata.version("redrive")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
            version = "0"
        globals()["__version__"] = version
        return version

    def __dir__() -> list[str]:
        """The module's names, the lazy ones and ``__version__`` before their first use."""
        return sorted({*_lazy_dir(), "__version__"})


__all__ = [
    "AppendConflictError",
    "BudgetExceededError",
    "CheckReport",
    "CheckResult",
    "DivergenceError",
    "DivergenceReason",
    "Frame",
    "Journal",
    "JournalCorruptError",
    "JournalFormatError",
    "JournalLockedError",
    "JournalWriteError",
    "Kind",
    "LeaseLostError",
    "LostRunContextError",
    "NextStep",
    "NextStepAction",
    "Pause",
    "PauseRun",
    "PlanStep",
    "Price",
    "RecordedToolError",
    "RecoverReport",
    "RecoverResult",
    "Recovery",
    "ReplayDriftWarning",
    "ReplayError",
    "ReplayMissError",
    "ReplayPolicy",
    "ResumePlan",
    "RetryLimitExceededError",
    "RetryRequested",
    "Run",
    "RunBusyError",
    "RunBusyReason",
    "RunEndedError",
    "RunInputMismatchError",
    "RunStatus",
    "RunUsage",
    "SideEffectRetryBlockedError",
    "TerminalRunError",
    "UnknownRunError",
    "WhatChanged",
    "__version__",
    "aplan",
    "await_approval",
    "check_run",
    "check_runs",
    "current_run",
    "diff_runs",
    "durable",
    "executor",
    "export_run",
    "fencing_token",
    "fork",
    "idempotency_key",
    "import_run",
    "model",
    "now",
    "open_journal",
    "outside_run",
    "pause_on",
    "paused_reason",
    "plan",
    "random",
    "recover_runs",
    "register_codec",
    "run",
    "run_fingerprint",
    "run_usage",
    "set_default_on_drift",
    "tool",
    "uuid4",
    "what_changed",
    "wrap",
]
