"""The durable-resume contract (issue 4): restart safety, idempotency keys, recover(),
in-flight outcomes, attempts and run outcomes, through both faces.

Every test that runs a loop takes the ``drive`` fixture (tests/conftest.py) and so runs
twice: ``with redrive.run(...)`` with sync tools and models, and ``async with
redrive.run(...)`` with ``async def`` ones. A loop is written once, as a generator that
yields its calls (``result = yield charge_card(5)``).

Crashes are simulated in-process here: a boundary hook raises a BaseException
and the run is abandoned without its exit (as a SIGKILL would leave it). The
same contract is proven with real killed processes in tests/crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import redrive
from redrive.recorders.tools import guess_restart_safe
from redrive.storage import MemoryJournal, RunStatus
from tests.conftest import Drive, Loop, Step


def kinds(journal: MemoryJournal, run_id: str) -> list[str]:
    """Return the kinds of a run's frames in seq order."""
    return [f.kind for f in journal.frames(run_id)]


@pytest.fixture
def journal() -> Iterator[MemoryJournal]:
    """A fresh in-memory journal."""
    yield MemoryJournal()


class Ledger:
    """Counts tool body executions (the side effects) by tool name."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


@pytest.fixture
def ledger() -> Ledger:
    """A side-effect ledger outside the runs."""
    return Ledger()


def one(step: Step, *args: Any, **kwargs: Any) -> Callable[[redrive.Run], Loop]:
    """A loop that makes one call and returns its result."""

    def loop(run: redrive.Run) -> Loop:
        return (yield step(*args, **kwargs))

    return loop


def nothing(run: redrive.Run) -> Loop:
    """A loop that makes no call."""
    return None
    yield  # a generator


# -- item 1: restart safety ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "get_order_status",
        "list_tickets",
        "search_docs",
        "fetchPage",
        "lookup_user",
        "list_invoices",
        "get_email_thread",
        "get_and_list",
    ],
)
def test_heuristic_read_verbs_are_safe(name: str) -> None:
    """An undeclared tool named with a clearly read-only verb counts as restart safe."""
    assert guess_restart_safe(name)


@pytest.mark.parametrize(
    "name",
    [
        "charge_card",
        "send_email",
        "send_invoice",
        "delete_account",
        "get_and_delete",
        "process",
        "refund",
        "",
        "getset_value",
        "read_then_write",
        "get_or_create_user",
        "fetch_and_send",
        "get_and",
    ],
)
def test_heuristic_fails_closed(name: str) -> None:
    """Side-effect names, and names with no clear read verb, never count as restart safe."""
    assert not guess_restart_safe(name)


@pytest.mark.parametrize("value", ["False", "True", 0, 1, "yes"])
def test_non_bool_restart_safe_is_a_decoration_error(value: Any) -> None:
    """A non-bool restart_safe (the string "False" included) fails at decoration time."""
    with pytest.raises(TypeError, match="restart_safe"):
        redrive.tool(restart_safe=value)


def test_declarations_reach_the_spec(drive: Drive) -> None:
    """restart_safe, read_only and the heuristic end up in the tool's spec."""

    @drive.tool
    def delete_account(user: str) -> None: ...

    @drive.tool
    def get_user(user: str) -> None: ...

    @drive.tool(read_only=True)
    def charge_preview(amount: int) -> None: ...

    @drive.tool(restart_safe=False)
    def get_token() -> None: ...

    assert not delete_account.redrive_tool.restart_safe
    assert not delete_account.redrive_tool.declared
    assert get_user.redrive_tool.restart_safe
    assert charge_preview.redrive_tool.restart_safe
    assert not get_token.redrive_tool.restart_safe


@pytest.mark.parametrize("declared_retryable", [False, True])
def test_unsafe_tool_runs_once_inside_a_retry_loop(
    drive: Drive, journal: MemoryJournal, ledger: Ledger, declared_retryable: bool
) -> None:
    """A restart_safe=False tool failing with a transient error is not re-run by a retry loop."""
    retryable: tuple[type[BaseException], ...] = (ConnectionError,) if declared_retryable else ()

    @drive.tool(restart_safe=False, retryable=retryable)
    def charge_card(amount: int) -> str:
        ledger.calls.append(("charge_card", amount))
        raise ConnectionError("reset by peer")

    seen: list[type[BaseException]] = []

    def loop(run: redrive.Run) -> Loop:
        for _ in range(3):
            try:
                yield charge_card(5)
            except ConnectionError as exc:
                seen.append(type(exc))

    with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
        drive.run(journal, "r1", loop)
    assert ledger.count("charge_card") == 1
    assert seen == [ConnectionError]
    assert info.value.tool == "charge_card"  # type: ignore[attr-defined]


