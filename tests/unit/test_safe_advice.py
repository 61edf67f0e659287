"""Safe advice for a side effect whose outcome is unknown (issue 23 item 7, DESIGN C5).

``SideEffectRetryBlockedError``, ``RetryLimitExceededError`` and ``redrive
recover``'s blocked line propose ``redrive resolve`` first, then the
``tell_model`` policy; ``restart_safe=True`` comes last and only "if the tool
dedupes on the idempotency key". Each proposed step is taken here, and the
side effect still happens at most once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive import NextStepAction, cli
from redrive.replay import set_boundary_hook
from redrive.storage import Journal, MemoryJournal
from tests.conftest import Drive, DriveCrash, Loop, Step
from tests.unit.test_recover import App


@pytest.fixture
def journal() -> Iterator[MemoryJournal]:
    """A fresh in-memory journal."""
    yield MemoryJournal()


class Tickets:
    """A ticket service that does NOT dedupe: every request that reaches it opens a ticket."""

    def __init__(self, *, effect_before_death: bool = True) -> None:
        self.opened: list[str] = []
        self.die = True
        self.effect_before_death = effect_before_death

    def open(self, subject: str) -> str:
        if self.die:
            if self.effect_before_death:
                self.opened.append(subject)
            raise DriveCrash  # the worker dies in the body
        self.opened.append(subject)
        return f"T-{len(self.opened)}"


def ticket_tool(drive: Drive, tickets: Tickets, **declaration: Any) -> Step:
    def open_ticket(subject: str) -> str:
        return tickets.open(subject)

    return drive.tool(**{"restart_safe": False, **declaration})(open_ticket)


def one_ticket(tool: Step) -> Any:
    def loop(run: redrive.Run) -> Loop:
        return (yield tool("printer"))

    return loop


def _in_flight(drive: Drive, journal: Journal, tool: Step, run_id: str = "t") -> None:
    with pytest.raises(DriveCrash):
        drive.enter_only(journal, run_id, one_ticket(tool))


def _assert_safe_order(steps: tuple[redrive.NextStep, ...], first: NextStepAction) -> None:
    actions = [s.action for s in steps]
    assert actions[0] == first and actions[1] == NextStepAction.POLICY
    assert steps[1].params == {"options": {"on_in_flight": "tell_model"}}
    (safe,) = [s for s in steps if "restart_safe=True" in s.text]
    assert steps.index(safe) == len(steps) - 1  # last, and conditional
    assert "only if" in safe.text and "dedupes on the idempotency key" in safe.text
    assert not any(s.action in (NextStepAction.FORK, NextStepAction.RERECORD) for s in steps)


def test_an_in_flight_block_proposes_resolve_first_and_its_text_is_rendered_from_the_data(
    drive: Drive, journal: MemoryJournal
) -> None:
    """The blocked error's first step is RESOLVE with the seq and both outcomes; the message's
    "What to do" lists the steps' texts in order, `redrive resolve` before restart_safe."""
    tickets = Tickets()
    tool = ticket_tool(drive, tickets)
    _in_flight(drive, journal, tool)
    with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
        drive.run(journal, "t", one_ticket(tool))
    error = info.value
    steps = error.next_steps
    _assert_safe_order(steps, NextStepAction.RESOLVE)
    assert steps[0].params == {"seq": error.seq, "outcomes": ["done", "not_done"]}
    assert f"redrive resolve t {error.seq} --done RESULT_JSON" in steps[0].text
    assert f"redrive resolve t {error.seq} --not-done" in steps[0].text
    message = str(error)
    where = [message.index(s.text) for s in steps]
    assert where == sorted(where) and message.index("redrive resolve") < message.index(
        "restart_safe=True"
    )
    assert any("recover(" in s.text for s in steps)  # a code option, after the policy


