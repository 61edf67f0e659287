"""Logical operations: one idempotency key across a tool call's retries and resumes (issue 11
item 2), and a step attempted more than once replayed as its last attempt (issue 11 bug C).

The rule: a call of a tool with the same canonical arguments as an operation whose last
attempt failed with a retryable error is a retry of that operation and gets its key, in the
same run or after a resume; a call after a success or a permanent error is a new operation
with a new key. Every loop runs through both faces (the ``drive`` fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import redrive
from redrive.storage import MemoryJournal
from tests.conftest import Drive, DriveCrash, Loop, Step


class Timeout(Exception):
    """A provider timeout after the request reached it: retryable."""

    retryable = True


class Declined(Exception):
    """A provider's refusal: permanent."""


@pytest.fixture
def journal() -> Iterator[MemoryJournal]:
    """A fresh in-memory journal."""
    yield MemoryJournal()


class Provider:
    """A payment provider outside the runs: it dedupes on the idempotency key.

    Attributes:
        calls: the key of every request that reached it, in order.
        outcomes: what it answers each request (by request index; "ok" past the end):
            "ok", "timeout" (retryable, after its side effect), "timeout_ends_run" (the
            same, with a message that tells the loop not to catch it), "declined"
            (permanent), "crash" (the worker dies right after the side effect).
    """

    def __init__(self, outcomes: list[str] | None = None) -> None:
        self.calls: list[str] = []
        self.outcomes = outcomes or []
        self.charges: dict[str, int] = {}

    def charge(self, order_id: str, cents: int, key: str) -> dict[str, Any]:
        index = len(self.calls)
        self.calls.append(key)
        self.charges.setdefault(key, cents)  # the side effect, once per key
        outcome = self.outcomes[index] if index < len(self.outcomes) else "ok"
        if outcome == "timeout":
            raise Timeout(f"timed out after sending request {index}")
        if outcome == "timeout_ends_run":
            raise Timeout(f"request {index} ends the run")
        if outcome == "declined":
            raise Declined(f"declined request {index}")
        if outcome == "crash":
            raise DriveCrash  # as a SIGKILL right after the side effect
        return {"order": order_id, "charged": cents, "request": index}


def payment_tool(drive: Drive, provider: Provider, **declaration: Any) -> Step:
    """``create_payment(order_id, cents, idempotency_key)`` through ``provider``."""

    def create_payment(order_id: str, cents: int, idempotency_key: str) -> dict[str, Any]:
        return provider.charge(order_id, cents, idempotency_key)

    return drive.tool(**{"restart_safe": True, **declaration})(create_payment)


def retrying(pay: Step, calls: int) -> Any:
    """A loop that calls ``pay("77", 500)`` ``calls`` times, catching what each call raises."""

    def loop(run: redrive.Run) -> Loop:
        got: list[Any] = []
        for _ in range(calls):
            try:
                got.append((yield pay("77", 500)))
            except (Timeout, Declined) as exc:
                got.append(type(exc).__name__)
        return got

    return loop


def test_a_retry_in_the_same_run_reuses_the_key(drive: Drive, journal: MemoryJournal) -> None:
    """A timeout then a retry with the same arguments: one key, one charge; after the success
    the same call is a new operation with a new key; a replay hands back the same outcomes."""
    provider = Provider(["timeout", "timeout"])
    pay = payment_tool(drive, provider)
    _, live = drive.run(journal, "checkout:77", retrying(pay, 4))
    first, *_, fourth = provider.calls
    assert provider.calls == [first, first, first, fourth] and fourth != first
    assert first == "checkout:77:1:create_payment"
    assert live[:2] == ["Timeout", "Timeout"] and len(provider.charges) == 2
    starts = [f.data() for f in journal.frames("checkout:77") if f.kind == "tool_start"]
    assert [s["idempotency_key"] for s in starts] == provider.calls  # derivable from the journal
    _, replayed = drive.run(journal, "checkout:77", retrying(pay, 4), live=False)
    assert replayed == live and len(provider.calls) == 4


def test_a_permanent_error_ends_the_operation(drive: Drive, journal: MemoryJournal) -> None:
    """A call after a permanent error is a new operation; after a retryable one, a retry."""
    provider = Provider(["declined", "timeout"])
    _, live = drive.run(journal, "r", retrying(payment_tool(drive, provider), 3))
    assert live[:2] == ["Declined", "Timeout"]
    assert provider.calls[0] != provider.calls[1] == provider.calls[2]


