"""The durable-resume contract (issue 4): restart safety, idempotency keys, recover(),
in-flight outcomes, attempts and run outcomes.

Crashes are simulated in-process here: a boundary hook raises a BaseException
and the run is abandoned without its exit (as a SIGKILL would leave it). The
same contract is proven with real killed processes in tests/crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import redrive
from redrive.recorders.tools import guess_restart_safe
from redrive.replay import set_boundary_hook
from redrive.storage import MemoryJournal, RunStatus


class _Crash(BaseException):
    """Stands for a SIGKILL at a step boundary."""


def crash_at(
    journal: MemoryJournal,
    run_id: str,
    point: str,
    tool_name: str,
    loop: Callable[[], Any],
    *,
    occurrence: int = 1,
    **options: Any,
) -> None:
    """Run ``loop`` in a run and abandon it, unexited, when ``tool_name`` reaches ``point``.

    ``occurrence`` picks which time the tool reaches the point (1: the first).
    """
    seen = [0]

    def hook(boundary: str, info: dict[str, Any]) -> None:
        if boundary == point and info["name"] == tool_name:
            seen[0] += 1
            if seen[0] == occurrence:
                raise _Crash

    def go() -> None:
        run = redrive.run(journal, run_id, **options)
        run.__enter__()
        set_boundary_hook(hook)
        try:
            loop()
        except _Crash:
            return
        finally:
            set_boundary_hook(None)
        raise AssertionError(f"the loop never reached {point} of {tool_name}")

    contextvars.copy_context().run(go)


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


def test_declarations_reach_the_spec() -> None:
    """restart_safe, read_only and the heuristic end up in the tool's spec."""

    @redrive.tool
    def delete_account(user: str) -> None: ...

    @redrive.tool
    def get_user(user: str) -> None: ...

    @redrive.tool(read_only=True)
    def charge_preview(amount: int) -> None: ...

    @redrive.tool(restart_safe=False)
    def get_token() -> None: ...

    assert not delete_account.redrive_tool.restart_safe  # type: ignore[attr-defined]
    assert not delete_account.redrive_tool.declared  # type: ignore[attr-defined]
    assert get_user.redrive_tool.restart_safe  # type: ignore[attr-defined]
    assert charge_preview.redrive_tool.restart_safe  # type: ignore[attr-defined]
    assert not get_token.redrive_tool.restart_safe  # type: ignore[attr-defined]


@pytest.mark.parametrize("declared_retryable", [False, True])
def test_unsafe_tool_runs_once_inside_a_retry_loop(
    journal: MemoryJournal, ledger: Ledger, declared_retryable: bool
) -> None:
    """A restart_safe=False tool failing with a transient error is not re-run by a retry loop."""
    retryable: tuple[type[BaseException], ...] = (ConnectionError,) if declared_retryable else ()

    @redrive.tool(restart_safe=False, retryable=retryable)
    def charge_card(amount: int) -> str:
        ledger.calls.append(("charge_card", amount))
        raise ConnectionError("reset by peer")

    seen: list[type[BaseException]] = []
    with pytest.raises(redrive.SideEffectRetryBlockedError) as info, redrive.run(journal, "r1"):
        for _ in range(3):
            try:
                charge_card(5)
            except ConnectionError as exc:
                seen.append(type(exc))
    assert ledger.count("charge_card") == 1
    assert seen == [ConnectionError]
    assert info.value.tool == "charge_card"  # type: ignore[attr-defined]


def test_safe_tool_is_retried_inside_a_retry_loop(journal: MemoryJournal, ledger: Ledger) -> None:
    """A restart_safe=True tool may run again after a transient error (the control case)."""

    @redrive.tool(restart_safe=True)
    def send_email(to: str, idempotency_key: str) -> str:
        ledger.calls.append(("send_email", idempotency_key))
        if ledger.count("send_email") < 3:
            raise ConnectionError("reset")
        return "sent"

    with redrive.run(journal, "r1") as run:
        for _ in range(3):
            try:
                result = send_email("a@example.com")
                break
            except ConnectionError:
                continue
        run.finish(result)
    assert ledger.count("send_email") == 3
    assert run.status == "succeeded"


# -- in-flight behaviour per declaration ---------------------------------------------------