@pytest.mark.parametrize("outcome", ["done", "not_done"])
def test_following_resolve_finishes_the_run_with_one_ticket(
    drive: Drive,
    journal: MemoryJournal,
    tmp_path: Path,
    outcome: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Taking the first step as the error gives it (the CLI command), then resuming: one
    ticket either way (done: the body does not run; not done: it runs once)."""
    from redrive.storage.duckdb import DuckDBJournal

    url = str(tmp_path / "runs.duckdb")
    durable = DuckDBJournal(url)
    tickets = Tickets(effect_before_death=outcome == "done")
    tool = ticket_tool(drive, tickets)
    _in_flight(drive, durable, tool)
    with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
        drive.run(durable, "t", one_ticket(tool))
    first = info.value.next_steps[0]
    assert outcome in first.params["outcomes"]
    seq = str(first.params["seq"])
    durable.close()
    # the person looks at the ticket service: T-1 exists (done), or nothing (not done)
    told = ["--done", json.dumps("T-1")] if tickets.opened else ["--not-done"]
    code = cli.main(["--journal", url, "resolve", "t", seq, *told, "--reason", "checked"])
    assert code == 0, capsys.readouterr()
    tickets.die = False
    durable = DuckDBJournal(url)
    try:
        _, value = drive.run(durable, "t", one_ticket(tool))
    finally:
        durable.close()
    assert value == "T-1" and tickets.opened == ["printer"]


def test_following_the_policy_step_runs_nothing(drive: Drive, journal: MemoryJournal) -> None:
    """The second step (tell_model): the loop gets the not-safely-resumable outcome and the
    ticket is not opened again."""
    tickets = Tickets()
    tool = ticket_tool(drive, tickets)
    _in_flight(drive, journal, tool)
    with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
        drive.run(journal, "t", one_ticket(tool))
    options = dict(info.value.next_steps[1].params["options"])
    _, value = drive.run(journal, "t", one_ticket(tool), **options)
    assert value["status"] == "not_safely_resumable" and tickets.opened == ["printer"]


def test_a_blocked_retry_proposes_a_person_not_resolve(
    drive: Drive, journal: MemoryJournal
) -> None:
    """The same call after a failure (the failed step has an outcome: nothing to resolve):
    a person first, naming the commands, then the policy; restart_safe last, conditional."""
    calls: list[str] = []

    def open_ticket(subject: str) -> str:
        calls.append(subject)
        raise TimeoutError("timed out after sending")

    tool = drive.tool(restart_safe=False)(open_ticket)

    def loop(run: redrive.Run) -> Loop:
        for _ in range(2):
            with contextlib.suppress(TimeoutError):
                yield tool("printer")
        return None

    with pytest.raises(redrive.SideEffectRetryBlockedError) as info:
        drive.run(journal, "t", loop)
    steps = info.value.next_steps
    _assert_safe_order(steps, NextStepAction.PERSON)
    assert "redrive show t" in steps[0].params["commands"]
    assert not any("recover(" in s.text for s in steps)  # recover() is not asked for a retry
    assert calls == ["printer"]


def test_the_retry_limit_proposes_resolve_and_no_fork(drive: Drive, journal: MemoryJournal) -> None:
    """A step started max_attempts times: RESOLVE first, a person next; no fork, and no
    higher max_attempts for a tool that is not restart safe."""
    tickets = Tickets()
    tool = ticket_tool(drive, tickets, restart_safe=True)
    for _ in range(3):
        _in_flight(drive, journal, tool)
    with pytest.raises(redrive.RetryLimitExceededError) as info:
        drive.run(journal, "t", one_ticket(tool), max_attempts=3)
    steps = info.value.next_steps
    assert [s.action for s in steps][:2] == [NextStepAction.RESOLVE, NextStepAction.PERSON]
    assert steps[-1].params == {"options": {"max_attempts": 4}}  # restart safe: harmless
    assert "fork" not in str(info.value).lower()
    # not restart safe (its recover() said not done each time): no higher max_attempts
    unsafe = ticket_tool(drive, Tickets(), recover=lambda args, key: redrive.Recovery.not_done())
    for _ in range(3):
        _in_flight(drive, journal, unsafe, "u")
    with pytest.raises(redrive.RetryLimitExceededError) as info:
        drive.run(journal, "u", one_ticket(unsafe), max_attempts=3)
    assert info.value.next_steps[0].action == NextStepAction.RESOLVE
    assert not any(
        "max_attempts" in dict(s.params.get("options", {})) for s in info.value.next_steps
    )


def test_recover_reports_the_blocked_run_with_resolve_first(tmp_path: Path) -> None:
    """`redrive recover`'s blocked result carries the error's next steps (JSON too) and its
    line names `redrive resolve` before restart_safe."""
    app = App(tmp_path)
    module = app.deploy()
    journal = MemoryJournal()

    def die(point: str, info: dict[str, Any]) -> None:
        if point == "tool_claimed" and info["name"] == "refund":
            raise ConnectionError("the worker died with the refund in flight")

    set_boundary_hook(die)
    try:
        with pytest.raises(ConnectionError):
            module.handle.redrive_recover(journal, "refund:A", [], {"order": "A"}, {})
    finally:
        set_boundary_hook(None)
    report = redrive.recover_runs(journal, stale=0, import_paths=[str(app.dir)])
    (result,) = report.results
    assert result.outcome == "blocked" and not report.ok
    assert result.next_steps[0].action == NextStepAction.RESOLVE
    data = result.to_dict()
    assert data["next_steps"][0]["action"] == "resolve"
    assert data["next_steps"][0]["params"]["outcomes"] == ["done", "not_done"]
    assert data["next_steps"][1]["params"] == {"options": {"on_in_flight": "tell_model"}}
    assert result.message.index("redrive resolve") < result.message.index("restart_safe=True")
    assert app.effects() == []


class Stock:
    """A warehouse outside the runs: every reservation that reaches it is kept."""

    def __init__(self) -> None:
        self.reserved: list[str] = []
        self.asked: list[str] = []


def shop(drive: Drive, stock: Stock) -> tuple[Step, Step, Step]:
    """``reserve_stock`` (side effect), ``check_fraud`` (read-only), ``plan`` (a model)."""

    def reserve_stock(order: str) -> str:
        stock.reserved.append(order)
        return f"reserved {order}"

    def check_fraud(order: str) -> bool:
        return False

    def plan(prompt: str) -> str:
        stock.asked.append(prompt)
        return f"plan: {prompt}"

    return (
        drive.tool(restart_safe=False)(reserve_stock),
        drive.tool(read_only=True)(check_fraud),
        drive.model(plan),
    )


def test_a_divergence_before_a_finished_side_effect_proposes_no_fork(
    drive: Drive, journal: MemoryJournal
) -> None:
    """New code inserts check_fraud before a finished reserve_stock: the error proposes a
    person and a resume on the recorded code, never a fork or a new run (either would
    reserve again); taking the RESUME step (the recorded code) finishes with one reservation."""
    stock = Stock()
    reserve, fraud, plan = shop(drive, stock)

    def v1(run: redrive.Run) -> Loop:
        yield reserve("A")
        return (yield plan("ship A"))

    def v2(run: redrive.Run) -> Loop:
        yield fraud("A")
        yield reserve("A")
        return (yield plan("ship A"))

    drive.crash(journal, "t", "model_before", "model:plan", v1)
    with pytest.raises(redrive.DivergenceError) as info:
        drive.run(journal, "t", v2)
    steps = info.value.next_steps
    assert steps[0].action == NextStepAction.PERSON
    assert "redrive what-changed t" in steps[0].params["commands"]
    assert not any(s.action in (NextStepAction.FORK, NextStepAction.RERECORD) for s in steps)
    assert "redrive.fork(" not in str(info.value)
    (resume,) = [s for s in steps if s.action == NextStepAction.RESUME]
    assert resume.params == {"code": "recorded"}
    _, value = drive.run(journal, "t", v1)  # the recorded code finishes the run
    assert value == "plan: ship A" and stock.reserved == ["A"]


def test_a_divergence_after_the_last_side_effect_proposes_a_fork_that_is_safe(
    drive: Drive, journal: MemoryJournal
) -> None:
    """A prompt change after the reservation: a fork before the model step is proposed;
    taking it (the new run on the new code) replays the reservation, it does not repeat."""
    stock = Stock()
    reserve, _, plan = shop(drive, stock)

    def loop(prompt: str) -> Any:
        def run_loop(run: redrive.Run) -> Loop:
            yield reserve("A")
            return (yield plan(prompt))

        return run_loop

    drive.crash(journal, "t", "model_recorded", "model:plan", loop("ship A"))
    with pytest.raises(redrive.DivergenceError) as info:
        drive.run(journal, "t", loop("ship A now"))
    steps = info.value.next_steps
    assert steps[0].action == NextStepAction.FORK
    assert [s.action for s in steps[1:]] == [NextStepAction.POLICY, NextStepAction.RESUME]
    redrive.fork(journal, "t", steps[0].params["before"], "t2")
    _, value = drive.run(journal, "t2", loop("ship A now"))
    assert value == "plan: ship A now" and stock.reserved == ["A"]


def test_an_ended_run_is_not_advised_to_start_again(journal: MemoryJournal) -> None:
    """A failed run opened again: replay read-only, or fork after the last side effect;
    no "start a new run_id", which would repeat every side effect the run made."""
    with pytest.raises(KeyError), redrive.run(journal, "t"):
        raise KeyError("a bug ends the run")
    with pytest.raises(redrive.TerminalRunError) as info, redrive.run(journal, "t"):
        pass
    message = str(info.value)
    assert "new run_id" not in message
    assert "after its last side-effecting tool step" in message