def test_a_distinguishing_argument_asks_for_a_new_operation(
    drive: Drive, journal: MemoryJournal
) -> None:
    """After a retryable error, the same tool with another argument is a new operation."""
    provider = Provider(["timeout"])

    def create_payment(order_id: str, cents: int, attempt: int, idempotency_key: str) -> Any:
        return provider.charge(order_id, cents, idempotency_key)

    pay = drive.tool(restart_safe=True)(create_payment)

    def loop(run: redrive.Run) -> Loop:
        with contextlib.suppress(Timeout):
            yield pay("77", 500, attempt=1)
        return (yield pay("77", 500, attempt=2))

    drive.run(journal, "r", loop)
    assert provider.calls[0] != provider.calls[1]


def test_a_retry_after_a_resume_reuses_the_key(drive: Drive, journal: MemoryJournal) -> None:
    """A timeout, then the worker dies before the retry: the resumed retry keeps the key."""
    provider = Provider(["timeout"])
    pay = payment_tool(drive, provider)
    drive.crash(journal, "r", "tool_claimed", "create_payment", retrying(pay, 2), occurrence=2)
    assert len(provider.calls) == 1  # the retry was claimed, its body never ran
    _, live = drive.run(journal, "r", retrying(pay, 2))
    assert live[0] == "Timeout" and provider.calls == [provider.calls[0]] * 2
    assert len(provider.charges) == 1


def test_a_retry_killed_after_its_side_effect_is_rerun_with_the_key(
    drive: Drive, journal: MemoryJournal
) -> None:
    """A timeout, a retry that dies after charging, a resume: three requests, one key."""
    provider = Provider(["timeout", "crash"])
    pay = payment_tool(drive, provider)
    with pytest.raises(DriveCrash):
        drive.enter_only(journal, "r", retrying(pay, 2))
    _, live = drive.run(journal, "r", retrying(pay, 2))
    assert live[0] == "Timeout" and live[1]["request"] == 2
    assert len(set(provider.calls)) == 1 and len(provider.calls) == 3


def test_an_unsafe_retry_is_blocked_naming_the_first_key(
    drive: Drive, journal: MemoryJournal
) -> None:
    """A non-restart-safe tool is not retried after a timeout; the block names the first key,
    raised or told to the model."""
    provider = Provider(["timeout"])
    pay = payment_tool(drive, provider, restart_safe=False)
    with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
        drive.run(journal, "r", retrying(pay, 2))
    first = provider.calls[0]
    assert info.value.idempotency_key == first and first in str(info.value)  # type: ignore[attr-defined]
    provider.outcomes = ["timeout", "timeout"]
    _, told = drive.run(journal, "t", retrying(pay, 2), on_in_flight="tell_model")
    assert told[0] == "Timeout" and told[1]["idempotency_key"] == provider.calls[1]
    assert provider.calls[1] in told[1]["reconcile"] and len(provider.calls) == 2


def test_the_resume_note_names_the_key_a_retry_keeps(drive: Drive, journal: MemoryJournal) -> None:
    """A retryable failure in the resume note says a retry keeps its operation's key."""
    provider = Provider(["timeout"])
    pay = payment_tool(drive, provider)
    drive.crash(journal, "r", "tool_claimed", "create_payment", retrying(pay, 2), occurrence=2)

    def resumed(run: redrive.Run) -> Loop:
        note = run.resume_note()
        yield from retrying(pay, 2)(run)
        return note

    _, note = drive.run(journal, "r", resumed)
    failed = next(line for line in note.splitlines() if "raised" in line)
    assert failed.startswith("- create_payment(") and "raised Timeout: timed out" in failed
    assert failed.endswith(
        "(retryable: calling it again with the same arguments retries the same operation, "
        f"idempotency key {provider.calls[0]})"
    )


# -- bug C: a step with several attempts is replayed as its last one -----------------------


def ended_by_timeout(pay: Step) -> Any:
    """A loop whose one call's timeout ends the run (it does not catch it)."""

    def loop(run: redrive.Run) -> Loop:
        return (yield pay("77", 500))

    return loop


