"""The run-index operations written once for every backend: sweeps, leases, cancel.

:class:`RunIndexOps` gives a backend the sweeps and lease methods over two of
its primitives; :func:`cancel_run` is every writable backend's cancel.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import cast

import attrs

from .._scrub import DEFAULT as _SCRUB
from ..errors import AppendConflictError, LeaseLostError, TerminalRunError
from ..frames import Frame, Kind, make_frame
from ._checks import _by_holder, unknown_run
from ._protocol import Journal
from ._records import RunRecord, RunStatus, RunUpdate


def scrubbed_text(text: str) -> str:
    """Return free text an operator gives (a cancel's reason, a decision's note) scrubbed.

    The default secret rules of :mod:`redrive._scrub` (secret-looking text:
    keys, bearer tokens, secret URL parameters), as every frame gets them.
    """
    return _SCRUB.text(text) or ""


def cancel_text(reason: str, by: str) -> str:
    """The ``error`` text of a run cancelled by ``by`` for ``reason``."""
    return f"cancelled by {by}: {reason}"


def cancel_frame(record: RunRecord, *, reason: str, by: str) -> Frame:
    """The ``run_end`` frame that cancels the run ``record`` (next seq, chained after it)."""
    return make_frame(
        run_id=record.run_id,
        seq=record.next_seq,
        kind=Kind.RUN_END,
        name="run",
        payload={
            "status": RunStatus.CANCELLED.value,
            "output": None,
            "error": cancel_text(reason, by),
            "reason": reason,
            "by": by,
        },
        prev_chain=record.last_chain,
        epoch=record.lease_epoch,
    )


#: The lease owner of a run while an import copies it: workers cannot write to it,
#: sweeps and ``interrupted_runs()`` skip it, and a new import of it starts it over.
IMPORT_OWNER = "redrive import (not finished)"


class RunIndexOps:
    """Journal methods written once over two primitives of a backend.

    A backend provides ``runs(status=, limit=)`` and ``_change_run(run_id,
    change)`` (apply ``change(record) -> record`` atomically; write only when
    it returns a new record; raise ``UnknownRunError`` for a missing run) and
    gets the run sweeps and the lease operations from here.
    """

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """See :meth:`redrive.storage.Journal.runs`."""
        raise NotImplementedError

    def _change_run(self, run_id: str, change: Callable[[RunRecord], RunRecord]) -> RunRecord:
        raise NotImplementedError

    def interrupted_runs(self) -> list[RunRecord]:
        """Return runs left ``running`` (a worker may have died in them).

        A run an import is still copying (or a killed import left half-copied;
        importing again finishes it) is not listed.
        """
        return [
            r for r in self.runs(status=RunStatus.RUNNING.value) if r.lease_owner != IMPORT_OWNER
        ]

    def stale_runs(self, *, older_than: float = 0.0) -> list[RunRecord]:
        """Return running runs whose lease expired at least ``older_than`` seconds ago."""
        cutoff = time.time() - older_than
        rows = [
            r
            for r in self.interrupted_runs()
            if r.lease_expires is not None and r.lease_expires <= cutoff
        ]
        rows.sort(key=lambda r: r.lease_expires or 0.0)
        return rows

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> int:
        """Take the run's lease for ``ttl`` seconds; return the new epoch (see :class:`Journal`)."""
        record = self._change_run(run_id, lambda r: lease_taken(r, owner, ttl, time.time()))
        return record.lease_epoch

    def renew_lease(self, run_id: str, owner: str, epoch: int, ttl: float) -> None:
        """Extend a held lease by ``ttl`` seconds from now, or raise ``LeaseLostError``."""
        self._change_run(run_id, lambda r: lease_renewed(r, owner, epoch, ttl, time.time()))

    def release_lease(self, run_id: str, owner: str, epoch: int) -> None:
        """Give the lease up (no error when it was already lost or the run is gone)."""
        with contextlib.suppress(LookupError):
            self._change_run(run_id, lambda r: lease_released(r, owner, epoch))

    def cancel(self, run_id: str, *, reason: str, by: str) -> RunRecord:
        """See :meth:`redrive.storage.Journal.cancel` (and :func:`cancel_run`)."""
        return cancel_run(cast(Journal, self), run_id, reason=reason, by=by)


