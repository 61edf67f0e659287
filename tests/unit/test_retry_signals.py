"""Retry signals (issue 23 item 9, DESIGN C7): a tool body that asks to be called again.

A body raising :class:`redrive.RetryRequested` (or an exception marked with
``mark_retry_requested``, as the framework integrations mark pydantic-ai's
``ModelRetry``) records a ``tool_error`` with ``retry_requested: true``; the
next call of the tool with the same arguments is a retry of the same logical
operation: its body runs under the same idempotency key, live and on resume,
even for a tool that is not restart safe. Every loop runs through both faces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import redrive
from redrive.replay._engine import OpenOperations, ToolAsk, decide_tool
from redrive.storage import MemoryJournal
from tests.conftest import Drive, DriveCrash, Loop, Step


class Busy(Exception):
    """The ticket service refused the request (nothing was created)."""


@pytest.fixture
def journal() -> Iterator[MemoryJournal]:
    """A fresh in-memory journal."""
    yield MemoryJournal()


class Tickets:
    """A ticket service outside the runs; it does NOT dedupe on the idempotency key.

    Attributes:
        keys: the idempotency key of every request that reached the body.
        opened: the tickets it created.
        busy: how many of the first requests it refuses (nothing created).
    """

    def __init__(self, busy: int = 1, signal: type[BaseException] | None = None) -> None:
        self.keys: list[str] = []
        self.opened: list[str] = []
        self.busy = busy
        self.signal = signal

    def open(self, subject: str, key: str) -> str:
        self.keys.append(key)
        if len(self.keys) <= self.busy:
            if self.signal is None:
                raise redrive.RetryRequested("ticket service busy, try again")
            raise redrive.replay.mark_retry_requested(Busy("ticket service busy, try again"))
        self.opened.append(subject)
        return f"T-{len(self.opened)}"


def ticket_tool(drive: Drive, tickets: Tickets) -> Step:
    """``open_ticket(subject, idempotency_key)``: not restart safe, declared."""

    def open_ticket(subject: str, idempotency_key: str) -> str:
        return tickets.open(subject, idempotency_key)

    return drive.tool(restart_safe=False)(open_ticket)


def asking(tool: Step, calls: int) -> Any:
    """A loop that calls ``tool("printer")`` up to ``calls`` times until it answers."""

    def loop(run: redrive.Run) -> Loop:
        got: list[Any] = []
        for _ in range(calls):
            try:
                got.append((yield tool("printer")))
                break
            except (redrive.RetryRequested, Busy) as exc:
                got.append(f"retry: {exc}")
        return got

    return loop


@pytest.mark.parametrize("signal", [None, Busy], ids=["RetryRequested", "marked"])
def test_a_retry_signal_lets_the_same_call_run_again_live(
    drive: Drive, journal: MemoryJournal, signal: type[BaseException] | None
) -> None:
    """A body that asks to be called again: the same call runs again, under the same key,
    one ticket; the journal says so; a replay hands back the same outcomes with no body."""
    tickets = Tickets(busy=1, signal=signal)
    tool = ticket_tool(drive, tickets)
    _, live = drive.run(journal, "ticket:1", asking(tool, 3))
    assert live == ["retry: ticket service busy, try again", "T-1"]
    assert tickets.keys == ["ticket:1:1:open_ticket"] * 2 and tickets.opened == ["printer"]
    errors = [f.data() for f in journal.frames("ticket:1") if f.kind == "tool_error"]
    assert errors[0]["error"]["retry_requested"] is True
    _, replayed = drive.run(journal, "ticket:1", asking(tool, 3), live=False)
    assert replayed == live and len(tickets.keys) == 2


def test_a_retry_signal_is_honoured_on_resume(drive: Drive, journal: MemoryJournal) -> None:
    """The worker dies after the signal was recorded, before the retry: the resume replays
    the recorded signal (no body), then runs the retry live under the first attempt's key."""
    tickets = Tickets(busy=1)
    tool = ticket_tool(drive, tickets)

    def backoff(seconds: int) -> int:
        return seconds

    pause = drive.tool(read_only=True)(backoff)

    def loop(run: redrive.Run) -> Loop:
        got: list[Any] = []
        for _ in range(3):
            try:
                got.append((yield tool("printer")))
                break
            except redrive.RetryRequested as exc:
                got.append(f"retry: {exc}")
                yield pause(1)
        return got

    drive.crash(journal, "r", "tool_claimed", "backoff", loop)
    assert len(tickets.keys) == 1
    _, live = drive.run(journal, "r", loop)
    assert live == ["retry: ticket service busy, try again", "T-1"]
    assert tickets.keys == ["r:1:open_ticket"] * 2 and tickets.opened == ["printer"]


