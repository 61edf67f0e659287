"""What a queue should do with a job after one delivery of its run: the verdict.

A job queue knows four answers to "how did this delivery go": acknowledge it,
run it again later, give up on it, or keep it aside for a person. A run's
outcome maps onto them (see :func:`judge`); each queue adapter
(:mod:`redrive.queues.celery`, :mod:`redrive.queues.procrastinate`) carries the
verdict out with the queue's own mechanism.
"""

from __future__ import annotations

import enum
import time
from typing import Any

import attrs

from ..errors import (
    JournalWriteError,
    LeaseLostError,
    NextStep,
    NextStepAction,
    ReplayError,
    RunBusyError,
    TerminalRunError,
)
from ..replay import Pause, pause_of, takeover_grace
from ..storage import Journal, RunStatus

__all__ = [
    "QUEUE_LEASE",
    "Outcome",
    "RunParkedError",
    "Verdict",
    "judge",
    "no_retry",
    "parked_error",
]

#: Seconds of the run lease a queue adapter takes unless told otherwise, on every journal:
#: a queue redelivers a job while its first worker may still be running it, so the run must
#: know its one executing worker (renewed every third of it; a dead worker's lease lapses).
QUEUE_LEASE = 30.0

#: The shortest wait before a retry, in seconds (a queue's own clock is coarse).
MIN_DELAY = 0.5


class Outcome(enum.StrEnum):
    """What one delivery of a job's run came to, and what the queue does with the job."""

    DONE = "done"
    """The run finished (succeeded now, or was already finished and replayed): ack."""
    SUSPENDED = "suspended"
    """The run waits for an approval (``redrive decide``): ack; enqueue the job again after it."""
    BUSY = "busy"
    """Another worker holds the run (its lease is live) or took it over: retry later."""
    TRANSIENT = "transient"
    """The run stopped resumable (a provider outage, a journal write failure): retry later."""
    PAUSED = "paused"
    """The run stopped ``paused`` (a rate limit, a quota, a budget, retries used up; the
    reason is in its record): retried after the pause's delay when waiting may clear it
    (a rate limit: its ``Retry-After``), else failed with :class:`RunParkedError` naming
    ``redrive resume`` (a person raises the quota or budget first)."""
    PARKED = "parked"
    """A person must decide (a side effect in flight, a divergence): no retry; the run is
    listed by ``redrive runs --status blocked`` and the error names the command."""
    FAILED = "failed"
    """The run ended failed or cancelled: no retry (a redelivery would raise the same)."""


def retry_text(delay: float) -> str:
    """How a verdict's ``reason`` says when the job is tried again."""
    return f"retry in {delay:.1f} s"


@attrs.frozen(kw_only=True)
class Verdict:
    """One delivery's outcome and what to do with its job.

    Attributes:
        outcome: the :class:`Outcome`.
        run_id: the run.
        delay: seconds to wait before retrying (``BUSY`` and ``TRANSIENT``), else None.
        reason: one line for the worker's log and the queue's record of the job.
        error: the exception that ended the delivery (None for ``DONE``, ``SUSPENDED``).
    """

    outcome: Outcome
    run_id: str
    delay: float | None = None
    reason: str = ""
    error: BaseException | None = None

    def delayed(self, delay: float) -> Verdict:
        """This verdict with the delay the queue will use (``reason`` says that one)."""
        if self.delay is None:
            return self
        reason = self.reason.replace(retry_text(self.delay), retry_text(delay))
        return attrs.evolve(self, delay=delay, reason=reason)

    @property
    def retry(self) -> bool:
        """True when the queue should deliver the job again after :attr:`delay` seconds."""
        if self.outcome is Outcome.PAUSED:
            return self.delay is not None
        return self.outcome in (Outcome.BUSY, Outcome.TRANSIENT)


class RunParkedError(ReplayError):
    """A job's run needs a person: the queue must not retry the job (it would block again).

    Raised by the queue adapters in place of the run's own error (its ``__cause__``),
    so the queue records the job failed with a message naming the run, what stopped it
    and the commands that settle it; ``next_steps`` are the run's error's, then
    ``redrive runs --status blocked`` and ``redrive recover``.

    Attributes:
        outcome: always ``"parked"``.
        cause_type: the class name of the run's error.

    What to do: ``redrive runs --status blocked`` lists the run; settle what stopped it (for a
    side effect in flight, ``redrive resolve``), then enqueue the job again.
    """

    outcome: str | None = None
    cause_type: str | None = None


