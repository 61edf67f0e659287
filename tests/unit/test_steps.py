"""The read model: iter_steps / StepReader turn a run's frames into recorded steps."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

import redrive
from redrive import JournalCorruptError
from redrive.frames import GENESIS, Frame, Kind, PrefixRef, call_key, make_frame
from redrive.replay import Cursor, ReplayPolicy, StepReader, iter_steps
from redrive.storage import MemoryJournal


class _Frames:
    """Builds a run's frames in seq order, chained."""

    def __init__(self, run_id: str = "r") -> None:
        self.run_id = run_id
        self.prev = GENESIS
        self.seq = 0

    def add(self, kind: Kind, name: str = "", payload: Any = None, key: str = "") -> Frame:
        frame = make_frame(
            run_id=self.run_id,
            seq=self.seq,
            kind=kind,
            name=name,
            key=key,
            payload={} if payload is None else payload,
            prev_chain=self.prev,
            at=1.0,
        )
        self.prev = frame.chain
        self.seq += 1
        return frame


def _recorded() -> MemoryJournal:
    journal = MemoryJournal()

    @redrive.model
    def think(messages: list[str]) -> str:
        return f"reply {len(messages)}"

    @redrive.tool(restart_safe=False)
    def send(body: str) -> str:
        return f"sent {body}"

    with redrive.run(journal, "a") as run:
        messages = ["system", "hello"]
        reply = think(messages)
        messages = [*messages, reply, "more"]
        send(reply)
        redrive.uuid4()
        run.finish(think(messages))
    return journal


def test_steps_of_a_recorded_run() -> None:
    """Every model, tool and value step comes out in seq order with its decoded outcome."""
    journal = _recorded()
    steps = list(iter_steps(journal.frames("a"), "a"))
    assert [(s.kind, s.name) for s in steps] == [
        ("model", "model:think"),
        ("tool", "send"),
        ("value", "uuid4"),
        ("model", "model:think"),
    ]
    assert [s.seq for s in steps] == sorted(s.seq for s in steps)
    assert all(s.status == "done" for s in steps)
    assert steps[1].outcome == steps[1].decode_outcome()
    assert steps[1].decode_outcome()["result"] == "sent reply 2"
    assert steps[3].turn == 1 and steps[0].turn == 0


def test_model_requests_are_resolved_in_full() -> None:
    """A request stored as a prefix delta of the previous one reads back in full."""
    journal = _recorded()
    steps = [s for s in iter_steps(journal.frames("a")) if s.kind == "model"]
    assert isinstance(steps[1].start.data()["args"]["messages"], PrefixRef)
    assert steps[1].args == {"messages": ["system", "hello", "reply 2", "more"]}


def test_statuses_in_flight_error_blocked() -> None:
    """in_flight without an outcome, error for tool_error, blocked for a not-safely-resumable."""
    b = _Frames()
    frames = [
        b.add(Kind.RUN_START, payload={"input": None}),
        b.add(Kind.TOOL_START, "ok", {"args": {}}),
        b.add(Kind.TOOL_START, "bad", {"args": {}}),
        b.add(Kind.TOOL_ERROR, "bad", {"step": 2, "error": {"type": "X", "message": "m"}}),
        b.add(Kind.TOOL_START, "stuck", {"args": {}}),
        b.add(Kind.NOTE, "", {"event": "attempt", "step": 4}),
        b.add(Kind.TOOL_DONE, "stuck", {"step": 4, "result": {"status": "not_safely_resumable"}}),
        b.add(Kind.TOOL_START, "open", {"args": {}}),
    ]
    steps = {s.name: s for s in iter_steps(frames, "r")}
    assert steps["ok"].status == "in_flight" and steps["ok"].outcome is None
    assert steps["bad"].status == "error"
    assert steps["stuck"].status == "blocked"
    assert steps["stuck"].attempts == 2 and steps["stuck"].last_attempt_seq == 5
    assert steps["open"].status == "in_flight"
    with pytest.raises(ValueError, match="in flight"):
        steps["ok"].decode_outcome()


def test_a_gap_is_corrupt() -> None:
    """A missing frame gives JournalCorruptError naming the last good seq."""
    b = _Frames()
    frames = [b.add(Kind.RUN_START), b.add(Kind.VALUE, "v", {"value": 1})]
    b.add(Kind.VALUE, "lost", {"value": 2})
    frames.append(b.add(Kind.VALUE, "w", {"value": 3}))
    with pytest.raises(JournalCorruptError) as info:
        list(iter_steps(frames, "r"))
    assert info.value.last_good_seq == 1 and info.value.seq == 3  # type: ignore[attr-defined]


def test_a_dangling_outcome_is_corrupt() -> None:
    """An outcome for a step that was never opened is corrupt."""
    b = _Frames()
    frames = [b.add(Kind.RUN_START), b.add(Kind.TOOL_DONE, "t", {"step": 7, "result": 1})]
    with pytest.raises(JournalCorruptError, match="opened no step"):
        list(iter_steps(frames, "r"))


def _long_run(turns: int, run_id: str = "long") -> Iterator[Frame]:
    """A run of ``turns`` model steps, built lazily (nothing held but the last chain)."""
    b = _Frames(run_id)
    yield b.add(Kind.RUN_START, payload={"input": None})
    for turn in range(turns):
        args = {"prompt": f"p{turn}", "pad": "x" * 200}
        seq = b.seq
        yield b.add(Kind.MODEL_REQUEST, "m", {"args": args, "turn": turn}, call_key("m", args))
        yield b.add(Kind.MODEL_RESPONSE, "m", {"step": seq, "response": "ok"})