def test_safe_tool_is_retried_inside_a_retry_loop(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """A restart_safe=True tool may run again after a transient error (the control case)."""

    @drive.tool(restart_safe=True)
    def send_email(to: str, idempotency_key: str) -> str:
        ledger.calls.append(("send_email", idempotency_key))
        if ledger.count("send_email") < 3:
            raise ConnectionError("reset")
        return "sent"

    def loop(run: redrive.Run) -> Loop:
        for _ in range(3):
            try:
                result = yield send_email("a@example.com")
                break
            except ConnectionError:
                continue
        run.finish(result)

    run, _ = drive.run(journal, "r1", loop)
    assert ledger.count("send_email") == 3
    assert run.status == "succeeded"


# -- in-flight behaviour per declaration ---------------------------------------------------


def _tools(drive: Drive, ledger: Ledger) -> dict[str, Step]:
    @drive.tool(restart_safe=True)
    def safe_tool(x: int) -> int:
        ledger.calls.append(("safe_tool", x))
        return x * 2

    @drive.tool(restart_safe=False)
    def unsafe_tool(x: int) -> int:
        ledger.calls.append(("unsafe_tool", x))
        return x * 2

    @drive.tool
    def delete_account(x: int) -> int:
        ledger.calls.append(("delete_account", x))
        return x * 2

    @drive.tool
    def get_status(x: int) -> int:
        ledger.calls.append(("get_status", x))
        return x * 2

    @drive.tool(read_only=True, restart_safe=False)
    def preview(x: int) -> int:
        ledger.calls.append(("preview", x))
        return x * 2

    return {
        "safe_tool": safe_tool,
        "unsafe_tool": unsafe_tool,
        "delete_account": delete_account,
        "get_status": get_status,
        "preview": preview,
    }


@pytest.mark.parametrize(
    ("name", "reruns"),
    [
        ("safe_tool", True),
        ("unsafe_tool", False),
        ("delete_account", False),
        ("get_status", True),
        ("preview", True),
    ],
)
def test_in_flight_tool_by_declaration(
    drive: Drive, journal: MemoryJournal, ledger: Ledger, name: str, reruns: bool
) -> None:
    """An in-flight tool re-runs on resume only if restart safe, read-only or named safe."""
    fn = _tools(drive, ledger)[name]
    drive.crash(journal, "r1", "tool_body_done", name, one(fn, 3))
    assert ledger.count(name) == 1

    def loop(run: redrive.Run) -> Loop:
        if reruns:
            assert (yield fn(3)) == 6
        else:
            with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
                yield fn(3)
            assert info.value.seq == 1
            assert info.value.idempotency_key == f"r1:1:{name}"  # type: ignore[attr-defined]
            assert info.value.arguments == {"x": 3}  # type: ignore[attr-defined]
            run.finish(None)

    drive.run(journal, "r1", loop)
    assert ledger.count(name) == (2 if reruns else 1)


@pytest.mark.parametrize("name", ["safe_tool", "unsafe_tool", "delete_account"])
def test_completed_tool_never_reruns(
    drive: Drive, journal: MemoryJournal, ledger: Ledger, name: str
) -> None:
    """A tool whose outcome is journaled returns it on resume, whatever its declaration."""
    tools = _tools(drive, ledger)
    fn = tools[name]

    def loop(run: redrive.Run) -> Loop:
        yield fn(1)
        yield tools["get_status"](99)

    drive.crash(journal, "r1", "tool_claimed", "get_status", loop)

    def again(run: redrive.Run) -> Loop:
        assert (yield fn(1)) == 2
        yield tools["get_status"](99)

    run, _ = drive.run(journal, "r1", again)
    assert ledger.count(name) == 1
    assert run.replayed_steps == 1 and run.live_steps == 1


def test_failed_unsafe_tool_replays_its_error(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """A recorded non-retryable tool error is raised again on resume without running the body."""

    @drive.tool(restart_safe=False)
    def charge_card(amount: int) -> int:
        ledger.calls.append(("charge_card", amount))
        raise ValueError("card declined")

    @drive.tool
    def get_status(x: int) -> int:
        return x

    def loop(run: redrive.Run) -> Loop:
        with contextlib.suppress(ValueError):
            yield charge_card(5)
        yield get_status(1)

    drive.crash(journal, "r1", "tool_claimed", "get_status", loop)

    def again(run: redrive.Run) -> Loop:
        with pytest.raises(ValueError, match="card declined"):
            yield charge_card(5)
        yield get_status(1)

    drive.run(journal, "r1", again)
    assert ledger.count("charge_card") == 1


# -- item 2: idempotency keys -------------------------------------------------------------


def test_idempotency_key_is_stable_across_resume(drive: Drive, journal: MemoryJournal) -> None:
    """The injected key and redrive.idempotency_key() are "{run_id}:{seq}:{tool}" on every try."""
    keys: list[tuple[str, str | None]] = []

    @drive.tool(restart_safe=True)
    def pay(amount: int, idempotency_key: str) -> str:
        keys.append((idempotency_key, redrive.idempotency_key()))
        return idempotency_key

    drive.crash(journal, "job:7", "tool_body_done", "pay", one(pay, 10))

    def loop(run: redrive.Run) -> Loop:
        assert (yield pay(10)) == "job:7:1:pay"

    drive.run(journal, "job:7", loop)
    assert keys == [("job:7:1:pay", "job:7:1:pay")] * 2
    start = next(f for f in journal.frames("job:7") if f.kind == "tool_start")
    assert "idempotency_key" not in start.data()["args"]


def test_idempotency_key_is_none_outside_a_tool_body(drive: Drive, journal: MemoryJournal) -> None:
    """Outside a run, and inside a run but outside a tool body, there is no key."""

    @drive.tool(restart_safe=True)
    def pay(idempotency_key: str | None = None) -> str | None:
        return idempotency_key

    assert redrive.idempotency_key() is None
    assert drive.call(pay()) is None

    def loop(run: redrive.Run) -> Loop:
        assert redrive.idempotency_key() is None
        assert (yield pay()) == "r1:1:pay"
        assert redrive.idempotency_key() is None

    drive.run(journal, "r1", loop)


def test_idempotency_key_is_not_matched(drive: Drive, journal: MemoryJournal) -> None:
    """An explicit idempotency_key argument is not part of the arguments matched on replay."""

    @drive.tool(restart_safe=True)
    def pay(amount: int, idempotency_key: str | None = None) -> int:
        return amount

    def loop(run: redrive.Run) -> Loop:
        yield pay(1, idempotency_key="caller-chosen")
        run.finish(None)

    drive.run(journal, "r1", loop)

    def again(run: redrive.Run) -> Loop:
        assert (yield pay(1)) == 1

    ran = drive.run(journal, "r1", again)
    assert ran.run.replayed_steps == 1


# -- item 3: recover() ----------------------------------------------------------------------


def _recovering(
    drive: Drive, ledger: Ledger, answer: Callable[[dict[str, Any], str], redrive.Recovery]
) -> Step:
    @drive.tool(restart_safe=False, recover=answer)
    def charge_card(amount: int) -> dict[str, Any]:
        ledger.calls.append(("charge_card", amount))
        return {"charged": amount}

    result: Step = charge_card
    return result


def test_recover_done_journals_the_result(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """recover() -> done: its result is journaled and returned; the body does not run again."""
    asked: list[tuple[dict[str, Any], str]] = []

    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        asked.append((args, key))
        return redrive.Recovery.done({"charged": args["amount"], "recovered": True})

    charge_card = _recovering(drive, ledger, recover)
    drive.crash(journal, "r1", "tool_body_done", "charge_card", one(charge_card, 5))

    def loop(run: redrive.Run) -> Loop:
        assert (yield charge_card(5)) == {"charged": 5, "recovered": True}
        run.finish(None)

    drive.run(journal, "r1", loop)
    assert asked == [({"amount": 5}, "r1:1:charge_card")]
    assert ledger.count("charge_card") == 1

    def replay(run: redrive.Run) -> Loop:
        assert (yield charge_card(5)) == {"charged": 5, "recovered": True}

    drive.run(journal, "r1", replay, live=False)
    assert len(asked) == 1


def test_recover_not_done_runs_the_body(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """recover() -> not_done: the body runs now, once."""
    charge_card = _recovering(drive, ledger, lambda args, key: redrive.Recovery.not_done())
    drive.crash(journal, "r1", "tool_claimed", "charge_card", one(charge_card, 5))
    assert ledger.count("charge_card") == 0
    _, value = drive.run(journal, "r1", one(charge_card, 5))
    assert value == {"charged": 5}
    assert ledger.count("charge_card") == 1


def test_recover_unknown_blocks(drive: Drive, journal: MemoryJournal, ledger: Ledger) -> None:
    """recover() -> unknown blocks the step with the reason given."""
    charge_card = _recovering(
        drive, ledger, lambda args, key: redrive.Recovery.unknown("gateway has no record yet")
    )
    drive.crash(journal, "r1", "tool_body_done", "charge_card", one(charge_card, 5))
    with pytest.raises(redrive.SideEffectRetryBlockedError, match="gateway has no record yet"):
        drive.run(journal, "r1", one(charge_card, 5))
    assert ledger.count("charge_card") == 1


def test_recover_that_raises_blocks_with_cause(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """A recover() that raises blocks the step, with the exception attached as the cause."""

    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        raise TimeoutError("ETIMEDOUT")

    charge_card = _recovering(drive, ledger, recover)
    drive.crash(journal, "r1", "tool_body_done", "charge_card", one(charge_card, 5))
    with pytest.raises(redrive.SideEffectRetryBlockedError, match="ETIMEDOUT") as info:
        drive.run(journal, "r1", one(charge_card, 5))
    assert isinstance(info.value.__cause__, TimeoutError)
    assert ledger.count("charge_card") == 1


def test_recover_must_return_a_recovery(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """A recover() returning something else is a TypeError naming the tool."""
    charge_card = _recovering(drive, ledger, lambda args, key: True)  # type: ignore[arg-type,return-value]
    drive.crash(journal, "r1", "tool_body_done", "charge_card", one(charge_card, 5))
    with pytest.raises(TypeError, match="charge_card"):
        drive.run(journal, "r1", one(charge_card, 5))


# -- item 4: what the model sees, attempts ------------------------------------------------------


def test_tell_model_journals_a_typed_outcome(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """on_in_flight="tell_model" returns a not-safely-resumable dict, journaled as tool_done."""
    unsafe = _tools(drive, ledger)["unsafe_tool"]
    drive.crash(journal, "r1", "tool_body_done", "unsafe_tool", one(unsafe, 4))

    def loop(run: redrive.Run) -> Loop:
        outcome = yield unsafe(4)
        run.finish(outcome)
        return outcome

    _, outcome = drive.run(journal, "r1", loop, on_in_flight="tell_model")
    assert outcome["status"] == "not_safely_resumable"
    assert outcome["tool"] == "unsafe_tool"
    assert outcome["arguments"] == {"x": 4}
    assert outcome["rerun"] is False
    assert outcome["idempotency_key"] == "r1:1:unsafe_tool"
    assert "duplicate side effect" in outcome["reason"]
    assert "reconcile" in outcome
    assert ledger.count("unsafe_tool") == 1
    assert kinds(journal, "r1")[-2:] == ["tool_done", "run_end"]
    assert drive.run(journal, "r1", one(unsafe, 4), live=False).value == outcome


def _told_then_interrupted(
    drive: Drive, journal: MemoryJournal, ledger: Ledger, x: int, y: int
) -> tuple[Step, Step, Callable[[redrive.Run], Loop]]:
    """Run "r1": ``unsafe_tool(x)`` crashes in flight, the resume (tell_model) answers it
    not-safely-resumable, then crashes with ``safe_tool(y)`` claimed.

    Returns:
        The unsafe tool, the safe tool and the loop calling them.
    """
    unsafe = _tools(drive, ledger)["unsafe_tool"]
    safe = _tools(drive, ledger)["safe_tool"]

    def loop(run: redrive.Run) -> Loop:
        yield unsafe(x)
        yield safe(y)

    drive.crash(journal, "r1", "tool_body_done", "unsafe_tool", loop)
    drive.crash(journal, "r1", "tool_claimed", "safe_tool", loop, on_in_flight="tell_model")
    return unsafe, safe, loop


def test_tell_model_outcome_replays_under_raise(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """Once journaled, the outcome is a result: a later resume replays it even with raise."""
    unsafe, safe, _ = _told_then_interrupted(drive, journal, ledger, 4, 1)

    def again(run: redrive.Run) -> Loop:
        assert (yield unsafe(4))["status"] == "not_safely_resumable"
        assert (yield safe(1)) == 2

    run, _ = drive.run(journal, "r1", again)
    assert run.status == "succeeded"
    assert ledger.count("unsafe_tool") == 1


def test_attempts_are_counted_and_limited(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """Each re-execution of an in-flight step is journaled; past max_attempts the run stops."""
    safe = _tools(drive, ledger)["safe_tool"]
    for _ in range(3):
        drive.crash(journal, "r1", "tool_claimed", "safe_tool", one(safe, 1), max_attempts=3)
    notes = [f.data() for f in journal.frames("r1") if f.kind == "note"]
    assert [n["attempt"] for n in notes if n.get("event") == "attempt"] == [2, 3]
    with pytest.raises(redrive.RetryLimitExceededError) as info:
        drive.run(journal, "r1", one(safe, 1), max_attempts=3)
    assert info.value.attempts == 3  # type: ignore[attr-defined]
    assert isinstance(info.value, redrive.SideEffectRetryBlockedError)
    assert ledger.count("safe_tool") == 0
    record = journal.get_run("r1")
    assert record is not None and record.status == "running"


def test_blocked_run_stays_resumable(drive: Drive, journal: MemoryJournal, ledger: Ledger) -> None:
    """A run stopped by SideEffectRetryBlockedError stays running, resumable with tell_model."""
    unsafe = _tools(drive, ledger)["unsafe_tool"]
    drive.crash(journal, "r1", "tool_body_done", "unsafe_tool", one(unsafe, 4))
    with pytest.raises(redrive.SideEffectRetryBlockedError):
        drive.run(journal, "r1", one(unsafe, 4))
    record = journal.get_run("r1")
    assert record is not None and record.status == "running"
    run, value = drive.run(journal, "r1", one(unsafe, 4), on_in_flight="tell_model")
    assert value["status"] == "not_safely_resumable"
    assert run.status == "succeeded"


# -- item 5: run outcomes --------------------------------------------------------------------


def test_retryable_error_leaves_run_running(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """A retryable tool error ends the execution but leaves the run resumable (paused)."""

    @drive.tool(restart_safe=True, retryable=(LookupError,))
    def fetch_page(url: str) -> str:
        ledger.calls.append(("fetch_page", url))
        if ledger.count("fetch_page") == 1:
            raise LookupError("503")
        return "page"

    with pytest.raises(LookupError):
        drive.run(journal, "r1", one(fetch_page, "u"))
    run = drive.last_run
    assert run is not None and run.status == "paused"
    record = journal.get_run("r1")
    assert record is not None and record.status == "paused"
    again, value = drive.run(journal, "r1", one(fetch_page, "u"))
    assert value == "page"
    assert again.status == "succeeded"
    assert ledger.count("fetch_page") == 2


def test_retryable_error_of_unsafe_tool_is_in_flight_on_resume(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """An unsafe tool's retryable error (a timeout) that ended the run is not re-run on resume."""

    @drive.tool(restart_safe=False)
    def charge_card(amount: int) -> str:
        ledger.calls.append(("charge_card", amount))
        raise TimeoutError("gateway timeout")

    with pytest.raises(TimeoutError):
        drive.run(journal, "r1", one(charge_card, 5))
    assert journal.get_run("r1").status == "paused"  # type: ignore[union-attr]
    run, outcome = drive.run(journal, "r1", one(charge_card, 5), on_in_flight="tell_model")
    assert outcome["status"] == "not_safely_resumable"
    assert run.status == "succeeded"
    assert ledger.count("charge_card") == 1


def test_non_retryable_error_marks_run_failed(drive: Drive, journal: MemoryJournal) -> None:
    """A non-retryable tool error that ends the run marks it failed; resuming raises Terminal."""

    @drive.tool(restart_safe=False)
    def charge_card(amount: int) -> str:
        raise ValueError("card declined")

    with pytest.raises(ValueError):
        drive.run(journal, "r1", one(charge_card, 5))
    run = drive.last_run
    assert run is not None and run.status == "failed"
    with pytest.raises(redrive.TerminalRunError, match="failed") as info:
        drive.run(journal, "r1", nothing)
    assert info.value.status == "failed"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="declined"):
        drive.run(journal, "r1", one(charge_card, 5), live=False)


def test_keyboard_interrupt_leaves_run_resumable(journal: MemoryJournal) -> None:
    """KeyboardInterrupt inside a run leaves it running (resumable): nobody asked to cancel it."""
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "r1") as run:
        raise KeyboardInterrupt
    assert run.status == "running"
    assert journal.get_run("r1").status == RunStatus.RUNNING.value  # type: ignore[union-attr]


def test_cancelled_task_leaves_run_resumable(journal: MemoryJournal) -> None:
    """An asyncio task cancelled inside a run leaves the run running (resumable)."""
    started = asyncio.Event()

    async def loop() -> None:
        async with redrive.run(journal, "r1"):
            started.set()
            await asyncio.sleep(3600)

    async def main() -> None:
        task = asyncio.create_task(loop())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert journal.get_run("r1").status == "running"  # type: ignore[union-attr]


def test_unknown_run_with_create_false(drive: Drive, journal: MemoryJournal) -> None:
    """Resuming a run that does not exist with create=False raises UnknownRunError (LookupError)."""
    with pytest.raises(LookupError) as info:
        drive.run(journal, "nope", nothing, create=False)
    assert isinstance(info.value, redrive.UnknownRunError)
    assert info.value.run_id == "nope"


def test_counters(drive: Drive, journal: MemoryJournal, ledger: Ledger) -> None:
    """run.status, replayed_steps and live_steps describe the execution."""
    safe = _tools(drive, ledger)["safe_tool"]

    def loop(run: redrive.Run) -> Loop:
        yield safe(1)
        yield safe(2)
        yield safe(3)

    drive.crash(journal, "r1", "tool_claimed", "safe_tool", loop, occurrence=2)

    def resumed(run: redrive.Run) -> Loop:
        assert run.status == "running" and run.resumed
        yield from loop(run)

    run, _ = drive.run(journal, "r1", resumed)
    assert (run.replayed_steps, run.live_steps, run.status) == (1, 2, "succeeded")
    done, _ = drive.run(journal, "r1", loop)
    assert (done.replayed_steps, done.live_steps, done.status) == (3, 0, "succeeded")
    assert ledger.count("safe_tool") == 3


# -- item 7: resume note ----------------------------------------------------------------------


def test_resume_note_lists_done_failed_and_unknown(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """resume_note() names completed calls with results, failures, and interrupted calls."""
    tools = _tools(drive, ledger)

    @drive.tool(restart_safe=False)
    def refund(order: str) -> None:
        raise ValueError("already refunded")

    def loop(run: redrive.Run) -> Loop:
        yield tools["get_status"](1)
        with contextlib.suppress(ValueError):
            yield refund("ord-9")
        yield tools["unsafe_tool"](7)

    drive.crash(journal, "r1", "tool_body_done", "unsafe_tool", loop)

    def resumed(run: redrive.Run) -> Loop:
        note = run.resume_note()
        yield from loop(run)
        assert run.resume_note() == note
        return note

    _, note = drive.run(journal, "r1", resumed, on_in_flight="tell_model")
    lines = note.splitlines()
    assert lines[0].startswith("Run 'r1' is resuming")
    assert "- get_status(x=1) -> 2" in lines
    assert "- refund(order=ord-9): raised ValueError: already refunded" in lines
    assert (
        "- unsafe_tool(x=7): interrupted while running (idempotency key r1:5:unsafe_tool)" in lines
    )
    assert lines.index("- get_status(x=1) -> 2") < lines.index(
        next(line for line in lines if line.startswith("Outcome unknown"))
    )


def test_resume_note_is_empty_with_nothing_to_say(drive: Drive, journal: MemoryJournal) -> None:
    """A new run, and a resumed run with no tool call, have an empty note."""

    def loop(fail: bool) -> Callable[[redrive.Run], Loop]:
        def body(run: redrive.Run) -> Loop:
            assert run.resume_note() == ""
            redrive.now()  # labelled by this function: the same site on every execution
            if fail:
                raise ConnectionError("transient")
            return None
            yield

        return body

    run, _ = drive.run(journal, "r1", loop(False))
    with pytest.raises(ConnectionError):
        drive.run(journal, "r2", loop(True))
    run2 = drive.last_run
    drive.run(journal, "r2", loop(False))
    assert run.status == "succeeded" and run2 is not None and run2.status == "paused"


def test_resume_note_marks_not_resumed_outcomes(
    drive: Drive, journal: MemoryJournal, ledger: Ledger
) -> None:
    """A call answered with a not-safely-resumable outcome is listed as outcome unknown."""
    _, _, loop = _told_then_interrupted(drive, journal, ledger, 1, 2)

    def resumed(run: redrive.Run) -> Loop:
        note = run.resume_note()
        yield from loop(run)
        return note

    _, note = drive.run(journal, "r1", resumed)
    assert "- unsafe_tool(x=1): interrupted while running, not re-run" in note
    # seq 3 holds the ``resumed`` note of the execution that resumed first
    assert "safe_tool(x=2): interrupted while running (idempotency key r1:4:safe_tool)" in note


# -- the core scenarios, both faces ---------------------------------------------------------


def test_the_drive_uses_its_face(drive: Drive) -> None:
    """The async face really wraps ``async def`` tools and models; the sync face plain ones."""

    @drive.tool(read_only=True)
    def lookup(x: int) -> int:
        return x

    @drive.model
    def ask(prompt: str) -> str:
        return prompt

    assert inspect.iscoroutinefunction(lookup.fn) is (drive.face == "async")
    assert inspect.iscoroutinefunction(ask.fn) is (drive.face == "async")


class Agent:
    """A small agent: a model, a lookup, a side-effecting send, recorded values.

    ``world`` counts every model call and tool body (outside the runs).
    """

    def __init__(self, drive: Drive, ledger: Ledger, *, fail_model: list[BaseException]) -> None:
        self.ledger = ledger

        @drive.model
        def ask(messages: list[dict[str, str]]) -> dict[str, Any]:
            ledger.calls.append(("model", messages[-1]["content"]))
            if fail_model:
                raise fail_model.pop(0)
            return {"text": f"answer {len(messages)}", "n": len(messages)}

        @drive.tool(read_only=True)
        def lookup(customer: str) -> dict[str, str]:
            ledger.calls.append(("lookup", customer))
            return {"customer": customer, "tier": "gold"}

        @drive.tool
        def send_email(to: str, subject: str) -> str:
            ledger.calls.append(("send_email", subject))
            return f"sent:{subject}"

        self.ask, self.lookup, self.send_email = ask, lookup, send_email

    def loop(self, subject: str = "Refund") -> Callable[[redrive.Run], Loop]:
        """The loop: ask, lookup, ask, send, uuid4, now; returns what it got, in order."""

        def body(run: redrive.Run) -> Loop:
            messages = [{"role": "user", "content": "help"}]
            out: list[Any] = []
            first = yield self.ask(messages)
            out.append(first)
            out.append((yield self.lookup("c-42")))
            messages.append({"role": "assistant", "content": first["text"]})
            out.append((yield self.ask(messages)))
            out.append((yield self.send_email("a@example.com", subject)))
            out.append(str(redrive.uuid4()))
            out.append(redrive.now().isoformat())
            return run.finish(out)

        return body


@pytest.fixture
def agent_errors() -> list[BaseException]:
    """Errors the agent's model raises, first to last, before it answers again."""
    return []


@pytest.fixture
def agent(drive: Drive, ledger: Ledger, agent_errors: list[BaseException]) -> Agent:
    """The agent, made for the drive's face."""
    return Agent(drive, ledger, fail_model=agent_errors)


def test_fresh_run_records_every_step(drive: Drive, journal: MemoryJournal, agent: Agent) -> None:
    """A fresh run calls everything once, live, and ends succeeded with its output."""
    run, out = drive.run(journal, "fresh", agent.loop(), input={"q": "help"})
    assert run.status == "succeeded" and not run.resumed
    assert (run.replayed_steps, run.live_steps) == (0, 6)
    assert [n for n, _ in agent.ledger.calls] == ["model", "lookup", "model", "send_email"]
    assert run.output == out and out[3] == "sent:Refund"
    assert kinds(journal, "fresh")[0] == "run_start" and kinds(journal, "fresh")[-1] == "run_end"


def test_replay_of_a_finished_run_makes_no_calls(
    drive: Drive, journal: MemoryJournal, agent: Agent
) -> None:
    """Replaying a finished run (resumed or live=False) calls nothing and returns the record."""
    _, out = drive.run(journal, "done", agent.loop(), input={"q": "help"})
    before = list(agent.ledger.calls)
    again, replayed = drive.run(journal, "done", agent.loop(), input={"q": "help"})
    assert again.finished and again.output == out and replayed == out
    assert (again.replayed_steps, again.live_steps) == (6, 0)
    only, replayed_only = drive.run(journal, "done", agent.loop(), live=False)
    assert replayed_only == out and only.live_steps == 0
    assert agent.ledger.calls == before


@pytest.mark.parametrize("point", ["tool_claimed", "tool_body_done", "tool_recorded"])
def test_resume_after_a_crash_at_the_send(
    drive: Drive, journal: MemoryJournal, agent: Agent, point: str
) -> None:
    """A crash at the unsafe send: in flight (claimed, or body done) it is blocked, never sent
    again; recorded, it is replayed. Nothing finished before is called again."""
    drive.crash(journal, "c", point, "send_email", agent.loop())
    sent_before = agent.ledger.count("send_email")
    assert sent_before == (0 if point == "tool_claimed" else 1)
    agent.ledger.calls.clear()
    if point in ("tool_claimed", "tool_body_done"):  # in flight: outcome unknown
        with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
            drive.run(journal, "c", agent.loop())
        assert info.value.tool == "send_email"  # type: ignore[attr-defined]
        assert agent.ledger.calls == []
        return
    run, out = drive.run(journal, "c", agent.loop())
    assert run.status == "succeeded"
    assert out[3] == "sent:Refund"
    assert agent.ledger.calls == []


def test_resume_after_a_crash_before_the_lookup(
    drive: Drive, journal: MemoryJournal, agent: Agent
) -> None:
    """A crash before a tool body ran: the resume makes exactly the calls not finished."""
    drive.crash(journal, "c", "tool_claimed", "lookup", agent.loop())
    assert [n for n, _ in agent.ledger.calls] == ["model"]
    agent.ledger.calls.clear()
    run, out = drive.run(journal, "c", agent.loop())
    assert [n for n, _ in agent.ledger.calls] == ["lookup", "model", "send_email"]
    assert (run.replayed_steps, run.live_steps, run.status) == (1, 5, "succeeded")
    assert out[1] == {"customer": "c-42", "tier": "gold"}


def test_system_exit_leaves_the_run_resumable(
    drive: Drive, journal: MemoryJournal, agent: Agent
) -> None:
    """SystemExit (a deploy's SIGTERM handler) leaves the run running; the resume finishes it."""

    def deploy(run: redrive.Run) -> Loop:
        yield agent.ask([{"role": "user", "content": "help"}])
        raise SystemExit(0)

    with pytest.raises(SystemExit):
        drive.run(journal, "exit", deploy)
    assert journal.get_run("exit").status == "running"  # type: ignore[union-attr]
    run, _ = drive.run(journal, "exit", agent.loop())
    assert (run.replayed_steps, run.status) == (1, "succeeded")
    assert agent.ledger.count("model") == 2


class APIStatusError(Exception):
    """Looks like an SDK's HTTP status error."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code


class APIConnectionError(Exception):
    """Looks like an SDK's connection error (matched by class name)."""


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (APIStatusError(503), "paused"),
        (APIStatusError(429), "paused"),
        (APIConnectionError("reset"), "paused"),
        (APIStatusError(400), "failed"),
    ],
)
def test_transient_model_errors_leave_the_run_resumable(
    drive: Drive,
    journal: MemoryJournal,
    agent: Agent,
    agent_errors: list[BaseException],
    error: BaseException,
    status: str,
) -> None:
    """A model error with status 429/5xx or a connection error leaves the run resumable;
    the resume calls the model again and replays what finished before."""
    agent_errors.append(error)
    with pytest.raises(type(error)):
        drive.run(journal, "api", agent.loop())
    assert journal.get_run("api").status == status  # type: ignore[union-attr]
    if status == "failed":
        with pytest.raises(redrive.TerminalRunError):
            drive.run(journal, "api", agent.loop())
        return
    run, _ = drive.run(journal, "api", agent.loop())
    assert run.status == "succeeded" and run.live_steps == 6
    assert agent.ledger.count("model") == 3


def test_strict_divergence_names_the_path(
    drive: Drive, journal: MemoryJournal, agent: Agent
) -> None:
    """A drifted tool argument raises DivergenceError with a path-level diff; nothing is sent."""
    drive.run(journal, "div", agent.loop())
    with pytest.raises(redrive.DivergenceError) as info:
        drive.run(journal, "div", agent.loop(subject="Refund request"))
    err = info.value
    assert err.run_id == "div" and err.name == "send_email"  # type: ignore[attr-defined]
    assert err.diff == [("$.subject", "Refund", "Refund request")]  # type: ignore[attr-defined]
    assert "$.subject: 'Refund' -> 'Refund request'" in str(err)
    assert agent.ledger.count("send_email") == 1


def test_lenient_replays_by_content_and_goes_live_for_the_new(
    drive: Drive, journal: MemoryJournal, agent: Agent
) -> None:
    """Lenient: steps that moved are matched by content; a new one goes live and is recorded."""
    p1 = [{"role": "user", "content": "p1"}]
    p2 = [{"role": "user", "content": "p2"}]

    def first(run: redrive.Run) -> Loop:
        yield agent.ask(p1)
        yield agent.lookup("c-1")
        yield agent.ask(p2)
        yield agent.lookup("c-2")
        raise ConnectionError("stop: the run stays resumable")

    with pytest.raises(ConnectionError):
        drive.run(journal, "len", first)
    agent.ledger.calls.clear()

    def reordered(run: redrive.Run) -> Loop:
        yield agent.ask(p2)
        b = yield agent.lookup("c-2")
        yield agent.ask(p1)
        a = yield agent.lookup("c-1")
        c = yield agent.lookup("c-3")
        return [a, b, c]

    with pytest.raises(redrive.DivergenceError):
        drive.run(journal, "len", reordered)
    assert agent.ledger.calls == []
    run, out = drive.run(journal, "len", reordered, replay="lenient")
    assert agent.ledger.calls == [("lookup", "c-3")]
    assert (run.replayed_steps, run.live_steps) == (4, 1)
    assert [o["customer"] for o in out] == ["c-1", "c-2", "c-3"]