def parked_error(run_id: str, error: BaseException) -> RunParkedError:
    """Return the :class:`RunParkedError` for a delivery that stopped on ``error``."""
    steps: list[NextStep] = list(getattr(error, "next_steps", ()) or ())
    steps.append(
        NextStep(
            NextStepAction.PERSON,
            "list the runs waiting for a person: redrive runs --status blocked; once settled, "
            f"enqueue the job again, or resume it with redrive recover (run {run_id!r})",
        )
    )
    seq = getattr(error, "seq", None)
    at = f" at seq {seq}" if isinstance(seq, int) else ""
    return RunParkedError(
        f"run {run_id!r} is parked{at}: {type(error).__name__}: {error} -- the queue will not "
        "retry this job (it would stop at the same step). A person settles it first "
        f"(redrive show {run_id!r}; redrive resolve for a side effect in flight), then "
        "enqueues the job again or runs redrive recover; redrive runs --status blocked "
        "lists such runs.",
        run_id=run_id,
        seq=seq if isinstance(seq, int) else None,
        outcome=Outcome.PARKED.value,
        cause_type=type(error).__name__,
        next_steps=tuple(steps),
    )


def no_retry(verdict: Verdict) -> BaseException | None:
    """What a queue raises for a verdict it must not retry: a parked error, or None.

    ``PARKED``: a :class:`RunParkedError` naming the run; ``FAILED`` (and any other
    outcome): None, so the run's own error reaches the queue.
    """
    if verdict.outcome is Outcome.PARKED and verdict.error is not None:
        return parked_error(verdict.run_id, verdict.error)
    if verdict.outcome is Outcome.PAUSED and verdict.error is not None:
        return paused_error(verdict.run_id, verdict.error, verdict.reason)
    return None


def paused_error(run_id: str, error: BaseException, reason: str) -> RunParkedError:
    """Return the :class:`RunParkedError` for a run paused on what waiting cannot clear."""
    return RunParkedError(
        f"{reason} -- the queue will not retry this job (waiting does not clear it). Once "
        f"the cause is settled (a quota or budget raised), continue the run with redrive "
        f"resume {run_id!r} or enqueue the job again; redrive runs --status paused lists "
        "such runs.",
        run_id=run_id,
        outcome=Outcome.PAUSED.value,
        cause_type=type(error).__name__,
        next_steps=(
            NextStep(
                NextStepAction.PERSON,
                f"settle the cause, then continue the run: redrive resume {run_id!r}",
            ),
        ),
    )


def _busy_delay(journal: Journal, run_id: str, lease: float | None) -> float:
    """Seconds until a run held by another worker may be taken over (its lease plus grace)."""
    try:
        record = journal.get_run(run_id)
    except Exception:  # the journal is unreachable now: try again soon
        return 1.0
    expires = None if record is None else record.lease_expires
    if expires is None or record is None or record.lease_owner is None:
        return 1.0
    grace = takeover_grace(lease if lease is not None else QUEUE_LEASE)
    return max(MIN_DELAY, expires - time.time() + grace)


