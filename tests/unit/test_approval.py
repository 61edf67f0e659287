"""Approvals that survive a restart (issue 4, item 10): redrive.await_approval."""

from __future__ import annotations

from typing import Any

import pytest

import redrive
from redrive.replay import pending_approvals
from redrive.storage import Decision, MemoryJournal


class CountingJournal(MemoryJournal):
    """A memory journal that counts decision look-ups."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def decision(self, run_id: str, name: str) -> Decision | None:
        self.lookups += 1
        return super().decision(run_id, name)


def _loop(refunds: list[str]) -> Any:
    @redrive.tool(restart_safe=False)
    def refund(order: str) -> str:
        refunds.append(order)
        return "refunded"

    def loop() -> str:
        decision = redrive.await_approval("refund:ord-7", {"order": "ord-7", "amount": 40})
        if not decision.approved:
            return f"refused by {decision.by}"
        return str(refund("ord-7"))

    return loop


def test_run_suspends_until_decided_then_resumes() -> None:
    """Undecided, the run suspends; after decide() a resume continues and never asks again."""
    journal = CountingJournal()
    refunds: list[str] = []
    loop = _loop(refunds)
    with redrive.run(journal, "r1") as run:
        run.finish(loop())
    assert run.status == "suspended"
    assert journal.get_run("r1").status == "suspended"  # type: ignore[union-attr]
    assert refunds == []
    assert pending_approvals(journal, "r1") == [
        {"name": "refund:ord-7", "payload": {"order": "ord-7", "amount": 40}}
    ]
    with redrive.run(journal, "r1") as again:  # still undecided: suspends again, one request
        run.finish(loop())
    assert again.status == "suspended"
    first = journal.decide("r1", "refund:ord-7", True, by="alice")
    second = journal.decide("r1", "refund:ord-7", False, by="mallory")
    assert second == first
    assert pending_approvals(journal, "r1") == []
    with redrive.run(journal, "r1") as resumed:
        resumed.finish(loop())
    assert resumed.status == "succeeded" and resumed.output == "refunded"
    assert refunds == ["ord-7"]
    requests = [f for f in journal.frames("r1") if f.name == "approval_requested"]
    assert len(requests) == 1
    lookups = journal.lookups
    with redrive.run(journal, "r1", live=False) as replay:
        assert loop() == "refunded"
    assert journal.lookups == lookups and replay.replayed_steps == 2


def test_rejection_is_returned() -> None:
    """A rejected approval is returned as a decision for the loop to act on."""
    journal = MemoryJournal()
    refunds: list[str] = []
    loop = _loop(refunds)
    with redrive.run(journal, "r1") as run:
        loop()
    journal.decide("r1", "refund:ord-7", False, by="bob", note="too large")
    with redrive.run(journal, "r1") as run:
        run.finish(loop())
    assert run.output == "refused by bob" and refunds == []


def test_changed_payload_diverges() -> None:
    """A strict replay with a changed approval payload diverges instead of reusing the decision."""
    journal = MemoryJournal()
    with redrive.run(journal, "r1"):
        redrive.await_approval("deploy", {"version": 1})
    journal.decide("r1", "deploy", True, by="ops")
    with redrive.run(journal, "r1"):
        redrive.await_approval("deploy", {"version": 1})
    with pytest.raises(redrive.DivergenceError), redrive.run(journal, "r1", live=False):
        redrive.await_approval("deploy", {"version": 2})


def test_async_run_suspends() -> None:
    """An async run suspends the same way."""
    import asyncio

    journal = MemoryJournal()

    async def main() -> str:
        async with redrive.run(journal, "r1") as run:
            redrive.await_approval("go")
        return run.status

    assert asyncio.run(main()) == "suspended"


def test_outside_a_run_is_an_error() -> None:
    """await_approval outside a run raises RuntimeError."""
    with pytest.raises(RuntimeError, match="outside a run"):
        redrive.await_approval("x")


def test_decision_is_not_applied_to_a_changed_payload() -> None:
    """A decision made for one payload is refused when the resumed loop asks for another."""
    journal = MemoryJournal()

    def loop(amount: int) -> Any:
        with redrive.run(journal, "appr-pay") as run:
            decision = redrive.await_approval("refund", {"amount": amount})
            run.finish({"approved": decision.approved, "amount": amount})
        return run

    assert loop(10).status == "suspended"
    journal.decide("appr-pay", "refund", True, by="alice")
    with pytest.raises(redrive.DivergenceError, match=r"\$\.amount: 10 -> 10000"):
        loop(10_000)
    assert loop(10).output == {"approved": True, "amount": 10}


def _forkable(journal: MemoryJournal, run_id: str, amount: int, refunds: list[str]) -> Any:
    """A loop: a lookup, an approval of ``amount``, a refund; run once under ``run_id``."""

    @redrive.tool(read_only=True)
    def lookup(order: str) -> int:
        return 40

    @redrive.tool(restart_safe=False)
    def refund(order: str, amount: int) -> str:
        refunds.append(f"{run_id}:{amount}")
        return "refunded"

    with redrive.run(journal, run_id) as run:
        lookup("ord-7")
        decision = redrive.await_approval("refund", {"order": "ord-7", "amount": amount})
        run.finish(refund("ord-7", amount) if decision.approved else "refused")
    return run


def test_a_fork_keeps_the_decisions_before_its_cut_and_asks_again_after_it() -> None:
    """A decision is the run's: a fork cut before the approval asks a person again (with the
    fork's own payload) instead of reusing a decision made for the original run's request;
    a fork cut after it replays the copied decision (docs/explanation/resume-contract.md)."""
    journal = MemoryJournal()
    refunds: list[str] = []
    assert _forkable(journal, "r1", 40, refunds).status == "suspended"
    journal.decide("r1", "refund", True, by="alice")
    assert _forkable(journal, "r1", 40, refunds).output == "refunded"
    approval = next(f.seq for f in journal.frames("r1") if f.kind == "value")
    after = next(f.seq for f in journal.frames("r1") if f.kind == "tool_start" and f.seq > approval)

    redrive.fork(journal, "r1", approval, "before")
    assert journal.decision("before", "refund") is None
    assert _forkable(journal, "before", 4000, refunds).status == "suspended"
    assert pending_approvals(journal, "before") == [
        {"name": "refund", "payload": {"order": "ord-7", "amount": 4000}}
    ]
    journal.decide("before", "refund", False, by="bob")
    assert _forkable(journal, "before", 4000, refunds).output == "refused"

    redrive.fork(journal, "r1", after, "after")
    forked = _forkable(journal, "after", 40, refunds)
    assert forked.status == "succeeded" and forked.output == "refunded"
    assert journal.decision("after", "refund") is None  # replayed from the copied value step
    assert refunds == ["r1:40", "after:40"]
