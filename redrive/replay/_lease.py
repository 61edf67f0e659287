"""The lease keeper: take a run's lease, renew it in the background, release it.

A run lease (``lease=seconds``) makes one worker the owner of a run; the epoch
it was granted fences every append of that worker. A worker without a lease
waits (``on_busy="wait"``) while another worker holds one. Waits are
procedures of :mod:`._faces` (they yield the seconds to wait), so the async
face waits with ``asyncio.sleep`` and the sync face with ``time.sleep``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid

from ..errors import LeaseLostError, RunBusyError
from ..storage import Journal, RunRecord, held_by_other
from ._faces import Wait

__all__ = ["LeaseKeeper"]


class LeaseKeeper:
    """One Run's lease: its owner name, granted epoch, renewer thread and loss.

    Args:
        journal: the run's journal.
        run_id: the run's id.
        ttl: the lease's length in seconds, or None (this worker takes no lease).
        on_busy: ``"raise"`` or ``"wait"`` when another worker holds the run.
        busy_timeout: seconds to wait under ``on_busy="wait"``.

    Attributes:
        owner: this worker's name in the journal (``host:pid:random``).
        epoch: the epoch of the lease held, or None.
        lost: the ``LeaseLostError`` met renewing or appending, or None.
    """

    def __init__(
        self, journal: Journal, run_id: str, ttl: float | None, on_busy: str, busy_timeout: float
    ) -> None:
        self.journal = journal
        self.run_id = run_id
        self.ttl = ttl
        self.on_busy = on_busy
        self.busy_timeout = busy_timeout
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.epoch: int | None = None
        self.lost: LeaseLostError | None = None
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()

    def check(self) -> None:
        """Raise the ``LeaseLostError`` met earlier, if any."""
        if self.lost is not None:
            raise self.lost

    def take(self) -> Wait[RunRecord]:
        """Take the lease (waiting for it under on_busy="wait"); return the run as it stands.

        The renewer thread starts once the caller calls :meth:`start_renewing`.

        Raises:
            RunBusyError: another worker holds the lease (on_busy="raise", or
                still after ``busy_timeout`` seconds).
        """
        assert self.ttl is not None
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                self.epoch = self.journal.acquire_lease(self.run_id, self.owner, self.ttl)
                break
            except RunBusyError:
                if self.on_busy == "raise" or time.monotonic() > deadline:
                    raise
                yield min(0.05, self.ttl / 10)
        # the run may have moved while we waited for the lease: the caller re-reads it
        try:
            record = self.journal.get_run(self.run_id)
            assert record is not None
        except BaseException:
            self.release()
            raise
        return record

    def start_renewing(self) -> None:
        """Renew the lease every third of its length on a daemon thread, until :meth:`release`."""
        self._renewer = threading.Thread(
            target=self._renew_loop, name=f"redrive-lease-{self.run_id}", daemon=True
        )
        self._renewer.start()

    def _renew_loop(self) -> None:
        assert self.ttl is not None and self.epoch is not None
        while not self._stop.wait(self.ttl / 3):
            try:
                self.journal.renew_lease(self.run_id, self.owner, self.epoch, self.ttl)
            except LeaseLostError as exc:
                self.lost = exc
                return
            except Exception:  # a transient database error: try again next period
                continue

    def release(self) -> None:
        """Stop renewing and release the lease (it lapses by itself if this fails)."""
        self._stop.set()
        if self.epoch is not None:
            with contextlib.suppress(Exception):
                self.journal.release_lease(self.run_id, self.owner, self.epoch)

    def wait_for_holder(self) -> Wait[RunRecord | None]:
        """A worker without a lease: wait (on_busy="wait") while another holds the run's lease.

        Returns:
            The run as it stands once no other worker holds it (None: no such run).

        Raises:
            RunBusyError: another worker holds an unexpired lease (on_busy="raise",
                or still after ``busy_timeout`` seconds).
        """
        deadline = time.monotonic() + self.busy_timeout
        while True:
            record = self.journal.get_run(self.run_id)
            if record is None or not held_by_other(record, None):
                return record
            if self.on_busy == "raise" or time.monotonic() > deadline:
                raise RunBusyError(
                    f"run {self.run_id!r} is leased by {record.lease_owner!r}: another worker "
                    "is executing it, and this worker has no lease. Retry later, pass "
                    "on_busy='wait' to wait for it, or give every worker a lease "
                    "(lease=seconds) so a dead one's run is taken over when its lease ends.",
                    run_id=self.run_id,
                    seq=record.next_seq,
                    owner=record.lease_owner,
                )
            yield 0.05