def judge(
    run_id: str,
    error: BaseException | None,
    *,
    journal: Journal,
    lease: float | None,
    status: str | None = None,
    backoff: float = 1.0,
    pause: Pause | None = None,
) -> Verdict:
    """Decide what the queue does with a job after one delivery of its run.

    ===========================================  ==========================
    the delivery ended with                      outcome
    ===========================================  ==========================
    no error, run succeeded (or replayed)        ``DONE``
    no error, run suspended on an approval       ``SUSPENDED``
    ``RunBusyError``, ``LeaseLostError``         ``BUSY`` (retry when the
                                                 holder's lease lapses)
    ``TerminalRunError``, or the run now ended   ``FAILED``
    ``failed``/``cancelled``
    an error after which the run is ``paused``   ``PAUSED`` (retry after
                                                 the pause's delay, or the
                                                 back-off; no retry when a
                                                 person must act first)
    ``JournalWriteError``, or any other error    ``TRANSIENT``
    after which the run is still ``running``
    any other redrive error (a side effect in    ``PARKED``
    flight, a divergence, an input mismatch, a
    corrupt journal)
    ===========================================  ==========================

    Args:
        run_id: the run.
        error: what ended the delivery (None: the block ended normally).
        journal: the run's journal (read for the lease's expiry and the run's status).
        lease: the lease length the run took, in seconds (None: none).
        status: the run's status after the delivery when known (``run.status``).
        backoff: seconds to wait before retrying a ``TRANSIENT`` outcome (and a
            ``PAUSED`` one the provider gave no ``Retry-After`` for).
        pause: why the delivery paused the run (``run.paused``), when known.

    Returns:
        The :class:`Verdict`.
    """
    if error is None:
        if status == RunStatus.SUSPENDED.value:
            return Verdict(
                outcome=Outcome.SUSPENDED,
                run_id=run_id,
                reason=f"run {run_id!r} waits for an approval (redrive decide); enqueue the job "
                "again once it is decided",
            )
        return Verdict(outcome=Outcome.DONE, run_id=run_id, reason=f"run {run_id!r} finished")
    if isinstance(error, LeaseLostError):
        return _retry(Outcome.BUSY, run_id, 1.0, error, "another worker took the run over")
    if isinstance(error, RunBusyError):
        delay = _busy_delay(journal, run_id, lease)
        return _retry(Outcome.BUSY, run_id, delay, error, "another worker holds the run")
    if isinstance(error, TerminalRunError):
        return Verdict(
            outcome=Outcome.FAILED, run_id=run_id, error=error, reason=f"run {run_id!r} ended"
        )
    if isinstance(error, JournalWriteError):
        return _retry(Outcome.TRANSIENT, run_id, backoff, error, "a journal write failed")
    now = _status_now(journal, run_id)
    if now == RunStatus.PAUSED.value:
        return _paused(run_id, error, pause or pause_of(error), backoff)
    if isinstance(error, ReplayError):
        return Verdict(
            outcome=Outcome.PARKED,
            run_id=run_id,
            error=error,
            reason=f"run {run_id!r} needs a person: {type(error).__name__}",
        )
    if now == RunStatus.RUNNING.value:
        return _retry(Outcome.TRANSIENT, run_id, backoff, error, "the run stopped resumable")
    return Verdict(
        outcome=Outcome.FAILED,
        run_id=run_id,
        error=error,
        reason=f"run {run_id!r} ended {now or 'before it started'}",
    )


def _paused(run_id: str, error: BaseException, pause: Pause | None, backoff: float) -> Verdict:
    """The verdict on a delivery that paused its run (``pause``: why, when known)."""
    why = pause.text() if pause is not None else f"paused: {type(error).__name__}: {error}"
    if pause is not None and not pause.retry:
        return Verdict(
            outcome=Outcome.PAUSED, run_id=run_id, error=error, reason=f"run {run_id!r} {why}"
        )
    after = pause.retry_after if pause is not None else None
    delay = max(MIN_DELAY, after if after is not None else backoff)
    return Verdict(
        outcome=Outcome.PAUSED,
        run_id=run_id,
        delay=delay,
        error=error,
        reason=f"run {run_id!r} {why}; {retry_text(delay)}",
    )


def _status_now(journal: Journal, run_id: str) -> str | None:
    """The run's status in the journal now (None: no such run, or the journal is unreachable)."""
    try:
        record = journal.get_run(run_id)
    except Exception:
        return RunStatus.RUNNING.value  # unknown: the run is resumable until shown otherwise
    return None if record is None else record.status


def _retry(outcome: Outcome, run_id: str, delay: float, error: Any, why: str) -> Verdict:
    delay = max(MIN_DELAY, delay)
    return Verdict(
        outcome=outcome,
        run_id=run_id,
        delay=delay,
        error=error,
        reason=f"run {run_id!r}: {why} ({type(error).__name__}); {retry_text(delay)}",
    )
