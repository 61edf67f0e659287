"""Recover runs: re-drive every resumable run through its recorded entrypoint and input.

A run started through ``@redrive.durable`` records its entrypoint
(``"module:qualname"``) and input. A worker that died mid-run (a deploy, an
OOM kill) leaves it ``running``; an approval decided after its run suspended
leaves it ``suspended``; a rate limit leaves it ``paused``. :func:`recover_runs`
looks at every run not ended (:func:`redrive._resumable.resumable_runs` says,
per run, whether it can be continued now and why not), imports the entrypoint
of each one it can and calls it again with the recorded input under the same
run id, so the run resumes: recorded steps are replayed, the rest runs live.
The runs it leaves alone are results too (``left``, or ``blocked`` when a
person must settle a side effect in flight), each with why. Each run is driven under a run lease
(``on_busy="raise"``), so recoverers racing over the same runs on Postgres
drive each run once; a run another worker holds is reported ``busy``, one that
ended meanwhile ``already_done``. This is what a service calls on start (as
DBOS recovers pending workflows), and what ``redrive recover`` runs.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from ._entry import call_args as _call_args
from ._entry import import_paths as _import_paths
from ._log import log_event
from ._resumable import Candidate, resumable_runs
from .errors import (
    DivergenceError,
    NextStep,
    ReplayError,
    RunBusyError,
    SideEffectRetryBlockedError,
    TerminalRunError,
)
from .frames import Kind
from .replay import Run
from .storage import Journal, RunRecord, RunStatus

__all__ = ["RecoverReport", "RecoverResult", "recover_runs", "stale_runs"]

RecoverOutcome = Literal[
    "recovered",
    "already_done",
    "busy",
    "suspended",
    "failed",
    "blocked",
    "diverged",
    "interrupted",
    "error",
    "left",
    "paused",
]
#: Outcomes that make ``redrive recover`` exit 1 (someone must look at the run).
BAD_OUTCOMES = frozenset({"failed", "blocked", "diverged", "interrupted", "error"})


@attrs.frozen(kw_only=True)
class RecoverResult:
    """What re-driving one run did.

    Attributes:
        run_id: the run.
        outcome: ``recovered`` (this recoverer drove it to success),
            ``already_done`` (it had ended when its turn came: nothing ran),
            ``busy`` (another worker holds its lease: left to it),
            ``suspended`` (waits for an approval), ``failed`` (the run ended
            failed), ``blocked`` (a side effect in flight cannot be re-run
            safely: ``SideEffectRetryBlockedError``), ``diverged`` (the code
            changed under it: ``DivergenceError``), ``interrupted`` (stopped
            again, still resumable), ``error`` (no entrypoint, import error),
            ``left`` (not driven: held by a worker, written recently, an approval
            undecided, paused on what a person clears; :attr:`message` says why).
            ``paused`` (it paused again: a rate limit, a quota, a budget; the
            message says why). A ``blocked`` run left alone (nobody resolved its side effect in
            flight) is not driven either.
        status: the run's status afterwards (None when unknown).
        message: what happened, for a person.
        replayed_steps, live_steps: the execution's counters (0 when it did not run).
        duration: seconds spent on it.
        next_steps: what to do next, safest first, as the error that stopped the
            run proposed it (a ``blocked`` run: ``redrive resolve`` first); ().
        state: what the run waited for when recover looked at it (``interrupted``,
            ``approved``, ``paused``, ``blocked``...; see :mod:`redrive._resumable`),
            None for a run given by the caller.
    """

    run_id: str
    outcome: RecoverOutcome
    status: str | None = None
    message: str = ""
    replayed_steps: int = 0
    live_steps: int = 0
    duration: float = attrs.field(default=0.0, eq=False)
    next_steps: tuple[NextStep, ...] = ()
    state: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the result as JSON-ready data (``next_steps`` as action, text, params)."""
        return {
            "run_id": self.run_id,
            "outcome": self.outcome,
            "state": self.state,
            "status": self.status,
            "message": self.message,
            "replayed_steps": self.replayed_steps,
            "live_steps": self.live_steps,
            "duration_s": round(self.duration, 3),
            "next_steps": [
                {"action": str(n.action), "text": n.text, "params": dict(n.params)}
                for n in self.next_steps
            ],
        }


@attrs.frozen
class RecoverReport:
    """The results of :func:`recover_runs`, in the order they finished."""

    results: tuple[RecoverResult, ...]

    def count(self, outcome: str) -> int:
        """How many runs ended with ``outcome``."""
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def ok(self) -> bool:
        """True when no run needs a person (none failed, blocked, diverged, interrupted, error)."""
        return not any(r.outcome in BAD_OUTCOMES for r in self.results)

    def summary(self) -> str:
        """One line: ``3 run(s): 2 recovered, 1 left``."""
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        parts = ", ".join(f"{n} {o}" for o, n in counts.items())
        return f"{len(self.results)} run(s)" + (f": {parts}" if parts else ": nothing to recover")