def test_a_rerun_that_succeeds_replays_its_result(drive: Drive, journal: MemoryJournal) -> None:
    """A timeout ends the run; the resume re-runs the step and it succeeds: a replay hands
    back the result (not the old error), and a further resume reads its journal as sound."""
    provider = Provider(["timeout"])
    pay = payment_tool(drive, provider)
    with pytest.raises(Timeout):
        drive.run(journal, "r", ended_by_timeout(pay))
    _, live = drive.run(journal, "r", ended_by_timeout(pay))
    assert live["request"] == 1 and provider.calls == [provider.calls[0]] * 2
    _, replayed = drive.run(journal, "r", ended_by_timeout(pay), live=False)
    assert replayed == live
    _, again = drive.run(journal, "r", ended_by_timeout(pay))  # resumed once more
    assert again == live and len(provider.calls) == 2
    steps = list(redrive.replay.iter_steps(journal.frames("r"), "r"))
    assert [(s.status, s.attempts) for s in steps] == [("done", 2)]


def test_a_recovered_step_replays_the_recovered_result(
    drive: Drive, journal: MemoryJournal
) -> None:
    """A timeout ends the run; recover() says the charge happened: replays hand back its result."""
    provider = Provider(["timeout"])

    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        return redrive.Recovery.done({"recovered": key in provider.charges})

    pay = payment_tool(drive, provider, restart_safe=False, recover=recover)
    with pytest.raises(Timeout):
        drive.run(journal, "r", ended_by_timeout(pay))
    _, live = drive.run(journal, "r", ended_by_timeout(pay))
    assert live == {"recovered": True}
    for options in ({"live": False}, {}):
        _, replayed = drive.run(journal, "r", ended_by_timeout(pay), **options)
        assert replayed == live and len(provider.calls) == 1


# -- the property ----------------------------------------------------------------------------

#: What one attempt of the operation does: answer, fail retryably (caught by the loop, or
#: ending the run), fail permanently, or die after its side effect (abandoned, as a SIGKILL).
ATTEMPTS = st.sampled_from(["ok", "timeout", "timeout_ends_run", "declined", "crash"])


def operations_loop(pay: Step, calls: int) -> Any:
    """``calls`` calls of ``pay`` with the same arguments; a timeout whose message says so
    ends the run, other errors are caught and recorded as the call's outcome."""

    def loop(run: redrive.Run) -> Loop:
        got: list[Any] = []
        for _ in range(calls):
            try:
                got.append((yield pay("77", 500)))
            except Timeout as exc:
                if "ends the run" in str(exc):
                    raise
                got.append("Timeout")
            except Declined:
                got.append("Declined")
        return got

    return loop


def expected_operations(plan: list[str]) -> list[int]:
    """The logical operation of each request the provider gets, by the rule."""
    ops, op = [], 0
    for attempt in plan:
        ops.append(op)
        if attempt in ("ok", "declined"):
            op += 1
    return ops


def check_operations(plan: list[str], face: str, policy: str, journal: Any) -> None:
    """Run the operations loop through ``plan``'s attempts, crashing and resuming; check the
    keys, then replay (``live=False``) and resume the finished run."""
    if plan[-1] not in ("ok", "declined", "timeout"):
        plan = [*plan, "ok"]  # the last attempt settles the operation
    provider = Provider(plan)
    drive = Drive(face)  # type: ignore[arg-type]
    pay = payment_tool(drive, provider)
    calls = sum(1 for a in plan if a in ("ok", "timeout", "declined"))
    loop = operations_loop(pay, calls)
    options = {"replay": policy, "max_attempts": 100}
    live = None
    for _ in range(len(plan) + 1):
        stops = [a for a in plan[len(provider.calls) :] if a in ("crash", "timeout_ends_run")]
        try:
            if stops and stops[0] == "crash":  # this execution dies: its exit never runs
                drive.enter_only(journal, "pay", loop, **options)
                raise AssertionError("the planned crash did not happen")
            live = drive.run(journal, "pay", loop, **options).value
            break
        except (DriveCrash, Timeout):
            continue
    assert live is not None, "the run never finished"
    assert len(provider.calls) == len(plan)
    ops = expected_operations(plan)
    keys = {op: {k for k, o in zip(provider.calls, ops, strict=True) if o == op} for op in ops}
    assert all(len(k) == 1 for k in keys.values()), keys
    assert len({next(iter(k)) for k in keys.values()}) == len(keys)  # one key per operation
    for run_options in ({"live": False}, {}):
        replayed = drive.run(journal, "pay", loop, **options, **run_options).value
        assert replayed == live and len(provider.calls) == len(plan)


