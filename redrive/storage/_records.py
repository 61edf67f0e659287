"""The records every backend shares: a run's status and index row, its row's changes, a decision."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from ..frames import GENESIS, decode


class RunStatus(enum.StrEnum):
    """Status of a run, as stored in the journal's run index."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for succeeded, failed and cancelled."""
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@attrs.frozen(kw_only=True)
class RunRecord:
    """A run's row in the journal's run index.

    Attributes:
        run_id: the caller-chosen id.
        status: a :class:`RunStatus` value string.
        next_seq: the seq the next appended frame must carry (= frame count).
        last_chain: the chain of the last frame (``GENESIS`` when empty).
        input_fp: fingerprint (32 hex) of the run's input.
        entrypoint: ``"module:qualname"`` of a ``@redrive.durable`` function, or None.
        created_at / updated_at: wall time, seconds since the Unix epoch.
        output: canonical msgpack of the run's output once succeeded, else None.
        error: text of the error that ended the run, or None.
        lease_owner: the worker holding the run lease, or None.
        lease_epoch: fencing epoch, incremented on each lease acquisition (0: never leased).
        lease_expires: when the lease lapses, seconds since the Unix epoch, or None.
    """

    run_id: str
    status: str = RunStatus.RUNNING.value
    next_seq: int = 0
    last_chain: str = GENESIS
    input_fp: str = ""
    entrypoint: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    output: bytes | None = None
    error: str | None = None
    lease_owner: str | None = None
    lease_epoch: int = 0
    lease_expires: float | None = None

    def output_value(self) -> Any:
        """Decode and return the recorded output (None when there is none)."""
        return None if self.output is None else decode(self.output)


@attrs.frozen(kw_only=True)
class RunUpdate:
    """Changes to a run's index row, applied atomically with an append.

    ``updated_at`` (seconds since the Unix epoch) is the row's time after the
    append; None: the time of the append. A copy of a run (an import) gives the
    source run's own time, so ``runs`` and ``prune --older-than`` see the run's
    age, not the copy's.
    """

    status: str | None = None
    output: bytes | None = None
    error: str | None = None
    updated_at: float | None = None


@attrs.frozen(kw_only=True)
class Decision:
    """A recorded approval decision (first decision wins).

    Attributes:
        run_id, name: which approval.
        approved: the decision.
        by: who decided (free text).
        at: seconds since the Unix epoch.
        note: optional free text.
    """

    run_id: str
    name: str
    approved: bool
    by: str
    at: float
    note: str = ""