def stale_runs(
    journal: Journal,
    *,
    stale: float = 60.0,
    entrypoint: str | None = None,
    status: str | None = None,
    now: float | None = None,
) -> list[RunRecord]:
    """Return the runs :func:`recover_runs` would re-drive, oldest first.

    Args:
        journal: the journal.
        stale: seconds since a ``running`` run's last write (``updated_at``)
            before it counts as interrupted; a run whose lease has not expired
            is never driven.
        entrypoint: only runs whose entrypoint contains this text.
        status: None (every resumable state: interrupted, approved, paused on
            what waiting clears, resolved; see :func:`redrive._resumable.resumable_runs`),
            or ``"running"``, ``"suspended"``, ``"paused"`` (every such run).
        now: the current time, seconds since the epoch (default: ``time.time()``).

    Raises:
        ValueError: ``stale`` is negative, or ``status`` is not a resumable status.
    """
    found = resumable_runs(journal, stale=stale, entrypoint=entrypoint, status=status, now=now)
    return [c.record for c in found if c.drive]


def _durable_target(entrypoint: str) -> Any:
    """Import a ``@redrive.durable`` function by ``"module:qualname"``.

    Raises:
        ImportError, AttributeError, ValueError: it cannot be imported.
        TypeError: it is not a ``@redrive.durable`` function.
    """
    import importlib

    module_name, _, qualname = entrypoint.partition(":")
    if not module_name or not qualname or "<locals>" in qualname:
        raise ValueError(f"entrypoint {entrypoint!r} is not a module-level 'module:qualname'")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(getattr(obj, "redrive_recover", None)):
        raise TypeError(
            f"entrypoint {entrypoint!r} is not a @redrive.durable function (it has no "
            "redrive_recover); only durable functions can be re-driven"
        )
    return obj


def _left_alone(candidate: Candidate) -> RecoverResult:
    """The result for a run recover looked at and did not drive (``left``, or ``blocked``)."""
    rid = candidate.run_id
    steps: tuple[NextStep, ...] = ()
    if candidate.state == "blocked":
        from .errors import NextStepAction

        steps = (NextStep(NextStepAction.RESOLVE, candidate.why),)
    return RecoverResult(
        run_id=rid,
        outcome="blocked" if candidate.state == "blocked" else "left",
        status=candidate.record.status,
        message=f"left run {rid!r} alone: {candidate.why}",
        next_steps=steps,
        state=candidate.state,
    )


