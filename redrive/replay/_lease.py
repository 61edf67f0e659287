"""The lease keeper: take a run's lease, renew it in the background, release it.

A run lease (``lease=seconds``) makes one worker the owner of a run; the epoch
it was granted fences every append of that worker, and (:meth:`LeaseKeeper.fence`)
the start of every tool body: after a tool's claim commits and before its body
starts, the worker confirms it still holds the lease, and the body receives the
epoch as its fencing token (:func:`redrive.fencing_token`).

The timing argument. The keeper knows, on its own monotonic clock, until when
its lease is surely held: a grant or renewal sent at monotonic time ``m`` with
length ``ttl`` sets the run's expiry to at least ``m + ttl`` (the journal reads
the clock after the request left). A body starts only while that time has not
passed (with a third of the lease to spare, else the keeper renews first, one
round trip). A worker taking over a lapsed lease waits past the previous
holder's expiry plus :func:`takeover_grace` (clock skew between hosts, and the
instructions between the check and the body) before it decides any step. So a
body never starts after its worker lost the lease, unless the worker freezes
between this check and the body's first external effect, or inside the body:
that window is closed only downstream, by the idempotency key and the fencing
token. A worker without a lease
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

__all__ = ["SHARED_JOURNAL_LEASE", "LeaseKeeper", "lease_for", "takeover_grace"]

#: Seconds of the run lease a run takes by default (``lease="auto"``) on a journal made
#: for many workers (Postgres): renewed every third of it while the run executes; a
#: worker that dies holding it is taken over once it lapses (plus :func:`takeover_grace`).
SHARED_JOURNAL_LEASE = 30.0


def lease_for(option: float | str | None, journal: object, *, live: bool) -> float | None:
    """The lease length a run takes, in seconds, from its ``lease`` option (None: no lease).

    ``"auto"`` (the default) takes :data:`SHARED_JOURNAL_LEASE` on a journal
    that declares itself shared by many workers (a class attribute
    ``shared_by_workers = True``: Postgres), so two workers started together
    on one run never both execute it (nor both pay for a model call); none on
    a journal one process owns (DuckDB, memory, ``.rdj``), nor for a replay-only
    run. A number is taken as given; None takes no lease (on a shared journal,
    two workers may then both run a model step; side effects stay once).

    Args:
        option: the run's ``lease`` option: ``"auto"``, seconds, or None.
        journal: the run's journal.
        live: the run may record (a replay-only run never takes a lease).
    """
    if option != "auto":
        return None if option is None else float(option)
    shared = getattr(journal, "shared_by_workers", False) is True
    return SHARED_JOURNAL_LEASE if shared and live else None


def takeover_grace(ttl: float) -> float:
    """Seconds a worker taking over a lapsed lease waits past its expiry: ``min(1, ttl / 4)``.

    Covers clock skew between the hosts (leases are timed by each client's
    wall clock) and the instructions between a holder's last check and its
    body's start. Less than a third of the lease, so the new holder's own
    lease (renewed every third) never lapses while it waits.
    """
    return min(1.0, ttl / 4)


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
        #: monotonic time until which the lease is surely held (see the module's note)
        self._held_until = 0.0

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
            before = self.journal.get_run(self.run_id)
            try:
                sent = time.monotonic()
                self.epoch = self.journal.acquire_lease(self.run_id, self.owner, self.ttl)
                self._held_until = sent + self.ttl
                break
            except RunBusyError:
                if self.on_busy == "raise" or time.monotonic() > deadline:
                    raise
                yield min(0.05, self.ttl / 10)
        # a takeover of a lapsed lease: its holder may be frozen, not dead; wait past its
        # expiry plus the grace before deciding any step it claimed (see the module's note)
        if before is not None and before.lease_owner not in (None, self.owner):
            until = (before.lease_expires or 0.0) + takeover_grace(self.ttl)
            while (left := until - time.time()) > 0:
                yield left
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
                sent = time.monotonic()
                self.journal.renew_lease(self.run_id, self.owner, self.epoch, self.ttl)
                self._held_until = max(self._held_until, sent + self.ttl)
            except LeaseLostError as exc:
                self.lost = exc
                return
            except Exception:  # a transient database error: try again next period
                continue

    def fence(self, seq: int, name: str) -> int | None:
        """Confirm this worker still holds its lease before a tool body starts; return the epoch.

        No round trip while the lease is surely held for another third of its
        length (the renewer keeps it so); otherwise the lease is renewed now.
        Called after the step's claim commits, right before its body starts.

        Args:
            seq: the claimed step's seq (for the error).
            name: the tool's step name (for the error).

        Returns:
            The lease epoch (the body's fencing token), or None without a lease.

        Raises:
            LeaseLostError: the lease was taken over (or lost earlier): the body
                must not start; the step stays in flight for the new holder.
            JournalWriteError, ReplayError: the renewal failed; the body must not start.
        """
        if self.ttl is None or self.epoch is None:
            return None
        if self.lost is not None:
            raise self._body_refused(seq, name, self.lost)
        if time.monotonic() < self._held_until - self.ttl / 3:
            return self.epoch
        sent = time.monotonic()
        try:
            self.journal.renew_lease(self.run_id, self.owner, self.epoch, self.ttl)
        except LeaseLostError as exc:
            self.lost = exc
            raise self._body_refused(seq, name, exc) from exc
        self._held_until = max(self._held_until, sent + self.ttl)
        return self.epoch

    def surely_held(self) -> bool:
        """True while the lease is surely held for another third of its length (no I/O)."""
        return self.ttl is None or time.monotonic() < self._held_until - self.ttl / 3

    def _body_refused(self, seq: int, name: str, cause: LeaseLostError) -> LeaseLostError:
        current = getattr(cause, "current_epoch", None)
        return LeaseLostError(
            f"run {self.run_id!r}: this worker ({self.owner}) claimed seq {seq} (tool "
            f"{name!r}) under lease epoch {self.epoch}, but lost the lease before the body "
            f"started (the run's epoch is now {current}: another worker took it over after "
            "this one went silent past its lease). The body was NOT run; the step stays in "
            "flight and the worker holding the run decides it (recover(), restart_safe, or "
            "its in-flight policy). Stop this worker's loop; nothing is lost.",
            run_id=self.run_id,
            seq=seq,
            owner=self.owner,
            epoch=self.epoch,
            current_epoch=current,
        )

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
                    "is executing it, and this worker has no lease (lease=None). Retry later, "
                    "pass on_busy='wait' to wait for it, or give every worker a lease "
                    "(lease='auto', the default, or seconds) so a dead one's run is taken "
                    "over when its lease ends.",
                    run_id=self.run_id,
                    seq=record.next_seq,
                    owner=record.lease_owner,
                )
            yield 0.05