def _tools(ledger: Ledger) -> dict[str, Any]:
    @redrive.tool(restart_safe=True)
    def safe_tool(x: int) -> int:
        ledger.calls.append(("safe_tool", x))
        return x * 2

    @redrive.tool(restart_safe=False)
    def unsafe_tool(x: int) -> int:
        ledger.calls.append(("unsafe_tool", x))
        return x * 2

    @redrive.tool
    def delete_account(x: int) -> int:
        ledger.calls.append(("delete_account", x))
        return x * 2

    @redrive.tool
    def get_status(x: int) -> int:
        ledger.calls.append(("get_status", x))
        return x * 2

    @redrive.tool(read_only=True, restart_safe=False)
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
    journal: MemoryJournal, ledger: Ledger, name: str, reruns: bool
) -> None:
    """An in-flight tool re-runs on resume only if restart safe, read-only or named safe."""
    fn = _tools(ledger)[name]
    crash_at(journal, "r1", "tool_body_done", name, lambda: fn(3))
    assert ledger.count(name) == 1
    with redrive.run(journal, "r1") as run:
        if reruns:
            assert fn(3) == 6
        else:
            with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
                fn(3)
            assert info.value.seq == 1
            assert info.value.idempotency_key == f"r1:1:{name}"  # type: ignore[attr-defined]
            assert info.value.arguments == {"x": 3}  # type: ignore[attr-defined]
            run.finish(None)
    assert ledger.count(name) == (2 if reruns else 1)


@pytest.mark.parametrize("name", ["safe_tool", "unsafe_tool", "delete_account"])
def test_completed_tool_never_reruns(journal: MemoryJournal, ledger: Ledger, name: str) -> None:
    """A tool whose outcome is journaled returns it on resume, whatever its declaration."""
    tools = _tools(ledger)
    fn = tools[name]

    def loop() -> None:
        fn(1)
        tools["get_status"](99)

    crash_at(journal, "r1", "tool_claimed", "get_status", loop)
    with redrive.run(journal, "r1") as run:
        assert fn(1) == 2
        tools["get_status"](99)
    assert ledger.count(name) == 1
    assert run.replayed_steps == 1 and run.live_steps == 1


def test_failed_unsafe_tool_replays_its_error(journal: MemoryJournal, ledger: Ledger) -> None:
    """A recorded non-retryable tool error is raised again on resume without running the body."""

    @redrive.tool(restart_safe=False)
    def charge_card(amount: int) -> int:
        ledger.calls.append(("charge_card", amount))
        raise ValueError("card declined")

    def loop() -> None:
        with contextlib.suppress(ValueError):
            charge_card(5)
        get_status(1)

    @redrive.tool
    def get_status(x: int) -> int:
        return x

    crash_at(journal, "r1", "tool_claimed", "get_status", loop)
    with redrive.run(journal, "r1"):
        with pytest.raises(ValueError, match="card declined"):
            charge_card(5)
        get_status(1)
    assert ledger.count("charge_card") == 1


# -- item 2: idempotency keys -------------------------------------------------------------


def test_idempotency_key_is_stable_across_resume(journal: MemoryJournal) -> None:
    """The injected key and redrive.idempotency_key() are "{run_id}:{seq}:{tool}" on every try."""
    keys: list[tuple[str, str | None]] = []

    @redrive.tool(restart_safe=True)
    def pay(amount: int, idempotency_key: str) -> str:
        keys.append((idempotency_key, redrive.idempotency_key()))
        return idempotency_key

    crash_at(journal, "job:7", "tool_body_done", "pay", lambda: pay(10))
    with redrive.run(journal, "job:7"):
        assert pay(10) == "job:7:1:pay"
    assert keys == [("job:7:1:pay", "job:7:1:pay")] * 2
    start = next(f for f in journal.frames("job:7") if f.kind == "tool_start")
    assert "idempotency_key" not in start.data()["args"]


def test_idempotency_key_is_none_outside_a_tool_body(journal: MemoryJournal) -> None:
    """Outside a run, and inside a run but outside a tool body, there is no key."""

    @redrive.tool(restart_safe=True)
    def pay(idempotency_key: str | None = None) -> str | None:
        return idempotency_key

    assert redrive.idempotency_key() is None
    assert pay() is None
    with redrive.run(journal, "r1"):
        assert redrive.idempotency_key() is None
        assert pay() == "r1:1:pay"
        assert redrive.idempotency_key() is None


def test_idempotency_key_is_not_matched(journal: MemoryJournal) -> None:
    """An explicit idempotency_key argument is not part of the arguments matched on replay."""

    @redrive.tool(restart_safe=True)
    def pay(amount: int, idempotency_key: str | None = None) -> int:
        return amount

    with redrive.run(journal, "r1") as run:
        pay(1, idempotency_key="caller-chosen")
        run.finish(None)
    with redrive.run(journal, "r1") as again:
        assert pay(1) == 1
    assert again.replayed_steps == 1


