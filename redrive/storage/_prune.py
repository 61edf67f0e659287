"""Retention: delete runs older than a cutoff, through the journal's conditional delete."""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from ..errors import RunBusyError
from ._base import Journal, RunRecord, RunStatus, held_by_other

__all__ = ["PruneResult", "prune_runs"]

#: What ``prune_runs`` deletes when no status is named: runs that ended.
TERMINAL = (RunStatus.SUCCEEDED.value, RunStatus.FAILED.value, RunStatus.CANCELLED.value)


@attrs.frozen(kw_only=True)
class PruneResult:
    """What :func:`prune_runs` did (or, on a dry run, would do).

    Attributes:
        deleted: the runs deleted (on a dry run: that would be deleted), oldest first.
        kept: ``(run, reason)`` for each run that matched but was kept: a worker
            holds its lease, or it changed after it was chosen.
        dry_run: nothing was deleted.
    """

    deleted: tuple[RunRecord, ...]
    kept: tuple[tuple[RunRecord, str], ...]
    dry_run: bool


def prune_runs(
    journal: Journal,
    *,
    older_than: float,
    status: str | Sequence[str] | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> PruneResult:
    """Delete the runs not updated for ``older_than`` seconds (retention).

    Each run is deleted with :meth:`Journal.delete_run`, conditional on the
    run not having changed since it was listed and on no other worker holding
    its lease, so a run resumed meanwhile, or executing now, is kept.

    Args:
        journal: a writable journal.
        older_than: seconds since the run's last update (``updated_at``); at
            least 0.
        status: only runs of this status (or these statuses); default the ended
            ones (succeeded, failed, cancelled). Naming ``running`` or
            ``suspended`` deletes runs that could still be resumed: only stale
            ones, and never one whose lease is held.
        dry_run: list what would be deleted, delete nothing.
        now: the current time, seconds since the Unix epoch (default: ``time.time()``).

    Returns:
        A :class:`PruneResult`.

    Raises:
        ValueError: ``older_than`` is negative or not a number, or a status is not a
            :class:`RunStatus` value.
        PermissionError: the journal is read-only (an ``.rdj`` file), unless ``dry_run``.
    """
    if not isinstance(older_than, int | float) or not older_than >= 0:
        raise ValueError(f"older_than must be a number of seconds >= 0, not {older_than!r}")
    statuses = (status,) if isinstance(status, str) else tuple(status or TERMINAL)
    for name in statuses:
        RunStatus(name)  # ValueError for an unknown status
    cutoff = (time.time() if now is None else now) - older_than
    chosen = [
        record
        for name in statuses
        for record in journal.runs(status=name)
        if record.updated_at <= cutoff
    ]
    chosen.sort(key=lambda r: (r.updated_at, r.run_id))
    deleted: list[RunRecord] = []
    kept: list[tuple[RunRecord, str]] = []
    for record in chosen:
        if dry_run:
            if held_by_other(record, None):
                kept.append((record, f"a worker holds its lease ({record.lease_owner})"))
            else:
                deleted.append(record)
            continue
        try:
            if journal.delete_run(record.run_id, expected_seq=record.next_seq):
                deleted.append(record)
            else:
                kept.append((record, "it changed after it was listed (a worker resumed it)"))
        except RunBusyError:
            kept.append((record, f"a worker holds its lease ({record.lease_owner})"))
    return PruneResult(deleted=tuple(deleted), kept=tuple(kept), dry_run=dry_run)