def _peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_a_long_run_takes_bounded_memory() -> None:
    """iter_steps and the strict cursor read a long run holding only a few steps at once."""

    def read(turns: int) -> Any:
        def go() -> None:
            for _ in iter_steps(_long_run(turns), "long"):
                pass

        return go

    def replay(turns: int) -> Any:
        def go() -> None:
            cursor = Cursor("long", _long_run(turns), ReplayPolicy())
            for turn in range(turns):
                args = {"prompt": f"p{turn}", "pad": "x" * 200}
                assert cursor.match("model", "m", args, call_key("m", args)) is not None
            assert cursor.exhausted

        return go

    for make in (read, replay):
        small, large = _peak(make(100)), _peak(make(4_000))
        # holding every step of 4,000 turns would take megabytes more
        assert large < small + 100_000, (make.__name__, small, large)


@redrive.tool(read_only=True)
def _item(n: int) -> str:
    return "r" * 50


def test_a_long_read_after_a_finished_run_takes_bounded_memory() -> None:
    """A finished run's frames do not outlive it: a long read after it stays bounded.

    The collector is off throughout, as when a full pass does not come: a finished
    run that was a reference cycle kept its 4,000 frames, their entries in the
    identity memos with them, and the read's churn resized those memos' tables
    (some 600 KB more at its peak).
    """
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with redrive.run(MemoryJournal(), "finished"):
            for n in range(2_000):
                _item(n)

        def read(turns: int) -> Any:
            return lambda: sum(1 for _ in iter_steps(_long_run(turns), "long"))

        small, large = _peak(read(100)), _peak(read(4_000))
    finally:
        if was:
            gc.enable()
    assert large < small + 100_000, (small, large)


def _attempts(retryable: bool, *then: tuple[Kind, dict[str, Any]]) -> list[Frame]:
    """run_start, a tool step (seq 1) that fails, then ``then`` (frames about step 1...)."""
    b = _Frames()
    error = {"type": "TimeoutError", "message": "slow", "retryable": retryable}
    frames = [
        b.add(Kind.RUN_START, payload={"input": None}),
        b.add(Kind.TOOL_START, "pay", {"args": {}, "idempotency_key": "r:1:pay", "turn": 0}),
        b.add(Kind.TOOL_ERROR, "pay", {"step": 1, "error": error}),
    ]
    frames.extend(b.add(kind, "pay", payload) for kind, payload in then)
    return frames


def test_a_step_s_outcome_is_its_last_attempt_s() -> None:
    """A retryable error, a re-attempt, a result: one step, done, two attempts; a re-attempt
    without an outcome is in flight again."""
    attempt = (Kind.NOTE, {"event": "attempt", "step": 1, "attempt": 2})
    done = (Kind.TOOL_DONE, {"step": 1, "result": 7})
    [step] = iter_steps(_attempts(True, attempt, done), "r")
    assert (step.status, step.attempts, step.last_seq) == ("done", 2, 3)
    assert step.decode_outcome()["result"] == 7 and step.idempotency_key == "r:1:pay"
    [step] = iter_steps(_attempts(True, attempt), "r")
    assert step.status == "in_flight" and step.attempts == 2
    [step] = iter_steps(_attempts(True), "r")
    assert step.status == "error" and step.settled is False  # the frames ran out


def test_a_forgotten_retryable_error_is_updated_in_place() -> None:
    """A consumer that used a retryable error and forgot it sees the later attempt's outcome
    on the same step; once a later turn opens, a late outcome is ignored, not corrupt."""
    frames = _attempts(
        True,
        (Kind.NOTE, {"event": "attempt", "step": 1, "attempt": 2}),
        (Kind.TOOL_DONE, {"step": 1, "result": 7}),
    )
    reader = StepReader("r")
    step = None
    for frame in frames[:3]:
        step = reader.feed(frame) or step
    assert step is not None and step.status == "error"
    reader.forget(1)
    for frame in frames[3:]:
        reader.feed(frame)
    assert step.status == "done" and step.settled
    b = _Frames()
    error = {"type": "TimeoutError", "message": "slow", "retryable": True}
    late = [
        b.add(Kind.RUN_START, payload={"input": None}),
        b.add(Kind.TOOL_START, "pay", {"args": {}, "turn": 0}),
        b.add(Kind.TOOL_ERROR, "pay", {"step": 1, "error": error}),
        b.add(Kind.TOOL_START, "next", {"args": {}, "turn": 1}),
        b.add(Kind.TOOL_DONE, "pay", {"step": 1, "result": 7}),
    ]
    reader = StepReader("r")
    first = reader.feed(late[0]) or reader.feed(late[1])
    reader.feed(late[2])
    reader.forget(1)
    for frame in late[3:]:
        reader.feed(frame)
    assert first is not None and first.status == "error" and first.settled


def test_an_outcome_after_a_settled_forgotten_step_is_corrupt() -> None:
    """Only a retryable error stays open: an outcome after a forgotten permanent error is not
    an attempt of it."""
    frames = _attempts(False, (Kind.TOOL_DONE, {"step": 1, "result": 7}))
    reader = StepReader("r")
    for frame in frames[:3]:
        reader.feed(frame)
    reader.forget(1)
    with pytest.raises(JournalCorruptError, match="opened no step"):
        reader.feed(frames[3])