# -- item 3: recover() ----------------------------------------------------------------------


def _recovering(ledger: Ledger, answer: Callable[[dict[str, Any], str], redrive.Recovery]) -> Any:
    @redrive.tool(restart_safe=False, recover=answer)
    def charge_card(amount: int) -> dict[str, Any]:
        ledger.calls.append(("charge_card", amount))
        return {"charged": amount}

    return charge_card


def test_recover_done_journals_the_result(journal: MemoryJournal, ledger: Ledger) -> None:
    """recover() -> done: its result is journaled and returned; the body does not run again."""
    asked: list[tuple[dict[str, Any], str]] = []

    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        asked.append((args, key))
        return redrive.Recovery.done({"charged": args["amount"], "recovered": True})

    charge_card = _recovering(ledger, recover)
    crash_at(journal, "r1", "tool_body_done", "charge_card", lambda: charge_card(5))
    with redrive.run(journal, "r1") as run:
        assert charge_card(5) == {"charged": 5, "recovered": True}
        run.finish(None)
    assert asked == [({"amount": 5}, "r1:1:charge_card")]
    assert ledger.count("charge_card") == 1
    with redrive.run(journal, "r1", live=False):
        assert charge_card(5) == {"charged": 5, "recovered": True}
    assert len(asked) == 1


def test_recover_not_done_runs_the_body(journal: MemoryJournal, ledger: Ledger) -> None:
    """recover() -> not_done: the body runs now, once."""
    charge_card = _recovering(ledger, lambda args, key: redrive.Recovery.not_done())
    crash_at(journal, "r1", "tool_claimed", "charge_card", lambda: charge_card(5))
    assert ledger.count("charge_card") == 0
    with redrive.run(journal, "r1"):
        assert charge_card(5) == {"charged": 5}
    assert ledger.count("charge_card") == 1


def test_recover_unknown_blocks(journal: MemoryJournal, ledger: Ledger) -> None:
    """recover() -> unknown blocks the step with the reason given."""
    charge_card = _recovering(
        ledger, lambda args, key: redrive.Recovery.unknown("gateway has no record yet")
    )
    crash_at(journal, "r1", "tool_body_done", "charge_card", lambda: charge_card(5))
    with (
        pytest.raises(redrive.SideEffectRetryBlockedError, match="gateway has no record yet"),
        redrive.run(journal, "r1"),
    ):
        charge_card(5)
    assert ledger.count("charge_card") == 1


def test_recover_that_raises_blocks_with_cause(journal: MemoryJournal, ledger: Ledger) -> None:
    """A recover() that raises blocks the step, with the exception attached as the cause."""

    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        raise TimeoutError("ETIMEDOUT")

    charge_card = _recovering(ledger, recover)
    crash_at(journal, "r1", "tool_body_done", "charge_card", lambda: charge_card(5))
    with (
        pytest.raises(redrive.SideEffectRetryBlockedError, match="ETIMEDOUT") as info,
        redrive.run(journal, "r1"),
    ):
        charge_card(5)
    assert isinstance(info.value.__cause__, TimeoutError)
    assert ledger.count("charge_card") == 1


def test_recover_must_return_a_recovery(journal: MemoryJournal, ledger: Ledger) -> None:
    """A recover() returning something else is a TypeError naming the tool."""
    charge_card = _recovering(ledger, lambda args, key: True)  # type: ignore[arg-type,return-value]
    crash_at(journal, "r1", "tool_body_done", "charge_card", lambda: charge_card(5))
    with pytest.raises(TypeError, match="charge_card"), redrive.run(journal, "r1"):
        charge_card(5)


# -- item 4: what the model sees, attempts ------------------------------------------------------


def test_tell_model_journals_a_typed_outcome(journal: MemoryJournal, ledger: Ledger) -> None:
    """on_in_flight="tell_model" returns a not-safely-resumable dict, journaled as tool_done."""
    unsafe = _tools(ledger)["unsafe_tool"]
    crash_at(journal, "r1", "tool_body_done", "unsafe_tool", lambda: unsafe(4))
    with redrive.run(journal, "r1", on_in_flight="tell_model") as run:
        outcome = unsafe(4)
        run.finish(outcome)
    assert outcome["status"] == "not_safely_resumable"
    assert outcome["tool"] == "unsafe_tool"
    assert outcome["arguments"] == {"x": 4}
    assert outcome["rerun"] is False
    assert outcome["idempotency_key"] == "r1:1:unsafe_tool"
    assert "duplicate side effect" in outcome["reason"]
    assert "reconcile" in outcome
    assert ledger.count("unsafe_tool") == 1
    assert kinds(journal, "r1")[-2:] == ["tool_done", "run_end"]
    with redrive.run(journal, "r1", live=False):
        assert unsafe(4) == outcome


