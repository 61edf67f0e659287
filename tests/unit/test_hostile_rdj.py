"""Hostile ``.rdj`` files with a VALID chain: structure is checked on read (issue 12 #10).

The files are built structure-aware: a real run whose frames get a malformed
payload field (or a garbage output), re-chained so every chain and checksum
is valid. Reading them gives the frames or a ``JournalCorruptError`` naming
the seq and the field, never another exception.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive.errors import JournalCorruptError
from redrive.frames import Frame, encode, payload_problem
from redrive.storage import MemoryJournal, RunRecord
from redrive.storage.rdj import RdjJournal
from tests.hostile import write_rdj


def base_run() -> tuple[RunRecord, list[Frame]]:
    journal = MemoryJournal()

    @redrive.tool(read_only=True)
    def get_item(n: int) -> str:
        return f"item {n}"

    @redrive.tool
    def fail() -> None:
        raise KeyError("nope")

    with redrive.run(journal, "r") as run:
        items = [get_item(n) for n in range(2)]
        with contextlib.suppress(KeyError):
            fail()
        run.note("checked", {"n": 1})
        run.finish(items)
    record = journal.get_run("r")
    assert record is not None
    return record, list(journal.frames("r"))


BASE = base_run()

FIELDS = ["turn", "step", "attempt", "read_only", "restart_safe", "idempotency_key", "status",
          "error", "flags", "entrypoint", "event", "args", "result"]  # fmt: skip
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def build(frames: list[Frame], record: RunRecord, output: bytes | None, folder: str) -> str:
    """Write ``frames`` re-chained (a valid chain) as an ``.rdj`` file, return the file."""
    return write_rdj(os.path.join(folder, "r.rdj"), attrs.evolve(record, output=output), frames)


def read_all(path: str) -> None:
    journal = RdjJournal(path)
    run = journal.get_run("r")
    assert run is not None
    list(journal.frames("r"))
    run.output_value()


@settings(max_examples=150, deadline=None)
@given(
    index=st.integers(0, len(BASE[1]) - 1),
    field=st.sampled_from(FIELDS),
    value=hostile,
    whole=st.booleans(),
)
def test_malformed_payload_fields_are_named_or_accepted(
    index: int, field: str, value: Any, whole: bool
) -> None:
    """Property: a valid chain over a malformed payload reads or names the seq and field."""
    record, frames = BASE
    frame = frames[index]
    data = frame.data()
    data = value if whole else {**data, field: value}
    try:
        payload = encode(data)
    except (TypeError, ValueError):
        return  # not encodable at all: nothing to write
    frames = [*frames[:index], attrs.evolve(frame, payload=payload), *frames[index + 1 :]]
    expected = payload_problem(frame.kind, data)
    with tempfile.TemporaryDirectory() as folder:
        path = build(frames, record, record.output, folder)
        if expected is None:
            read_all(path)
            return
        with pytest.raises(JournalCorruptError) as caught:
            read_all(path)
    err = caught.value
    assert err.seq == index and f"seq {index}" in str(err)
    assert expected.split(":")[0] in str(err)


@settings(max_examples=30, deadline=None)
@given(garbage=st.binary(min_size=1, max_size=16))
def test_a_garbage_output_is_refused_on_open(garbage: bytes) -> None:
    """Issue 12 #10: a garbage output in the header used to pass verify and import."""
    record, frames = BASE
    try:
        redrive.frames.decode(garbage)
        return  # a valid value
    except Exception:
        pass
    with tempfile.TemporaryDirectory() as folder:
        path = build(frames, record, garbage, folder)
        with pytest.raises(JournalCorruptError, match="output"):
            RdjJournal(path)


def test_a_text_turn_is_corruption_not_a_value_error() -> None:
    """Issue 12 #10: ``invalid literal for int()`` for a non-integer turn, now named."""
    record, frames = BASE
    index = next(i for i, f in enumerate(frames) if "turn" in f.data())
    frames = list(frames)
    frames[index] = attrs.evolve(
        frames[index], payload=encode({**frames[index].data(), "turn": "abc"})
    )
    with tempfile.TemporaryDirectory() as folder:
        path = build(frames, record, record.output, folder)
        with pytest.raises(JournalCorruptError, match=f"seq {index}.*turn"):
            read_all(path)