def _recover_one(
    journal: Journal, record: RunRecord, lease: float, state: str | None = None
) -> RecoverResult:
    started = time.perf_counter()
    rid = record.run_id

    def result(
        outcome: RecoverOutcome,
        message: str,
        run: Run | None = None,
        next_steps: tuple[NextStep, ...] = (),
    ) -> RecoverResult:
        now = journal.get_run(rid)
        return RecoverResult(
            run_id=rid,
            outcome=outcome,
            status=now.status if now is not None else None,
            message=message,
            replayed_steps=run.replayed_steps if run is not None else 0,
            live_steps=run.live_steps if run is not None else 0,
            duration=time.perf_counter() - started,
            next_steps=next_steps,
            state=state,
        )

    try:
        first = next(iter(journal.frames(rid)), None)
        start = first.data() if first is not None and first.kind == Kind.RUN_START.value else {}
        entry = start.get("entrypoint") or record.entrypoint
        if not entry:
            return result(
                "error",
                f"run {rid!r} has no recorded entrypoint: only runs started through "
                "@redrive.durable can be recovered; resume it by calling its code with the "
                "same run_id",
            )
        target = _durable_target(entry)
        args, kwargs = _call_args(target.__wrapped_durable__, start.get("input"))
    except Exception as exc:
        return result(
            "error",
            f"cannot load the entrypoint of run {rid!r}: {type(exc).__name__}: {exc}; run "
            "recover from the project's root directory or pass -I DIR (import_paths=...)",
        )
    run: Run | None = None
    try:
        run = target.redrive_recover(journal, rid, args, kwargs, {"lease": lease})
    except RunBusyError as exc:
        return result("busy", f"another worker holds run {rid!r}: left to it ({exc})")
    except TerminalRunError as exc:
        return result("already_done", f"run {rid!r} ended meanwhile: {exc}")
    except SideEffectRetryBlockedError as exc:
        # its message ends with the same steps, rendered: `redrive resolve` first
        return result("blocked", str(exc), next_steps=exc.next_steps)
    except DivergenceError as exc:
        return result("diverged", str(exc))
    except ReplayError as exc:
        now = journal.get_run(rid)
        if now is not None and now.status == RunStatus.PAUSED.value:
            return result("paused", f"run {rid!r} paused again: {now.error}")
        return result("interrupted", f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        now = journal.get_run(rid)
        if now is not None and now.status == RunStatus.PAUSED.value:
            return result("paused", f"run {rid!r} paused again: {now.error}")
        outcome: RecoverOutcome = (
            "failed" if now is not None and now.status == RunStatus.FAILED.value else "interrupted"
        )
        return result(outcome, f"run {rid!r} raised {type(exc).__name__}: {exc}")
    assert run is not None
    if run.finished:
        return result("already_done", f"run {rid!r} had already succeeded: nothing ran", run)
    if run.status == RunStatus.SUSPENDED.value:
        return result("suspended", f"run {rid!r} waits for an approval", run)
    return result(
        "recovered",
        f"run {rid!r} recovered: {run.replayed_steps} step(s) replayed, {run.live_steps} live",
        run,
    )


def recover_runs(
    journal: Journal,
    *,
    stale: float = 60.0,
    entrypoint: str | None = None,
    status: str | None = None,
    jobs: int = 1,
    lease: float = 30.0,
    import_paths: Sequence[str] = (),
    runs: Sequence[RunRecord] | None = None,
    on_result: Callable[[RecoverResult, int, int], None] | None = None,
) -> RecoverReport:
    """Re-drive stale runs through their ``@redrive.durable`` entrypoint and recorded input.

    Call it when a service starts (after a deploy or a crash) to finish the
    runs its previous workers left; several recoverers may race on one
    Postgres journal: each run is driven under a lease, once.

    Args:
        journal: the journal (Postgres for several recoverers; DuckDB for one process).
        stale: seconds without a write before a run counts as stale (see :func:`stale_runs`).
        entrypoint: only runs whose entrypoint contains this text.
        status: None (default: every resumable state, see :func:`stale_runs`), or
            ``"running"``, ``"suspended"``, ``"paused"``.
        jobs: how many runs are driven at once (threads; 1: one at a time).
        lease: seconds of the run lease each run is driven under (renewed while it runs).
        import_paths: directories put at the front of ``sys.path`` while
            entrypoints are imported and run.
        runs: the runs to re-drive (default: :func:`stale_runs` with the options above).
        on_result: called as ``on_result(result, done, total)`` after each run
            (a progress bar), from the worker thread that drove it.

    Returns:
        A :class:`RecoverReport`; a run that could not be recovered is a
        result (``blocked``, ``diverged``, ``failed``...), not an exception;
        without ``runs``, each run looked at and left alone is a ``left`` (or
        ``blocked``) result saying why, listed first.

    Raises:
        ValueError: ``jobs`` below 1, or as :func:`stale_runs`.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r}: use an int of at least 1")
    todo: list[tuple[RunRecord, str | None]]
    if runs is not None:
        todo = [(r, None) for r in runs]
        left: list[Candidate] = []
    else:
        found = resumable_runs(
            journal,
            stale=stale,
            entrypoint=entrypoint,
            status=status,
            import_paths=import_paths,
        )
        todo = [(c.record, c.state) for c in found if c.drive]
        left = [c for c in found if not c.drive]
    results: list[RecoverResult] = []
    total = len(todo) + len(left)

    def done(res: RecoverResult) -> None:
        results.append(res)
        level = logging.WARNING if res.outcome in BAD_OUTCOMES else logging.INFO
        log_event(
            "recover",
            res.run_id,
            res.message,
            level=level,
            outcome=res.outcome,
            status=res.status,
            replayed=res.replayed_steps,
            live=res.live_steps,
        )
        if on_result is not None:
            on_result(res, len(results), total)

    for candidate in left:
        done(_left_alone(candidate))
    with _import_paths(list(import_paths)):
        if jobs == 1:
            for record, state in todo:
                done(_recover_one(journal, record, lease, state))
        else:
            with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(_recover_one, journal, r, lease, s) for r, s in todo]
                for future in concurrent.futures.as_completed(futures):
                    done(future.result())
    report = RecoverReport(tuple(results))
    log_event(
        "recover_summary",
        None,
        f"redrive recover: {report.summary()}",
        level=logging.INFO if report.ok else logging.WARNING,
        total=total,
        recovered=report.count("recovered"),
    )
    return report