def test_tell_model_outcome_replays_under_raise(journal: MemoryJournal, ledger: Ledger) -> None:
    """Once journaled, the outcome is a result: a later resume replays it even with raise."""
    unsafe = _tools(ledger)["unsafe_tool"]
    safe = _tools(ledger)["safe_tool"]

    def loop() -> None:
        unsafe(4)
        safe(1)

    crash_at(journal, "r1", "tool_body_done", "unsafe_tool", loop)
    crash_at(journal, "r1", "tool_claimed", "safe_tool", loop, on_in_flight="tell_model")
    with redrive.run(journal, "r1") as run:
        assert unsafe(4)["status"] == "not_safely_resumable"
        assert safe(1) == 2
    assert run.status == "succeeded"
    assert ledger.count("unsafe_tool") == 1


def test_attempts_are_counted_and_limited(journal: MemoryJournal, ledger: Ledger) -> None:
    """Each re-execution of an in-flight step is journaled; past max_attempts the run stops."""
    safe = _tools(ledger)["safe_tool"]
    for _ in range(3):
        crash_at(journal, "r1", "tool_claimed", "safe_tool", lambda: safe(1), max_attempts=3)
    notes = [f.data() for f in journal.frames("r1") if f.kind == "note"]
    assert [n["attempt"] for n in notes if n.get("event") == "attempt"] == [2, 3]
    with (
        pytest.raises(redrive.RetryLimitExceededError) as info,
        redrive.run(journal, "r1", max_attempts=3),
    ):
        safe(1)
    assert info.value.attempts == 3  # type: ignore[attr-defined]
    assert isinstance(info.value, redrive.SideEffectRetryBlockedError)
    assert ledger.count("safe_tool") == 0
    record = journal.get_run("r1")
    assert record is not None and record.status == "running"


def test_blocked_run_stays_resumable(journal: MemoryJournal, ledger: Ledger) -> None:
    """A run stopped by SideEffectRetryBlockedError stays running, resumable with tell_model."""
    unsafe = _tools(ledger)["unsafe_tool"]
    crash_at(journal, "r1", "tool_body_done", "unsafe_tool", lambda: unsafe(4))
    with pytest.raises(redrive.SideEffectRetryBlockedError), redrive.run(journal, "r1"):
        unsafe(4)
    record = journal.get_run("r1")
    assert record is not None and record.status == "running"
    with redrive.run(journal, "r1", on_in_flight="tell_model") as run:
        assert unsafe(4)["status"] == "not_safely_resumable"
    assert run.status == "succeeded"


# -- item 5: run outcomes --------------------------------------------------------------------


def test_retryable_error_leaves_run_running(journal: MemoryJournal, ledger: Ledger) -> None:
    """A retryable tool error ends the execution but leaves the run resumable."""

    @redrive.tool(restart_safe=True, retryable=(LookupError,))
    def fetch_page(url: str) -> str:
        ledger.calls.append(("fetch_page", url))
        if ledger.count("fetch_page") == 1:
            raise LookupError("503")
        return "page"

    with pytest.raises(LookupError), redrive.run(journal, "r1") as run:
        fetch_page("u")
    assert run.status == "running"
    record = journal.get_run("r1")
    assert record is not None and record.status == "running"
    with redrive.run(journal, "r1") as again:
        assert fetch_page("u") == "page"
    assert again.status == "succeeded"
    assert ledger.count("fetch_page") == 2


def test_retryable_error_of_unsafe_tool_is_in_flight_on_resume(
    journal: MemoryJournal, ledger: Ledger
) -> None:
    """An unsafe tool's retryable error (a timeout) that ended the run is not re-run on resume."""

    @redrive.tool(restart_safe=False)
    def charge_card(amount: int) -> str:
        ledger.calls.append(("charge_card", amount))
        raise TimeoutError("gateway timeout")

    with pytest.raises(TimeoutError), redrive.run(journal, "r1"):
        charge_card(5)
    assert journal.get_run("r1").status == "running"  # type: ignore[union-attr]
    with redrive.run(journal, "r1", on_in_flight="tell_model") as run:
        outcome = charge_card(5)
    assert outcome["status"] == "not_safely_resumable"
    assert run.status == "succeeded"
    assert ledger.count("charge_card") == 1


