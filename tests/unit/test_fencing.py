"""Fencing reaches the tool body (issue 12, #1), in one process.

After a tool's claim commits and before its body starts, a leased worker
confirms it still holds the lease; a worker that lost it (frozen past its
lease, taken over) does not start the body. The body gets the lease epoch as
its fencing token. A worker taking over a lapsed lease waits past the old
expiry plus a grace. The real-process experiment (SIGSTOP, takeover, SIGCONT)
is ``tests/crash/test_fencing.py``.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest

import redrive
from redrive.replay import set_boundary_hook
from redrive.replay._lease import takeover_grace
from redrive.storage import MemoryJournal, RunRecord
from tests.conftest import Drive, Loop


def _taken_over(journal: MemoryJournal, run_id: str) -> None:
    """Another worker takes the run's lease over (as after this one froze past it)."""

    def take(r: RunRecord) -> RunRecord:
        epoch, expires = r.lease_epoch + 1, time.time() + 60
        return attrs.evolve(r, lease_owner="other:1:x", lease_epoch=epoch, lease_expires=expires)

    journal._change_run(run_id, take)


def test_body_does_not_start_after_the_lease_is_lost(drive: Drive) -> None:
    """Claim committed, then the lease is lost before the body: LeaseLostError, body not run."""
    journal = MemoryJournal()
    bodies: list[int] = []

    @drive.tool(restart_safe=False)
    def refund(amount: int) -> int:
        bodies.append(amount)
        return amount

    def freeze(boundary: str, info: dict[str, Any]) -> None:
        if boundary == "tool_claimed":
            run = drive.last_run
            assert run is not None
            run._block._lease._held_until = 0.0  # time passed: the lease is no longer surely held
            _taken_over(journal, info["run_id"])

    def loop(run: redrive.Run) -> Loop:
        yield refund(7)

    set_boundary_hook(freeze)
    try:
        with pytest.raises(redrive.LeaseLostError) as caught:
            drive.run(journal, "fenced", loop, lease=30)
    finally:
        set_boundary_hook(None)
    err = caught.value
    assert bodies == []
    assert err.seq == 1 and err.epoch == 1 and err.current_epoch == 2
    assert "before the body started" in str(err) and "NOT run" in str(err)
    kinds = [(f.seq, f.kind) for f in journal.frames("fenced")]
    assert kinds == [(0, "run_start"), (1, "tool_start")]  # in flight, for the new holder


def test_body_gets_the_fencing_token(drive: Drive) -> None:
    """The body sees the lease epoch; None without a lease and outside a body."""
    journal = MemoryJournal()
    seen: list[int | None] = []

    @drive.tool(restart_safe=True)
    def write(n: int) -> int:
        seen.append(redrive.fencing_token())
        return n

    def loop(run: redrive.Run) -> Loop:
        yield write(1)

    drive.run(journal, "leased", loop, lease=30)
    drive.run(journal, "plain", loop)
    assert seen == [1, None]
    assert redrive.fencing_token() is None


def test_fence_renews_when_the_lease_is_not_surely_held(drive: Drive) -> None:
    """A lease not renewed for a while (a slow renewer) is renewed before the body, not refused."""
    journal = MemoryJournal()
    bodies: list[int] = []

    @drive.tool(restart_safe=False)
    def refund(amount: int) -> int:
        bodies.append(amount)
        return amount

    def stale(boundary: str, info: dict[str, Any]) -> None:
        if boundary == "tool_claimed":
            run = drive.last_run
            assert run is not None
            run._block._lease._held_until = 0.0

    def loop(run: redrive.Run) -> Loop:
        yield refund(3)

    set_boundary_hook(stale)
    try:
        drive.run(journal, "slow-renewer", loop, lease=30)
    finally:
        set_boundary_hook(None)
    assert bodies == [3]


def test_takeover_waits_past_the_old_lease_plus_grace(drive: Drive) -> None:
    """A worker taking over a lapsed lease decides nothing before its expiry plus the grace."""
    journal = MemoryJournal()
    ran_at: list[float] = []

    @drive.tool(restart_safe=True)
    def refund(amount: int) -> int:
        ran_at.append(time.time())
        return amount

    def loop(run: redrive.Run) -> Loop:
        yield refund(3)

    # a run whose previous holder died holding its lease, in flight: the lease just lapsed
    drive.crash(journal, "lapsed", "tool_claimed", "refund", loop, lease=2)
    assert drive.last_run is not None
    drive.last_run._block._lease._stop.set()  # a SIGKILL stops its renewer too
    expired = time.time()
    journal._change_run("lapsed", lambda r: attrs.evolve(r, lease_expires=expired))
    drive.run(journal, "lapsed", loop, lease=2)
    assert ran_at and ran_at[0] >= expired + takeover_grace(2)
    assert journal.get_run("lapsed").lease_epoch == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("holder", [None, "w2"])
def test_a_lost_lease_names_its_new_holder_or_says_it_was_released(holder: str | None) -> None:
    """Outside tester: a worker whose lease was taken over by one that already finished and
    released it was told "taken over by None"; the message says what happened instead."""
    from redrive.errors import LeaseLostError
    from redrive.storage import RunRecord
    from redrive.storage._base import check_fence

    record = RunRecord(run_id="r", lease_owner=holder, lease_epoch=2)
    with pytest.raises(LeaseLostError) as caught:
        check_fence(record, 1)
    message = str(caught.value)
    assert "None" not in message and "epoch 2" in message
    assert ("by 'w2'" in message) if holder else ("released" in message)
