"""Interruptions nobody asked for leave a run resumable; only an explicit cancel ends it.

DESIGN invariant 12. A timeout (``asyncio.wait_for``, ``asyncio.timeout``), a
job runner's ``task.cancel()``, ``KeyboardInterrupt`` (SIGINT), ``SystemExit``
(a SIGTERM handler) and a generator closed early stop the run as a crash
would: frames already made are journaled, a tool body cut off stays in flight
with its claim, a model call cut off before its response is not recorded, and
a redelivery resumes it. ``run.cancel()`` and ``journal.cancel()`` end it
``cancelled``, naming who and why. Real timeouts and a runner's cancel of an async job:
:mod:`tests.unit.test_interruptions_async` and :mod:`tests.unit.test_cancel_points`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive.frames import Kind
from redrive.storage import Journal, MemoryJournal
from tests.conftest import Drive, Loop, Step

#: What stops a block without anyone asking for the run to end.
INTERRUPTIONS: list[type[BaseException]] = [
    KeyboardInterrupt,
    SystemExit,
    asyncio.CancelledError,
    GeneratorExit,
]


@pytest.fixture
def journal() -> Iterator[MemoryJournal]:
    """A fresh in-memory journal."""
    yield MemoryJournal()


class Provider:
    """A payment provider outside the process: dedupes on the idempotency key, counts charges."""

    def __init__(self) -> None:
        self.charges: Counter[str] = Counter()
        self.model_calls = 0

    def charge(self, key: str) -> None:
        self.charges[key] += 0 if key in self.charges else 1


def _status(journal: Journal, run_id: str) -> str:
    record = journal.get_run(run_id)
    assert record is not None
    return record.status


# -- both faces: an interruption raised inside a step ------------------------------------


@pytest.mark.parametrize("kind", INTERRUPTIONS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("where", ["model", "tool_before_effect", "tool_after_effect"])
def test_an_interruption_inside_a_step_leaves_the_run_resumable(
    drive: Drive, journal: MemoryJournal, kind: type[BaseException], where: str
) -> None:
    """Interrupted in a model call or a tool body, the run stays running; the redelivery
    resumes it and finishes with one charge and without paying again for finished calls."""
    provider = Provider()
    armed = [True]

    @drive.tool(restart_safe=True)
    def charge_card(cents: int) -> str:
        key = redrive.idempotency_key()
        assert key is not None
        if armed[0] and where == "tool_before_effect":
            armed[0] = False
            raise kind()
        provider.charge(key)
        if armed[0] and where == "tool_after_effect":
            armed[0] = False
            raise kind()
        return f"charged {cents}"

    @drive.model
    def ask(prompt: str) -> str:
        provider.model_calls += 1
        if armed[0] and where == "model":
            armed[0] = False
            raise kind()
        return f"answer to {prompt}"

    def job(run: redrive.Run) -> Loop:
        first = yield ask("plan")
        charged = yield charge_card(500)
        last = yield ask("summarize")
        return run.finish([first, charged, last])

    with pytest.raises(kind):
        drive.run(journal, "job:42", job)
    assert _status(journal, "job:42") == "running"
    calls_before = provider.model_calls
    ran = drive.run(journal, "job:42", job)  # the queue's redelivery
    assert ran.run.status == "succeeded" and ran.run.resumed
    assert ran.run.output == ["answer to plan", "charged 500", "answer to summarize"]
    assert list(provider.charges.values()) == [1]
    # finished model calls are replayed: only the one cut off and the last one go live
    assert provider.model_calls - calls_before == (2 if where == "model" else 1)


def test_a_tool_cut_off_mid_body_stays_in_flight(drive: Drive, journal: MemoryJournal) -> None:
    """A non-restart-safe tool body interrupted mid-way keeps its claim: the redelivery is
    blocked (never re-run silently), and the run is still resumable, not cancelled."""
    charged: list[int] = []

    @drive.tool(restart_safe=False)
    def charge_card(cents: int) -> str:
        charged.append(cents)
        raise KeyboardInterrupt

    def job(run: redrive.Run) -> Loop:
        return (yield charge_card(500))

    with pytest.raises(KeyboardInterrupt):
        drive.run(journal, "job:1", job)
    kinds = [f.kind for f in journal.frames("job:1")]
    assert kinds[-1] == Kind.TOOL_START.value and Kind.RUN_END.value not in kinds
    with pytest.raises(redrive.SideEffectRetryBlockedError):
        drive.run(journal, "job:1", job)
    assert charged == [500] and _status(journal, "job:1") == "running"


def test_a_model_call_cut_off_is_not_recorded(drive: Drive, journal: MemoryJournal) -> None:
    """A model call interrupted before its response leaves no model frame behind."""

    @drive.model
    def ask(prompt: str) -> str:
        raise SystemExit(143)

    def job(run: redrive.Run) -> Loop:
        return (yield ask("hi"))

    with pytest.raises(SystemExit):
        drive.run(journal, "job:2", job)
    assert [f.kind for f in journal.frames("job:2")] == [Kind.RUN_START.value]
    assert _status(journal, "job:2") == "running"


# -- an explicit cancel: the only way to end a run cancelled -----------------------------------


def _charging(drive: Drive) -> tuple[Step, list[int]]:
    """A non-restart-safe charge_card for this face, and the list of cents it charged."""
    charged: list[int] = []

    @drive.tool(restart_safe=False)
    def charge_card(cents: int) -> str:
        charged.append(cents)
        return "ok"

    return charge_card, charged


def test_run_cancel_ends_the_run_at_once(drive: Drive, journal: MemoryJournal) -> None:
    """run.cancel() commits the cancel at once; a later step is refused before its body runs;
    the redelivery is refused with who and why."""
    charge_card, charged = _charging(drive)

    def job(run: redrive.Run) -> Loop:
        yield charge_card(1)
        run.cancel("customer asked", by="support bot")
        assert _status(journal, "job:3") == "cancelled"  # committed before the block ends
        yield charge_card(2)

    with pytest.raises(redrive.TerminalRunError, match="cancelled by support bot"):
        drive.run(journal, "job:3", job)
    assert charged == [1]
    record = journal.get_run("job:3")
    assert record is not None and record.status == "cancelled"
    assert record.error == "cancelled by support bot: customer asked"
    end = list(journal.frames("job:3"))[-1]
    assert end.kind == Kind.RUN_END.value
    assert (end.data()["by"], end.data()["reason"]) == ("support bot", "customer asked")
    with pytest.raises(redrive.TerminalRunError, match="customer asked"):
        drive.run(journal, "job:3", job)


def test_run_cancel_then_a_clean_exit_writes_nothing_more(
    drive: Drive, journal: MemoryJournal
) -> None:
    """A block that returns after cancel() leaves the run cancelled (no output recorded)."""

    def job(run: redrive.Run) -> Loop:
        run.cancel("done early", by="loop")
        run.finish("ignored")
        return "left"
        yield  # a loop program

    ran = drive.run(journal, "job:4", job)
    assert ran.run.status == "cancelled" and ran.value == "left"
    assert [f.kind for f in journal.frames("job:4")][-1] == Kind.RUN_END.value
    assert len(list(journal.frames("job:4"))) == 2


def test_acancel_on_the_async_face(journal: MemoryJournal) -> None:
    """run.acancel() is cancel() with the write off the event loop."""

    async def job() -> None:
        async with redrive.run(journal, "job:5") as run:
            await run.acancel("no longer needed", by="scheduler")

    asyncio.run(job())
    record = journal.get_run("job:5")
    assert record is not None and record.error == "cancelled by scheduler: no longer needed"


def test_cancel_is_refused_outside_a_live_block_or_twice(journal: MemoryJournal) -> None:
    """cancel() needs a live run inside its block, a reason and who; once is enough."""
    run = redrive.run(journal, "job:6")
    with pytest.raises(RuntimeError, match="inside the run's block"):
        run.cancel("r", by="b")
    with run:
        with pytest.raises(ValueError):
            run.cancel("", by="b")
        run.cancel("r", by="b")
        with pytest.raises(redrive.TerminalRunError, match="nothing to cancel"):
            run.cancel("again", by="b")
    assert run.status == "cancelled"


@pytest.mark.parametrize("lease", [None, 60.0])
def test_journal_cancel_stops_the_worker_executing_the_run(
    drive: Drive, journal: MemoryJournal, lease: float | None
) -> None:
    """journal.cancel() from outside while a worker executes the run (with or without a lease):
    the worker's next claim is refused, its body never runs, and its Run stops with
    TerminalRunError naming who cancelled and why."""
    charge_card, charged = _charging(drive)

    def job(run: redrive.Run) -> Loop:
        yield charge_card(1)
        journal.cancel("job:7", reason="fraud suspected", by="risk team")  # another process
        yield charge_card(2)
        return run.finish("never")

    with pytest.raises(redrive.TerminalRunError, match="risk team") as info:
        drive.run(journal, "job:7", job, lease=lease)
    assert info.value.status == "cancelled"  # type: ignore[attr-defined]
    assert charged == [1]
    assert drive.last_run is not None and drive.last_run.status == "cancelled"
    record = journal.get_run("job:7")
    assert record is not None and record.error == "cancelled by risk team: fraud suspected"
    assert record.lease_owner is None  # the stopped worker released its lease


def test_journal_cancel_then_a_clean_exit_is_a_clear_error(
    drive: Drive, journal: MemoryJournal
) -> None:
    """A worker whose loop ends after an outside cancel cannot record success: its exit raises
    TerminalRunError and the run stays cancelled."""

    def job(run: redrive.Run) -> Loop:
        journal.cancel("job:8", reason="r", by="ops")
        return run.finish("done")
        yield  # a loop program

    with pytest.raises(redrive.TerminalRunError, match="ops"):
        drive.run(journal, "job:8", job)
    assert _status(journal, "job:8") == "cancelled"


STEPS_AFTER_A_CANCEL = ["model", "tool", "value"]


def _asker(drive: Drive, sent: list[str]) -> dict[str, Callable[[], Any]]:
    """One step of each kind; ``sent`` lists the model calls and tool bodies that went out."""

    @drive.model(name="ask")
    def ask(prompt: str) -> str:
        sent.append(f"model {prompt}")
        return f"answer to {prompt}"

    @drive.tool(restart_safe=False)
    def charge_card(cents: int) -> str:
        sent.append(f"tool {cents}")
        return "ok"

    return {"model": lambda: ask("late"), "tool": lambda: charge_card(2), "value": redrive.now}


@pytest.mark.parametrize("model_commit", ["write", "group", "each"])
@pytest.mark.parametrize("kind", STEPS_AFTER_A_CANCEL)
def test_no_step_goes_out_after_run_cancel(
    drive: Drive, journal: MemoryJournal, kind: str, model_commit: str
) -> None:
    """After run.cancel() a model, tool or value step is refused before any call goes out
    (under every model_commit: a model call under "group" is not sent and then dropped),
    with TerminalRunError naming who cancelled and why."""
    sent: list[str] = []
    steps = _asker(drive, sent)

    def job(run: redrive.Run) -> Loop:
        yield steps["model"]()
        run.cancel("customer asked", by="support bot")
        if kind == "value":
            return steps["value"]()
        return (yield steps[kind]())

    with pytest.raises(redrive.TerminalRunError, match="support bot: customer asked") as info:
        drive.run(journal, "job:c", job, model_commit=model_commit)
    assert info.value.status == "cancelled"  # type: ignore[attr-defined]
    assert sent == ["model late"]  # only the call made before the cancel
    assert [f.kind for f in journal.frames("job:c")][-1] == Kind.RUN_END.value


@pytest.mark.parametrize("kind", STEPS_AFTER_A_CANCEL)
def test_no_step_goes_out_once_an_outside_cancel_is_known(
    drive: Drive, journal: MemoryJournal, kind: str
) -> None:
    """journal.cancel() from outside is learned at the worker's next write (here a model
    step's record, refused after its call: the documented gap); from then on no step goes
    out, even when the loop catches the refusal and carries on."""
    sent: list[str] = []
    steps = _asker(drive, sent)
    refusals: list[str] = []

    def job(run: redrive.Run) -> Loop:
        journal.cancel("job:o", reason="fraud suspected", by="risk team")  # another process
        for step in ("model", kind):
            try:
                if step == "value":
                    steps["value"]()
                else:
                    yield steps[step]()
            except redrive.TerminalRunError as exc:
                refusals.append(str(exc))
        return "carried on"

    ran = drive.run(journal, "job:o", job)
    assert sent == ["model late"]  # the one call before the worker knew
    assert len(refusals) == 2 and "risk team: fraud suspected" in refusals[1]
    assert ran.run.status == "cancelled" and _status(journal, "job:o") == "cancelled"


# -- the property: interruptions never end a run; only cancel() does ---------------------------

_POINTS = st.sampled_from(["model", "tool_before_effect", "tool_after_effect", "between"])
_ATTEMPT = st.one_of(
    st.none(),  # this attempt runs to its end
    st.tuples(st.sampled_from(INTERRUPTIONS), st.integers(0, 3), _POINTS),
    st.tuples(st.just("cancel"), st.integers(0, 3), st.just("between")),
)


@contextlib.contextmanager
def _fresh_journal(backend: str) -> Iterator[Journal]:
    """A new, empty journal of ``backend`` (``memory`` or ``duckdb``), closed afterwards."""
    if backend == "memory":
        yield MemoryJournal()
        return
    from redrive.storage.duckdb import DuckDBJournal

    with tempfile.TemporaryDirectory() as tmp:
        journal = DuckDBJournal(os.path.join(tmp, "runs.duckdb"))
        try:
            yield journal
        finally:
            journal.close()


@pytest.mark.parametrize("backend", ["memory", "duckdb"])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=25)
@given(attempts=st.lists(_ATTEMPT, min_size=1, max_size=5))
def test_interruptions_never_end_a_run_only_cancel_does(
    drive: Drive, backend: str, attempts: list[Any]
) -> None:
    """Random interruption kinds at random points of random attempts: after each one the run
    is running; it ends succeeded (each charge once) unless an attempt called cancel(), and
    then it is cancelled and every later attempt is refused."""
    with _fresh_journal(backend) as journal:
        _interrupted_attempts(drive, journal, attempts)


def _interrupted_attempts(drive: Drive, journal: Journal, attempts: list[Any]) -> None:
    """Run the property's attempts against ``journal`` (see the test above)."""
    provider = Provider()
    plan: dict[str, Any] = {"stop": None}

    def maybe_stop(step: int, point: str) -> None:
        stop = plan["stop"]
        if stop is not None and stop[1] == step and stop[2] == point:
            plan["stop"] = None
            raise stop[0]()

    @drive.tool(restart_safe=True)
    def charge_card(step: int) -> str:
        maybe_stop(step, "tool_before_effect")
        key = redrive.idempotency_key()
        assert key is not None
        provider.charge(key)
        maybe_stop(step, "tool_after_effect")
        return f"charged {step}"

    @drive.model
    def ask(step: int) -> str:
        maybe_stop(step, "model")
        return f"answer {step}"

    def job(run: redrive.Run) -> Loop:
        out = []
        for step in range(4):
            stop = plan["stop"]
            if stop is not None and stop[0] == "cancel" and stop[1] == step:
                plan["stop"] = None
                run.cancel("asked", by="property")
            maybe_stop(step, "between")
            out.append((yield (ask if step % 2 else charge_card)(step)))
        return run.finish(out)

    cancelled = False
    for attempt in [*attempts, None]:  # a last, uninterrupted redelivery
        plan["stop"] = attempt
        asks_cancel = attempt is not None and attempt[0] == "cancel"
        try:
            # up to 5 interruptions may hit one step: stay under the attempt limit,
            # which is a block by design (tested elsewhere), not an ending
            drive.run(journal, "prop", job, max_attempts=len(attempts) + 2)
        except redrive.TerminalRunError:
            assert cancelled or asks_cancel
            cancelled = True
        except BaseException as exc:
            assert attempt is not None and isinstance(exc, attempt[0])
            assert not cancelled and _status(journal, "prop") == "running"
            continue
        else:
            cancelled = cancelled or asks_cancel
        assert _status(journal, "prop") == ("cancelled" if cancelled else "succeeded")
        if not cancelled:
            break
    if not cancelled:
        assert _status(journal, "prop") == "succeeded"
        assert len(provider.charges) == 2 and set(provider.charges.values()) == {1}


def test_an_interruption_after_an_outside_cancel_still_propagates(journal: MemoryJournal) -> None:
    """KeyboardInterrupt in a run cancelled from outside meanwhile: the interrupt propagates
    (with a note that its pending frames were refused) and the run stays cancelled."""

    @redrive.model
    def ask(prompt: str) -> str:
        return prompt

    with (
        pytest.raises(KeyboardInterrupt) as info,
        redrive.run(journal, "job:9", model_commit="group") as run,
    ):
        ask("hello")  # held in memory until the next durable write
        journal.cancel("job:9", reason="r", by="ops")
        raise KeyboardInterrupt
    assert any("not journaled" in note for note in info.value.__notes__)
    assert run.status == "cancelled" and _status(journal, "job:9") == "cancelled"
