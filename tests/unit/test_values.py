"""Recorded values (issue 4, item 8): redrive.now(), uuid4(), random().

What happens when code adds or removes a value call between recording and
replay (documented in redrive.recorders.values):

* values are matched by (name, label); the label defaults to the calling
  function's qualified name, so a call added or removed in one function never
  shifts the values another function gets;
* strict replay: an added call raises DivergenceError where the journal still
  has other steps (at the end of the record it simply goes live and is
  recorded); a removed call leaves a recorded value unasked, which raises
  DivergenceError when the run exits;
* ReplayPolicy(value="lenient"): an added call gets a fresh value (recorded),
  a removed one is skipped; the other call sites keep their recorded values.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

import redrive
from redrive.storage import MemoryJournal

LENIENT_VALUES = redrive.ReplayPolicy(value="lenient")


def test_outside_a_run_values_are_plain() -> None:
    """Outside a run the calls are the stdlib ones, fresh every time."""
    now = redrive.now()
    assert now.tzinfo is not None and abs(now - dt.datetime.now(dt.UTC)) < dt.timedelta(hours=1)
    assert redrive.uuid4() != redrive.uuid4()
    assert isinstance(redrive.uuid4(), uuid.UUID)
    assert 0.0 <= redrive.random() < 1.0
    assert redrive.random() != redrive.random()


def test_values_are_recorded_and_replayed() -> None:
    """Inside a run the first execution records the values and every replay returns them."""
    journal = MemoryJournal()

    def loop() -> tuple[object, ...]:
        return (redrive.now(), redrive.uuid4(), redrive.random(), redrive.random())

    with redrive.run(journal, "r1") as run:
        first = loop()
        run.finish(None)
    with redrive.run(journal, "r1") as again:
        second = loop()
    assert first == second and again.replayed_steps == 4 and again.live_steps == 0
    assert isinstance(second[0], dt.datetime) and isinstance(second[1], uuid.UUID)
    assert first[2] != first[3]


def _stamp() -> dt.datetime:
    return redrive.now()


def _token(extra: bool) -> uuid.UUID:
    if extra:
        redrive.uuid4()
    return redrive.uuid4()


def _record(journal: MemoryJournal) -> tuple[dt.datetime, uuid.UUID]:
    """Record a run that stops with a retryable error (still running, so it can go live)."""
    recorded: list[object] = []
    with pytest.raises(ConnectionError), redrive.run(journal, "r1"):
        recorded.extend((_stamp(), _token(False)))
        raise ConnectionError("stop here")
    return recorded[0], recorded[1]  # type: ignore[return-value]


def test_added_call_elsewhere_does_not_shift_values() -> None:
    """A now() added at a new site: strict names it as divergence, lenient keeps other values."""
    journal = MemoryJournal()
    stamp, token = _record(journal)
    with pytest.raises(redrive.DivergenceError) as info, redrive.run(journal, "r1"):
        redrive.now(label="new-call")
    assert info.value.diff == [("$.label", "_stamp", "new-call")]  # type: ignore[attr-defined]
    with redrive.run(journal, "r1", replay=LENIENT_VALUES) as run:
        extra = redrive.now(label="new-call")
        assert (_stamp(), _token(False)) == (stamp, token)
    assert extra != stamp and run.live_steps == 1 and run.replayed_steps == 2


def test_added_call_at_same_site_diverges_in_strict() -> None:
    """An extra uuid4() at a recorded call site raises DivergenceError under strict replay."""
    journal = MemoryJournal()
    _record(journal)
    with pytest.raises(redrive.DivergenceError), redrive.run(journal, "r1"):
        _token(True)
        _stamp()


def test_added_call_at_same_site_under_lenient_values() -> None:
    """With lenient values an extra call consumes in order and only the surplus is fresh."""
    journal = MemoryJournal()
    stamp, token = _record(journal)
    with redrive.run(journal, "r1", replay=LENIENT_VALUES) as run:
        got = _token(True)
        assert _stamp() == stamp
    assert got != token and run.live_steps == 1 and run.replayed_steps == 2


def test_removed_call_strict_and_lenient() -> None:
    """A removed now() raises DivergenceError at exit under strict, and is skipped when lenient."""
    journal = MemoryJournal()
    _, token = _record(journal)
    with (
        pytest.raises(redrive.DivergenceError, match="more steps"),
        redrive.run(journal, "r1", live=False),
    ):
        assert _token(False) == token
    with redrive.run(journal, "r1", replay=LENIENT_VALUES) as run:
        assert _token(False) == token
    assert run.status == "succeeded"


def test_explicit_labels_pin_values() -> None:
    """Explicit labels match regardless of call order within a turn."""
    journal = MemoryJournal()
    with redrive.run(journal, "r1") as run:
        a = redrive.uuid4(label="a")
        b = redrive.uuid4(label="b")
        run.finish(None)
    with redrive.run(journal, "r1"):
        assert redrive.uuid4(label="b") == b
        assert redrive.uuid4(label="a") == a


def test_values_survive_a_resume() -> None:
    """A value recorded before an interruption is the same after resume (group commit included)."""
    journal = MemoryJournal()

    @redrive.tool(restart_safe=True)
    def get_page(n: int) -> int:
        return n

    with pytest.raises(ConnectionError), redrive.run(journal, "r1"):
        before = redrive.uuid4()
        get_page(1)
        raise ConnectionError("worker lost the network")
    with redrive.run(journal, "r1"):
        assert redrive.uuid4() == before
        get_page(1)