def cancel_run(journal: Journal, run_id: str, *, reason: str, by: str) -> RunRecord:
    """End the run ``cancelled`` in ``journal``: a conditional append, retried on a race.

    Every writable backend's :meth:`Journal.cancel`. The ``run_end`` frame is
    written under the run's current lease epoch, so it overrides a worker
    holding the lease; that worker's next append finds the run terminal.

    Returns:
        The run's row after the cancel.

    Raises:
        As :meth:`Journal.cancel`.
    """
    if not reason or not by:
        raise ValueError("cancel needs a reason and who cancels (by): both non-empty")
    reason, by = scrubbed_text(reason), scrubbed_text(by)
    while True:
        record = journal.get_run(run_id)
        if record is None:
            raise unknown_run(run_id)
        if RunStatus(record.status).terminal:
            raise TerminalRunError(
                f"run {run_id!r} already ended with status {record.status}"
                + (f" ({record.error})" if record.error else "")
                + "; there is nothing to cancel and nothing was changed.",
                run_id=run_id,
                seq=record.next_seq,
                status=record.status,
            )
        frame = cancel_frame(record, reason=reason, by=by)
        try:
            journal.append(
                run_id,
                [frame],
                expected_seq=record.next_seq,
                update=RunUpdate(status=RunStatus.CANCELLED.value, error=cancel_text(reason, by)),
                epoch=record.lease_epoch,
            )
        except (AppendConflictError, LeaseLostError):
            continue  # a worker appended or took the lease meanwhile: read again
        after = journal.get_run(run_id)
        assert after is not None
        return after


def lease_taken(record: RunRecord, owner: str, ttl: float, now: float) -> RunRecord:
    """Return ``record`` with the lease given to ``owner`` (epoch + 1) for ``ttl`` seconds.

    Shared by every backend, which call it inside their own transaction.

    Raises:
        RunBusyError: another owner holds a lease that has not expired.
    """
    from ..errors import RunBusyError

    if (
        record.lease_owner is not None
        and record.lease_owner != owner
        and record.lease_expires is not None
        and record.lease_expires > now
    ):
        raise RunBusyError(
            f"run {record.run_id!r} is leased by {record.lease_owner!r} for another "
            f"{record.lease_expires - now:.1f} s (epoch {record.lease_epoch}): another worker is "
            "executing it, or died and its lease has not lapsed yet. Retry after that, or pass "
            "on_busy='wait' to wait for it.",
            run_id=record.run_id,
            seq=record.next_seq,
            owner=record.lease_owner,
            expires_in=record.lease_expires - now,
        )
    return attrs.evolve(
        record,
        lease_owner=owner,
        lease_epoch=record.lease_epoch + 1,
        lease_expires=now + ttl,
        updated_at=now,
    )


def lease_renewed(record: RunRecord, owner: str, epoch: int, ttl: float, now: float) -> RunRecord:
    """Return ``record`` with the lease extended, or raise ``LeaseLostError``."""
    if record.lease_owner != owner or record.lease_epoch != epoch:
        raise LeaseLostError(
            f"run {record.run_id!r}: lease epoch {epoch} of {owner!r} was taken over "
            f"{_by_holder(record)}; stop this worker's loop.",
            run_id=record.run_id,
            seq=record.next_seq,
            epoch=epoch,
            current_epoch=record.lease_epoch,
        )
    return attrs.evolve(record, lease_expires=now + ttl)


def lease_released(record: RunRecord, owner: str, epoch: int) -> RunRecord:
    """Return ``record`` without the lease when ``(owner, epoch)`` still holds it."""
    if record.lease_owner != owner or record.lease_epoch != epoch:
        return record
    return attrs.evolve(record, lease_owner=None, lease_expires=None)
