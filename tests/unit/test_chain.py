"""The one seq and chain check of a run's frames: ChainCheck and verify_chain."""

from __future__ import annotations

import pickle

import attrs
import pytest

from redrive import JournalCorruptError
from redrive.frames import GENESIS, ChainCheck, Frame, Kind, make_frame, verify_chain


def _run(run_id: str = "r", count: int = 4) -> list[Frame]:
    frames: list[Frame] = []
    prev = GENESIS
    for seq in range(count):
        frame = make_frame(
            run_id=run_id, seq=seq, kind=Kind.NOTE, name="n", payload={"i": seq}, prev_chain=prev
        )
        frames.append(frame)
        prev = frame.chain
    return frames


def test_a_whole_run_verifies() -> None:
    """verify_chain yields every frame of an intact run, in order."""
    frames = _run()
    assert list(verify_chain(frames, "r")) == frames
    assert list(verify_chain(frames)) == frames  # the run is taken from the first frame


@pytest.mark.parametrize(
    ("mutate", "reason", "seq", "last_good"),
    [
        (lambda fs: [fs[0], fs[2], fs[3]], "seq", 2, 0),
        (lambda fs: [fs[0], fs[1], attrs.evolve(fs[2], payload=b"\xc0"), fs[3]], "chain", 2, 1),
        (lambda fs: [attrs.evolve(fs[0], chain="1" * 32), *fs[1:]], "chain", 0, None),
        (lambda fs: [*fs[:2], _run("other")[2]], "run", 2, 1),
    ],
)
def test_each_failure_names_seq_reason_and_last_good(
    mutate: object, reason: str, seq: int, last_good: int | None
) -> None:
    """A gap, an altered frame, a bad first frame and a foreign frame each raise, with fields."""
    frames = mutate(_run())  # type: ignore[operator]
    with pytest.raises(JournalCorruptError) as info:
        list(verify_chain(frames, "r", source="j.duckdb"))
    err = info.value
    assert err.run_id == "r" and err.seq == seq
    assert err.fields["reason"] == reason and err.fields["last_good_seq"] == last_good
    assert err.fields["source"] == "j.duckdb" and str(err).startswith("j.duckdb: run 'r'")
    assert f"last good seq {last_good}" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert back.fields == err.fields


def test_a_check_can_start_mid_run() -> None:
    """A ChainCheck from next_seq/prev_chain checks an append after the run's last frame."""
    frames = _run()
    check = ChainCheck("r", next_seq=2, prev_chain=frames[1].chain)
    assert check.problem(frames[3]) is not None
    assert check.problem(frames[2]) is None
    check.advance(frames[2])
    assert check.check(frames[3]) is frames[3]
    assert check.last_good_seq == 3 and check.next_seq == 4