def test_non_retryable_error_marks_run_failed(journal: MemoryJournal) -> None:
    """A non-retryable tool error that ends the run marks it failed; resuming raises Terminal."""

    @redrive.tool(restart_safe=False)
    def charge_card(amount: int) -> str:
        raise ValueError("card declined")

    with pytest.raises(ValueError), redrive.run(journal, "r1") as run:
        charge_card(5)
    assert run.status == "failed"
    with (
        pytest.raises(redrive.TerminalRunError, match="failed") as info,
        redrive.run(journal, "r1"),
    ):
        pass
    assert info.value.status == "failed"  # type: ignore[attr-defined]
    with redrive.run(journal, "r1", live=False), pytest.raises(ValueError, match="declined"):
        charge_card(5)


def test_keyboard_interrupt_marks_run_cancelled(journal: MemoryJournal) -> None:
    """KeyboardInterrupt inside a run marks it cancelled."""
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "r1") as run:
        raise KeyboardInterrupt
    assert run.status == "cancelled"
    assert journal.get_run("r1").status == RunStatus.CANCELLED.value  # type: ignore[union-attr]


def test_cancelled_task_marks_run_cancelled(journal: MemoryJournal) -> None:
    """An asyncio task cancelled inside a run marks the run cancelled."""
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
    assert journal.get_run("r1").status == "cancelled"  # type: ignore[union-attr]


def test_unknown_run_with_create_false(journal: MemoryJournal) -> None:
    """Resuming a run that does not exist with create=False raises UnknownRunError (LookupError)."""
    with pytest.raises(LookupError) as info, redrive.run(journal, "nope", create=False):
        pass
    assert isinstance(info.value, redrive.UnknownRunError)
    assert info.value.run_id == "nope"


def test_counters(journal: MemoryJournal, ledger: Ledger) -> None:
    """run.status, replayed_steps and live_steps describe the execution."""
    safe = _tools(ledger)["safe_tool"]

    def loop() -> None:
        safe(1)
        safe(2)
        safe(3)

    crash_at(journal, "r1", "tool_claimed", "safe_tool", loop, occurrence=2)
    with redrive.run(journal, "r1") as run:
        assert run.status == "running" and run.resumed
        loop()
    assert (run.replayed_steps, run.live_steps, run.status) == (1, 2, "succeeded")
    with redrive.run(journal, "r1") as done:
        loop()
    assert (done.replayed_steps, done.live_steps, done.status) == (3, 0, "succeeded")
    assert ledger.count("safe_tool") == 3


# -- item 7: resume note ----------------------------------------------------------------------


def test_resume_note_lists_done_failed_and_unknown(journal: MemoryJournal, ledger: Ledger) -> None:
    """resume_note() names completed calls with results, failures, and interrupted calls."""
    tools = _tools(ledger)

    @redrive.tool(restart_safe=False)
    def refund(order: str) -> None:
        raise ValueError("already refunded")

    def loop() -> None:
        tools["get_status"](1)
        with contextlib.suppress(ValueError):
            refund("ord-9")
        tools["unsafe_tool"](7)

    crash_at(journal, "r1", "tool_body_done", "unsafe_tool", loop)
    with redrive.run(journal, "r1", on_in_flight="tell_model") as run:
        note = run.resume_note()
        loop()
        assert run.resume_note() == note
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


def test_resume_note_is_empty_with_nothing_to_say(journal: MemoryJournal, ledger: Ledger) -> None:
    """A new run, and a resumed run with no tool call, have an empty note."""
    with redrive.run(journal, "r1") as run:
        assert run.resume_note() == ""
        redrive.now()
        raise_later = ConnectionError
    with pytest.raises(ConnectionError), redrive.run(journal, "r2") as run2:
        redrive.now()
        raise raise_later("transient")
    with redrive.run(journal, "r2") as again:
        assert again.resume_note() == ""
        redrive.now()
    assert run.status == "succeeded" and run2.status == "running"


def test_resume_note_marks_not_resumed_outcomes(journal: MemoryJournal, ledger: Ledger) -> None:
    """A call answered with a not-safely-resumable outcome is listed as outcome unknown."""
    unsafe = _tools(ledger)["unsafe_tool"]
    safe = _tools(ledger)["safe_tool"]

    def loop() -> None:
        unsafe(1)
        safe(2)

    crash_at(journal, "r1", "tool_body_done", "unsafe_tool", loop)
    crash_at(journal, "r1", "tool_claimed", "safe_tool", loop, on_in_flight="tell_model")
    with redrive.run(journal, "r1") as run:
        note = run.resume_note()
        loop()
    assert "- unsafe_tool(x=1): interrupted while running, not re-run" in note
    assert "safe_tool(x=2): interrupted while running (idempotency key r1:3:safe_tool)" in note
