"""The run row after an append carries every field of the row before it (issue 26 item 6)."""

from __future__ import annotations

import attrs

from redrive.frames import GENESIS, Kind, make_frame
from redrive.storage import RunRecord, RunUpdate
from redrive.storage._checks import after_append


def _full_row() -> RunRecord:
    """A row whose every field differs from its default."""
    return RunRecord(
        run_id="r",
        status="blocked",
        next_seq=1,
        last_chain="ab" * 16,
        input_fp="f" * 32,
        entrypoint="m:f",
        created_at=1.0,
        updated_at=2.0,
        output=b"\x01",
        error="e",
        lease_owner="w",
        lease_epoch=3,
        lease_expires=9.0,
    )


def test_every_field_is_carried_over_as_evolve_would() -> None:
    """after_append equals attrs.evolve of the changed fields, for each field of the row."""
    row = _full_row()
    assert all(
        getattr(row, f.name) != f.default for f in attrs.fields(RunRecord) if f.name != "run_id"
    )
    frame = make_frame(
        run_id="r", seq=1, kind=Kind.TOOL_START, name="t", payload={}, prev_chain=GENESIS
    )
    assert after_append(row, [frame], None, 5.0) == attrs.evolve(
        row, next_seq=2, last_chain=frame.chain, updated_at=5.0
    )
    assert after_append(row, [], None, 5.0) == attrs.evolve(row, updated_at=5.0)
    update = RunUpdate(status="succeeded", output=b"\x02", error="x", updated_at=7.0)
    assert after_append(row, [frame], update, 5.0) == attrs.evolve(
        row,
        next_seq=2,
        last_chain=frame.chain,
        updated_at=7.0,
        status="succeeded",
        output=b"\x02",
        error="x",
    )
