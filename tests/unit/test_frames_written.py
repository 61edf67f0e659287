"""Every frame the engine writes is one the journal takes: a property over loop shapes.

The journal checks each frame before it acknowledges a write
(``storage/_validate.py``); a frame it refuses fails the write with
``JournalWriteError``. The engine writes many frames after the fact it records
(a model response after the paid call, a tool result after the body, a note
queued before them), so a frame built wrong is a call made and paid for that the
run cannot record. Found so: under ``on_drift="continue_live"`` a model step the
new code inserted where no model record of its turn was left wrote a ``reasked``
note with ``step: None``, refused after both model calls were made.

Hypothesis draws agent programs (``tests/model/scenarios.py``: model steps,
side-effecting and read-only tools, values, approvals, parallel batches), a cut of
the first attempt, a code change and any replay policy (every CONTRACT rule's shape,
on or off in the differential test), on both faces; the real library runs them
(``tests/model/driver.py``) on a journal that checks a fresh copy of every frame in
full (:class:`tests.model.checked.CheckedJournal`). No frame is refused, and no
attempt ends in ``JournalWriteError``.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import redrive
from tests.conftest import examples
from tests.model import driver
from tests.model import resume_model as m
from tests.model.checked import CheckedJournal
from tests.model.harness import POLICIES
from tests.model.scenarios import CHANGES, _call, change, programs

P, Q, R = m.Call("model", "chat", "p"), m.Call("model", "chat", "q"), m.Call("model", "chat", "r")
A, E = m.Call("read", "lookup", "a"), m.Call("effect", "send", "a")


@pytest.fixture(autouse=True, scope="module")
def _quick() -> Iterator[None]:
    """The session's heap frozen (the driver's ``gc.collect()`` after each attempt skips
    it, as in test_differential.py); a caller waits 0.1 s (not 2 s) for a sibling flow
    before it calls its drift a divergence: only how soon such a caller gives up changes,
    not which frames it writes."""
    gc.collect()
    gc.freeze()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("redrive.replay._matcher._SIBLING_WAIT", 0.1)
            yield
    finally:
        gc.unfreeze()


@st.composite
def shapes(draw: Any) -> dict[str, Any]:
    """A program, a cut of its first attempt, a code change, any policy, a face."""
    program = draw(programs())
    retries = any(call.retry_signal for _c, _f, call in m.callers(program))
    policy = draw(st.sampled_from([p for p in POLICIES if p != "live_tools" or not retries]))
    crashable = [
        (caller, call)
        for caller, flow, call in m.callers(program)
        if flow == "m" and call.kind in ("model", "effect", "read") and not call.retry_signal
    ]
    crash = None
    if crashable and draw(st.integers(0, 3)) != 0:
        caller, call = draw(st.sampled_from(crashable))
        bounds = m.MODEL_BOUNDARIES if call.kind == "model" else m.TOOL_BOUNDARIES
        crash = (
            caller,
            draw(st.sampled_from(bounds)),
            draw(st.sampled_from(("kill", "retryable"))),
        )
    new = _call(draw(st.sampled_from(("model", "effect", "read"))), draw)
    changed = change(program, draw(st.sampled_from(CHANGES)), draw(st.integers(0, 9)), new)
    return {
        "program": program,
        "changed": changed,
        "crash": crash,
        "policy": policy,
        "face": draw(st.sampled_from(("sync", "async"))),
    }


def _crash(program: tuple[m.Item, ...], crash: Any) -> driver.Crash | None:
    """The driver's crash hook for a ``(caller, boundary, how)`` cut (see harness.Check)."""
    if crash is None:
        return None
    caller, boundary, how = crash
    order = [(c, call) for c, _f, call in m.callers(program)]
    target = next(call for c, call in order if c == caller)
    name = driver.step_name(target)
    before = [call for c, call in order[: [c for c, _ in order].index(caller)]]
    nth = 1 + sum(1 for call in before if driver.step_name(call) == name)
    return driver.Crash(boundary, name, nth, how)


def _writes_only_what_the_journal_takes(shape: dict[str, Any]) -> None:
    journal = CheckedJournal()
    _policy, options = POLICIES[shape["policy"]]
    world = driver.World(unique_tools=shape["policy"] != "live_tools")
    run_id = "frames"
    errors: list[BaseException | None] = []

    def attempt(items: tuple[m.Item, ...], opts: dict[str, Any], crash: Any = None) -> Any:
        got = driver.attempt(
            journal, run_id, driver.Program(items, world, shape["face"]), opts, crash
        )
        errors.append(got.error)
        return got

    attempt(shape["program"], {"replay": "strict"}, _crash(shape["program"], shape["crash"]))
    for _ in range(3):  # resumes of the changed code under the policy, then a replay
        record = journal.get_run(run_id)
        if record is None or record.status in ("succeeded", "failed", "cancelled"):
            break
        if record.status == "suspended":
            journal.decide(run_id, "ok", True, by="t")
        attempt(shape["changed"], options)
    if (record := journal.get_run(run_id)) is not None and record.status == "succeeded":
        attempt(shape["changed"], {**options, "live": False})
    assert not journal.refused, f"frames the journal refused: {journal.refused}; {shape}"
    written = [e for e in errors if isinstance(e, redrive.JournalWriteError)]
    assert not written, f"{written[0]}; {shape}"
    assert journal.checked > 0


@settings(max_examples=examples(default=60, ci=100, thorough=1000), deadline=None)
@given(shape=shapes())
@example(  # continue_live: a batch's second model member, inserted, where the first
    # superseded the only model record of their turn: its reasked note had step None
    shape={
        "program": (P, A),
        "changed": (m.Batch((Q, R)), A),
        "crash": ("m1", "tool_claimed", "kill"),
        "policy": "continue_live",
        "face": "sync",
    },
)
@example(
    shape={
        "program": (P, A),
        "changed": (m.Batch((Q, R)), A),
        "crash": ("m1", "tool_claimed", "kill"),
        "policy": "continue_live",
        "face": "async",
    },
)
def test_every_frame_the_engine_writes_passes_the_journal_s_full_check(
    shape: dict[str, Any],
) -> None:
    """Random loop shapes, cuts, code changes, policies, faces: no frame is refused."""
    _writes_only_what_the_journal_takes(shape)