@settings(max_examples=40)
@given(
    plan=st.lists(ATTEMPTS, min_size=1, max_size=8),
    face=st.sampled_from(("sync", "async")),
    policy=st.sampled_from(("strict", "lenient")),
)
@example(plan=["timeout_ends_run", "ok"], face="sync", policy="strict")
@example(plan=["timeout", "crash", "timeout_ends_run", "ok", "ok"], face="async", policy="strict")
def test_every_attempt_of_an_operation_gets_its_key(
    plan: list[str], face: str, policy: str
) -> None:
    """Random attempts (ok / retryable / retryable ending the run / permanent / killed), across
    resumes: the key is one per logical operation, replay hands back the last attempts'
    outcomes, and no resume reads its own journal as corrupt (memory journal)."""
    check_operations(plan, face, policy, MemoryJournal())


@settings(max_examples=5)
@given(
    plan=st.lists(ATTEMPTS, min_size=1, max_size=6),
    face=st.sampled_from(("sync", "async")),
    policy=st.sampled_from(("strict", "lenient")),
)
@example(plan=["timeout_ends_run", "crash", "timeout", "ok"], face="sync", policy="strict")
def test_every_attempt_of_an_operation_gets_its_key_on_duckdb(
    plan: list[str], face: str, policy: str
) -> None:
    """The same property on the default DuckDB journal (a few examples: it is slower)."""
    with tempfile.TemporaryDirectory() as tmp:
        journal = redrive.open_journal(os.path.join(tmp, "runs.duckdb"))
        try:
            check_operations(plan, face, policy, journal)
        finally:
            journal.close()


def test_a_retried_step_asked_earlier_on_replay_replays_its_last_attempt(
    drive: Drive, journal: MemoryJournal
) -> None:
    """A turn's tools asked in another order on replay than recorded: a step whose first
    attempt failed retryably and whose resumed attempt succeeded replays its success."""
    provider = Provider(["timeout_ends_run"])
    pay = payment_tool(drive, provider)
    lookup = drive.tool(read_only=True)(lambda order_id: {"order": order_id})
    order = ["lookup", "pay"]

    def loop(run: redrive.Run) -> Loop:
        got: dict[str, Any] = {}
        for what in list(order):
            got[what] = yield (lookup("77") if what == "lookup" else pay("77", 500))
        return got

    with pytest.raises(Timeout):
        drive.run(journal, "r", loop)
    _, live = drive.run(journal, "r", loop)  # the resume re-attempts the payment
    assert len(provider.calls) == 2 and live["pay"]["request"] == 1
    order.reverse()  # the same turn, its tools asked the other way round
    for options in ({"live": False}, {}):
        _, replayed = drive.run(journal, "r", loop, **options)
        assert replayed == live and len(provider.calls) == 2


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_retryable_error_in_a_parallel_batch_is_retried_whatever_order_resume_asks(
    face: str,
) -> None:
    """Three tools issued together, c fails retryably and ends the run; the resume asks for c
    first (then a, b): c runs again, a and b replay, and replay in a third order runs nothing
    (dbos-transact-py#688)."""
    journal = redrive.open_journal(":memory:")
    ran: list[str] = []
    fail = {"c": True}

    def body(name: str) -> str:
        if fail.get(name):
            fail[name] = False
            raise ConnectionError(f"vendor {name} reset the connection")
        ran.append(name)
        return f"{name}-ok"

    if face == "sync":

        @redrive.tool(restart_safe=True)
        def call(name: str) -> str:
            return body(name)

        def attempt(order: str) -> list[str]:
            with redrive.run(journal, "batch") as run:
                got = [call(n) for n in order]
                run.finish(got)  # a finished run's finish() gives the recorded output
                return got

    else:

        @redrive.tool(restart_safe=True)
        async def acall(name: str) -> str:
            return body(name)

        def attempt(order: str) -> list[str]:
            async def main() -> list[str]:
                async with redrive.run(journal, "batch") as run:
                    got = list(await asyncio.gather(*(acall(n) for n in order)))
                    run.finish(got)
                    return got

            return asyncio.run(main())

    with pytest.raises(ConnectionError):
        attempt("abc")
    assert ran == ["a", "b"]
    assert attempt("cab") == ["c-ok", "a-ok", "b-ok"]
    assert ran == ["a", "b", "c"]
    assert attempt("bca") == ["b-ok", "c-ok", "a-ok"]
    assert ran == ["a", "b", "c"]
