"""Fork and time travel (issue 4, item 9): redrive.fork and redrive.diff_runs."""

from __future__ import annotations

from typing import Any

import pytest

import redrive
from redrive.storage import MemoryJournal, verify_frames


def _agent(ledger: list[str], temperature: float) -> Any:
    """Return a loop of two model and two tool steps; ``temperature`` is for the second model."""

    @redrive.model
    def think(prompt: str, temperature: float) -> str:
        ledger.append(f"model:{prompt}")
        return f"plan for {prompt} at {temperature}"

    @redrive.tool(restart_safe=False)
    def send_email(body: str) -> str:
        ledger.append(f"email:{body}")
        return "sent"

    def loop() -> str:
        plan = think("ticket 1", 0.0)
        send_email(plan)
        plan2 = think("ticket 2", temperature)
        return str(send_email(plan2))

    return loop


@pytest.fixture
def recorded() -> tuple[MemoryJournal, list[str]]:
    """A journal with a finished run "a" of two model and two tool steps."""
    journal = MemoryJournal()
    ledger: list[str] = []
    with redrive.run(journal, "a", input={"t": 1}) as run:
        run.finish(_agent(ledger, 0.0)())
    return journal, ledger


def _step_seqs(journal: MemoryJournal, run_id: str) -> list[tuple[int, str, str]]:
    return [(f.seq, f.kind, f.name) for f in journal.frames(run_id)]


def test_fork_replays_prefix_then_goes_live(recorded: tuple[MemoryJournal, list[str]]) -> None:
    """A fork at a step replays the steps before it and runs the rest live, recorded."""
    journal, ledger = recorded
    seqs = _step_seqs(journal, "a")
    second_model = [s for s, kind, _ in seqs if kind == "model_request"][1]
    record = redrive.fork(journal, "a", second_model, "b")
    assert record.status == "running" and record.next_seq == second_model
    start = next(iter(journal.frames("b"))).data()
    assert start["forked_from"] == {"run_id": "a", "at_seq": second_model}
    assert verify_frames(journal.frames("b"), source="test") == second_model
    ledger.clear()
    with redrive.run(journal, "b", input={"t": 1}) as run:
        run.finish(_agent(ledger, 0.7)())
    assert ledger == ["model:ticket 2", "email:plan for ticket 2 at 0.7"]
    assert run.replayed_steps == 2 and run.live_steps == 2
    original = journal.get_run("a")
    assert original is not None and original.status == "succeeded"
    assert original.output_value() == "sent" and original.next_seq > second_model


def test_fork_refuses_a_cut_inside_a_step(recorded: tuple[MemoryJournal, list[str]]) -> None:
    """A fork seq between a step's start and its outcome is refused, naming the boundaries;
    the one before a side-effecting tool step only with the warning that the new run would
    call it again (issue 23 item 7: advice never repeats a side effect unannounced)."""
    journal, _ = recorded
    seqs = _step_seqs(journal, "a")
    tool_start = next(s for s, kind, _ in seqs if kind == "tool_start")
    after = next(s for s, kind, _ in seqs if s > tool_start and kind != "tool_start") + 1
    with pytest.raises(ValueError, match=f"Fork at seq {after} ") as info:
        redrive.fork(journal, "a", tool_start + 1, "b")
    assert f"A fork at seq {tool_start}, before it, would make the new run call" in str(info.value)
    assert journal.get_run("b") is None


def test_fork_errors(recorded: tuple[MemoryJournal, list[str]]) -> None:
    """Unknown source runs, seqs out of range and existing targets are refused."""
    journal, _ = recorded
    with pytest.raises(redrive.UnknownRunError):
        redrive.fork(journal, "zzz", 1, "b")
    with pytest.raises(ValueError, match="from 1 to"):
        redrive.fork(journal, "a", 0, "b")
    with pytest.raises(ValueError, match="already exists"):
        redrive.fork(journal, "a", 1, "a")


def test_fork_of_whole_run_drops_run_end(recorded: tuple[MemoryJournal, list[str]]) -> None:
    """Forking at the end copies every step but not run_end, so the fork can continue."""
    journal, ledger = recorded
    end = journal.get_run("a").next_seq  # type: ignore[union-attr]
    redrive.fork(journal, "a", end, "b")
    assert [k for _, k, _ in _step_seqs(journal, "b")][-1] == "tool_done"
    ledger.clear()
    with redrive.run(journal, "b") as run:
        _agent(ledger, 0.0)()
    assert ledger == [] and run.status == "succeeded"


def test_diff_runs_reports_first_differing_step(recorded: tuple[MemoryJournal, list[str]]) -> None:
    """diff_runs names the first step that differs, with the path-level difference."""
    journal, ledger = recorded
    second_model = [s for s, kind, _ in _step_seqs(journal, "a") if kind == "model_request"][1]
    redrive.fork(journal, "a", second_model, "b")
    with redrive.run(journal, "b") as run:
        run.finish(_agent(ledger, 0.7)())
    diff = redrive.diff_runs("a", "b", journal=journal)
    assert diff is not None
    assert (diff.index, diff.what) == (2, "args")
    assert diff.step_a is not None and diff.step_a.name.endswith("think")
    assert diff.diff == [("$.args.temperature", 0.0, 0.7)]
    assert f"differ at seq {diff.step_a.seq} (step 3; args)" in str(diff)  # as the CLI says
    assert redrive.diff_runs("a", "a", journal=journal) is None


def test_diff_runs_outcome_and_missing_steps() -> None:
    """Same calls with other results differ by outcome; a shorter run differs by a missing step."""
    journal = MemoryJournal()
    answers = {"x": "one", "y": "two"}

    for run_id in ("x", "y"):

        @redrive.tool(restart_safe=True)
        def lookup(q: str) -> str:
            return answers[run_id]  # noqa: B023 - called inside this iteration

        with redrive.run(journal, run_id):
            lookup("q")
    with redrive.run(journal, "z"):
        pass
    outcome = redrive.diff_runs("x", "y", journal=journal)
    assert outcome is not None and outcome.what == "outcome"
    assert outcome.diff == [("$.outcome.result", "one", "two")]
    missing = redrive.diff_runs("x", "z", journal=journal)
    assert missing is not None and (missing.index, missing.what) == (0, "missing")
    assert missing.step_b is None
    with pytest.raises(redrive.UnknownRunError):
        redrive.diff_runs("x", "nope", journal=journal)
