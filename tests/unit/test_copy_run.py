"""copy_run, the one run copy, and properties of the read model over random runs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive import AppendConflictError, UnknownRunError
from redrive.replay import Cursor, RecordedStep, ReplayPolicy, iter_steps
from redrive.storage import MemoryJournal, copy_run, verify_frames

#: A loop program: each item is one step ("model", "tool", "value") with an argument.
programs = st.lists(
    st.tuples(st.sampled_from(["model", "tool", "value"]), st.integers(0, 3)),
    min_size=0,
    max_size=8,
)


def _record(program: list[tuple[str, int]], *, finish: bool = True) -> MemoryJournal:
    """Record ``program`` as run "src" in a new memory journal."""
    journal = MemoryJournal()

    @redrive.model
    def think(history: list[int], n: int) -> str:
        return f"thought {n} after {len(history)}"

    @redrive.tool(restart_safe=False)
    def act(n: int) -> dict[str, int]:
        return {"done": n}

    history: list[int] = []
    with redrive.run(journal, "src", input={"p": len(program)}) as run:
        for kind, n in program:
            if kind == "model":
                think(list(history), n)
            elif kind == "tool":
                act(n)
            else:
                redrive.random()
            history.append(n)
        if finish:
            run.finish({"steps": len(program)})
    return journal


def _view(step: RecordedStep) -> tuple[Any, ...]:
    """What a step is, apart from its run id and chain."""
    outcome = step.decode_outcome() if step.end is not None else None
    return (step.seq, step.kind, step.name, step.key, step.args, step.status, outcome)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_iter_steps_yields_what_the_cursor_consumes(program: list[tuple[str, int]]) -> None:
    """For a random run, a strict cursor replaying in order consumes exactly iter_steps' steps."""
    journal = _record(program)
    steps = list(iter_steps(journal.frames("src"), "src"))
    assert [s.kind for s in steps] == [kind for kind, _ in program]
    cursor = Cursor("src", journal.frames("src"), ReplayPolicy())
    consumed = []
    for step in steps:
        found = cursor.match(step.kind, step.name, step.args, step.key)
        assert found is not None
        consumed.append(_view(found))
    assert cursor.exhausted
    assert consumed == [_view(s) for s in steps]
    assert cursor.run_end is not None and cursor.run_end["status"] == "succeeded"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.booleans(), st.data())
def test_copy_run_gives_a_verified_prefix(
    program: list[tuple[str, int]], rename: bool, data: st.DataObject
) -> None:
    """copy_run (whole or a prefix, same id or new) verifies and holds the source's steps."""
    src = _record(program)
    record = src.get_run("src")
    assert record is not None
    upto = data.draw(st.one_of(st.none(), st.integers(1, record.next_seq)), label="upto")
    dst = MemoryJournal()
    new_id = "copy" if rename else None
    copied = copy_run(src, "src", dst, upto=upto, new_id=new_id)
    total = record.next_seq if upto is None else upto
    target = new_id or "src"
    assert copied.run_id == target and copied.next_seq == total
    assert verify_frames(dst.frames(target), source="copy") == total
    want = [_view(s) for s in iter_steps([f for f in src.frames("src") if f.seq < total])]
    assert [_view(s) for s in iter_steps(dst.frames(target), target)] == want
    if upto is None or upto == record.next_seq:
        assert (copied.status, copied.output) == (record.status, record.output)
        if not rename:
            assert copied.last_chain == record.last_chain
    else:
        assert copied.status == "running"
    assert copied.lease_owner is None


def test_copy_into_the_same_journal_needs_a_new_id() -> None:
    """A copy onto itself is a no-op; onto a different run of that id it is refused."""
    src = _record([("tool", 1), ("model", 2)])
    record = src.get_run("src")
    assert copy_run(src, "src", src) == record
    with pytest.raises(AppendConflictError, match="already holds a run"):
        copy_run(src, "src", src, upto=2)
    with pytest.raises(UnknownRunError):
        copy_run(src, "nope", src, new_id="x")


def test_reopen_leaves_out_the_run_end() -> None:
    """reopen=True copies a finished run without its run_end, running and resumable."""
    src = _record([("tool", 1)])
    record = src.get_run("src")
    assert record is not None and record.status == "succeeded"
    copied = copy_run(src, "src", MemoryJournal(), reopen=True, start_extra={"note": "x"})
    assert copied.status == "running" and copied.next_seq == record.next_seq - 1
