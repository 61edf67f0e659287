"""A run opened for one delivery of a queue job: the run's outcome carried out by the queue.

:class:`QueueRun` wraps :func:`redrive.run` (``with`` and ``async with``, one
implementation): it opens the run under a lease (:data:`QUEUE_LEASE` unless
given), and when the block ends it asks :func:`judge` what the delivery came to
and hands the verdict to the queue's :class:`Carrier`, which answers with the
exception the queue understands (retry later, give up, park) or None (let the
run's own error through).
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Protocol, Unpack

from ..replay import Run, RunOptions, run
from ..storage import Journal
from ._verdict import QUEUE_LEASE, Outcome, Verdict, judge

__all__ = ["Carrier", "QueueRun", "missing_extra"]

log = logging.getLogger("redrive.queues")

#: What a queue's own machinery raises to stop a worker: never turned into a verdict.
_PASS_THROUGH: tuple[type[BaseException], ...] = (
    asyncio.CancelledError,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
)


def missing_extra(module: str, queue: str, extra: str, err: ImportError) -> ImportError:
    """The ImportError of a queue adapter whose queue package is not installed."""
    return ImportError(
        f"redrive.queues.{module} needs {queue}, which is not installed ({err}); install it "
        f"with: pip install 'redrive[{extra}]'"
    )


class Carrier(Protocol):
    """How one queue carries out a :class:`Verdict` (see the adapters).

    A carrier may also have ``plan(verdict) -> Verdict``: the verdict with the
    retry delay the queue will really use (Celery caps a countdown at half the
    broker's visibility timeout); the worker's log line then says that delay.
    """

    def carry(self, verdict: Verdict) -> BaseException | None:
        """Return the exception that tells the queue what to do, or None for the run's error.

        Called for ``BUSY``, ``TRANSIENT``, ``PAUSED``, ``PARKED`` and ``FAILED`` verdicts only.
        """
        ...


class QueueRun:
    """One delivery of a job's run: ``with`` (or ``async with``) gives the :class:`Run`.

    Args:
        journal: the run's journal, or its URL (see :func:`redrive.run`).
        run_id: the run, named after the job (``f"support:{job_id}"``), never the delivery.
        carrier: the queue's :class:`Carrier`.
        backoff: seconds before retrying a ``TRANSIENT`` outcome.
        **options: :func:`redrive.run`'s options; ``lease`` defaults to
            :data:`QUEUE_LEASE` on every journal and ``on_busy`` to ``"raise"`` (a
            busy run is retried by the queue rather than waited for in a worker slot).

    Attributes:
        verdict: the last delivery's :class:`Verdict` once the block ended, else None.
    """

    def __init__(
        self,
        journal: Journal | str,
        run_id: str,
        *,
        carrier: Carrier,
        backoff: float = 1.0,
        **options: Unpack[RunOptions],
    ) -> None:
        options.setdefault("lease", QUEUE_LEASE)
        options.setdefault("on_busy", "raise")
        self.run: Run = run(journal, run_id, **options)
        self.verdict: Verdict | None = None
        self._carrier = carrier
        self._backoff = backoff

    def __enter__(self) -> Run:
        try:
            return self.run.__enter__()
        except Exception as exc:
            raise self._carry(self._judge(exc), exc) from exc

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        try:
            swallowed = self.run.__exit__(et, exc, tb)
        except Exception as raised:
            return self._settle(self._judge(raised), raised, exc)
        error = None if exc is None or swallowed else exc
        if error is not None and isinstance(error, _PASS_THROUGH):
            return False
        return self._settle(self._judge(error), error, exc) or swallowed

    async def __aenter__(self) -> Run:
        try:
            return await self.run.__aenter__()
        except Exception as exc:
            verdict = await asyncio.to_thread(self._judge, exc)
            raise self._carry(verdict, exc) from exc

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        try:
            swallowed = await self.run.__aexit__(et, exc, tb)
        except Exception as raised:
            verdict = await asyncio.to_thread(self._judge, raised)
            return self._settle(verdict, raised, exc)
        error = None if exc is None or swallowed else exc
        if error is not None and isinstance(error, _PASS_THROUGH):
            return False
        verdict = await asyncio.to_thread(self._judge, error)
        return self._settle(verdict, error, exc) or swallowed

    def _judge(self, error: BaseException | None) -> Verdict:
        verdict = judge(
            self.run.run_id,
            error,
            journal=self.run.journal,
            lease=self.run.lease,
            status=None if error is not None else self.run.status,
            backoff=self._backoff,
        )
        plan = getattr(self._carrier, "plan", None)
        if plan is not None:  # the log says the delay the queue will use
            verdict = plan(verdict)
        self.verdict = verdict
        level = logging.INFO if verdict.outcome in (Outcome.DONE, Outcome.BUSY) else logging.WARNING
        log.log(level, "queue job %s: %s", verdict.outcome.value, verdict.reason)
        return verdict

    def _carry(self, verdict: Verdict, error: BaseException) -> BaseException:
        """The exception to raise for ``verdict`` (the carrier's, else ``error`` itself)."""
        raised = self._carrier.carry(verdict)
        return error if raised is None else raised

    def _settle(
        self, verdict: Verdict, error: BaseException | None, original: BaseException | None
    ) -> bool:
        """Carry out ``verdict`` at the block's end: return False, or raise what the queue reads."""
        if error is None:
            return False
        raised = self._carry(verdict, error)
        if raised is original:
            return False
        if raised is error:
            raise error
        raise raised from error
