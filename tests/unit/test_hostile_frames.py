"""Readers validate frame payloads and .rdj headers before use: a hostile file with a valid
chain gives JournalCorruptError naming the seq and field, never a crash (issue 12 #10)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive.errors import JournalCorruptError
from redrive.frames import Frame, encode
from redrive.replay._steps import iter_steps
from redrive.storage import MemoryJournal, RunRecord, verify_run
from redrive.storage.rdj import RdjJournal, export_run
from redrive.storage.rdj import _format as rdjmod
from tests.hostile import write_rdj


@redrive.tool(restart_safe=False)
def _charge(amount: int) -> dict[str, Any]:
    return {"charged": amount}


@redrive.tool(read_only=True)
def _boom(n: int) -> int:
    raise KeyError(n)


@redrive.model(name="model:fake")
def _fake_model(prompt: str) -> dict[str, Any]:
    return {"text": prompt.upper()}


def _valid_frames() -> list[Frame]:
    journal = MemoryJournal()
    with redrive.run(journal, "r", input={"n": 2}) as run:
        for i in range(2):
            _fake_model(f"step {i}")
            _charge(i)
        with pytest.raises(KeyError):
            _boom(1)
        run.note("checked", {"ok": True})
        run.finish({"steps": 2})
    return list(journal.frames("r"))


FRAMES = _valid_frames()
FIELDS = ["turn", "step", "event", "state", "error", "read_only", "flags", "status", "entrypoint"]
JUNK = st.one_of(
    st.text(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=True),
    st.binary(max_size=4),
)


def _write(frames: list[Frame], path: Path) -> None:
    record = RunRecord(run_id="r", input_fp="fp", created_at=1.0, updated_at=1.0)
    write_rdj(path, record, frames)


def _read_everything(path: Path) -> None:
    """What `redrive show` / `verify` / import read: header, frames, steps, output."""
    journal = RdjJournal(path)
    row = journal.get_run("r")
    assert row is not None
    verify_run(journal, "r")
    for _step in iter_steps(journal.frames("r"), "r"):
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(FRAMES) - 1),
    field=st.sampled_from(FIELDS),
    junk=JUNK,
)
def test_malformed_payload_fields_are_corruption_not_crashes(
    index: int, field: str, junk: Any
) -> None:
    """Property: a valid chain over a payload with one hostile field reads cleanly or raises
    JournalCorruptError naming the seq; nothing else escapes."""
    frames = list(FRAMES)
    data = frames[index].data()
    data[field] = junk
    try:
        payload = encode(data)
    except (TypeError, ValueError):
        return  # not storable (e.g. a NaN): no file can hold it
    frames[index] = attrs.evolve(frames[index], payload=payload)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.rdj"
        _write(frames, path)
        try:
            _read_everything(path)
        except JournalCorruptError as exc:
            assert exc.seq is not None or "seq" in str(exc)


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [("turn", "abc", "turn:"), ("step", [1, 2], "step:"), ("error", "boom", "error:")],
)
def test_reported_crashes_name_the_field(
    field: str, value: Any, shown: str, tmp_path: Path
) -> None:
    """The three crashes of the report (int('abc'), unhashable list, str.get) name seq and field."""
    kinds = {"turn": "tool_start", "step": "tool_done", "error": "tool_error"}
    index = next(i for i, f in enumerate(FRAMES) if f.kind == kinds[field])
    frames = list(FRAMES)
    frames[index] = attrs.evolve(
        frames[index], payload=encode({**frames[index].data(), field: value})
    )
    _write(frames, tmp_path / "r.rdj")
    with pytest.raises(JournalCorruptError) as caught:
        _read_everything(tmp_path / "r.rdj")
    assert caught.value.seq == index and shown in str(caught.value)


def test_a_garbage_output_in_the_header_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a header output that is not a stored value passed verify and import, and
    `run.output` raised later; now the reader refuses the file, naming the field."""
    journal = MemoryJournal()
    with redrive.run(journal, "r") as run:
        run.finish("fine")
    real = rdjmod.header_bytes

    def hostile(record: RunRecord, flags: dict[str, Any], *rest: Any, **options: Any) -> bytes:
        return real(attrs.evolve(record, output=b"\xc1\xc1"), flags, *rest, **options)

    monkeypatch.setattr("redrive.storage.rdj._transfer.header_bytes", hostile)
    export_run(journal, "r", tmp_path / "r.rdj")
    with pytest.raises(JournalCorruptError, match="output"):
        RdjJournal(tmp_path / "r.rdj")