def test_a_resume_after_the_signal_ended_the_execution_runs_the_retry(
    drive: Drive, journal: MemoryJournal
) -> None:
    """Killed right after the signal's tool_error was written: the resume replays it, then
    the loop's retry runs live (not SideEffectRetryBlockedError)."""
    tickets = Tickets(busy=1)
    tool = ticket_tool(drive, tickets)
    drive.crash(journal, "r", "tool_recorded", "open_ticket", asking(tool, 3))
    _, live = drive.run(journal, "r", asking(tool, 3))
    assert live[-1] == "T-1" and tickets.keys == ["r:1:open_ticket"] * 2


def test_a_failure_without_the_signal_still_blocks_the_same_call(
    drive: Drive, journal: MemoryJournal
) -> None:
    """The retry fails without asking again (it may have had its effect): the third call is
    blocked, naming the operation's key."""
    keys: list[str] = []

    def open_ticket(subject: str, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        if len(keys) == 1:
            raise redrive.RetryRequested("busy")
        raise Busy("timed out after sending")

    tool = drive.tool(restart_safe=False)(open_ticket)
    with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
        drive.run(journal, "r", asking(tool, 3))
    assert keys == ["r:1:open_ticket"] * 2
    assert info.value.idempotency_key == "r:1:open_ticket"  # type: ignore[attr-defined]


def test_after_the_retry_succeeds_the_same_call_is_a_new_operation(
    drive: Drive, journal: MemoryJournal
) -> None:
    """A retry that succeeded closes the operation: the same call later runs with a new key."""
    tickets = Tickets(busy=1)
    tool = ticket_tool(drive, tickets)

    def loop(run: redrive.Run) -> Loop:
        first = yield from asking(tool, 3)(run)
        second = yield tool("printer")
        return [*first, second]

    _, live = drive.run(journal, "r", loop)
    assert live[-2:] == ["T-1", "T-2"]
    assert tickets.keys[:2] == ["r:1:open_ticket"] * 2 and tickets.keys[2] != tickets.keys[0]


def _ask(**changes: Any) -> ToolAsk:
    fields: dict[str, Any] = {
        "step": None,
        "restart_safe": False,
        "has_recover": False,
        "can_write": True,
        "exhausted": False,
        "failed_at": 3,
        "max_attempts": 3,
        "known_seq": 0,
        "may_wait": False,
        "leased": False,
        "claim_age": 0.0,
        "busy_timeout": 30.0,
    }
    return ToolAsk(**{**fields, **changes})


def test_the_engine_claims_a_retry_the_body_asked_for() -> None:
    """decide_tool: a same call after a failure blocks, unless that failure asked for a retry."""
    assert type(decide_tool(_ask())).__name__ == "Block"
    assert type(decide_tool(_ask(retry_requested=True))).__name__ == "Claim"
    assert type(decide_tool(_ask(retry_requested=True, can_write=False))).__name__ == "Miss"


def test_the_ledger_keeps_a_signalled_operation_open_until_a_plain_failure() -> None:
    """OpenOperations: a retry signal opens the operation (key kept); a plain failure closes
    the request for a retry again."""
    ops = OpenOperations()
    ops.failed("t", "k", "r:3:t", retryable=False, retry_requested=True)
    assert ops.retry_requested("t", "k") and ops.take("t", "k") == "r:3:t"
    ops.failed("t", "k", "r:3:t", retryable=False)
    assert not ops.retry_requested("t", "k") and ops.take("t", "k") is None


def test_a_crash_inside_the_retry_body_is_in_flight_as_usual(
    drive: Drive, journal: MemoryJournal
) -> None:
    """The retry's body dies after its effect: the resume blocks it (in flight), not re-run."""
    keys: list[str] = []

    def open_ticket(subject: str, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        if len(keys) == 1:
            raise redrive.RetryRequested("busy")
        raise DriveCrash

    tool = drive.tool(restart_safe=False)(open_ticket)
    with pytest.raises(DriveCrash):
        drive.enter_only(journal, "r", asking(tool, 3))
    with pytest.raises(redrive.SideEffectRetryBlockedError):
        drive.run(journal, "r", asking(tool, 3))
    assert len(keys) == 2
