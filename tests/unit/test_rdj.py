"""The .rdj export file: round trips, import, and a reader that only raises JournalCorruptError."""

from __future__ import annotations

import itertools
import os
import random
import struct
from pathlib import Path
from typing import Any

import attrs
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive.errors import (
    AppendConflictError,
    JournalCorruptError,
    JournalFormatError,
    UnknownRunError,
)
from redrive.frames import GENESIS, encode, make_frame
from redrive.storage import MemoryJournal, RunRecord
from redrive.storage.rdj import RdjJournal, export_run, import_run, read_header
from redrive.storage.rdj import _format as rdjmod

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
REAL_FILES = sorted(FIXTURES.rglob("*.rdj"))


@redrive.tool(restart_safe=False)
def _charge(amount: int) -> dict[str, Any]:
    return {"charged": amount}


@redrive.model(name="model:fake")
def _fake_model(prompt: str) -> dict[str, Any]:
    return {"text": prompt.upper(), "usage": {"input_tokens": 3, "output_tokens": 2}}


def _record(journal: MemoryJournal, run_id: str = "r1", steps: int = 3) -> None:
    with redrive.run(journal, run_id, input={"n": steps}) as run:
        for i in range(steps):
            _fake_model(f"step {i}")
            _charge(i)
        run.finish({"steps": steps})


@pytest.fixture
def journal() -> MemoryJournal:
    mem = MemoryJournal()
    _record(mem)
    return mem


@pytest.fixture
def rdj_path(journal: MemoryJournal, tmp_path: Path) -> Path:
    path = tmp_path / "r1.rdj"
    export_run(journal, "r1", path)
    return path


def _frame_offsets(data: bytes) -> list[int]:
    """Byte offsets where each record after the preamble starts (header, frames, end)."""
    offsets = []
    pos = 16
    while pos < len(data):
        offsets.append(pos)
        (length,) = struct.unpack(">I", data[pos + 1 : pos + 5])
        pos += 5 + length + 8
    return offsets


def test_round_trip_keeps_every_frame(journal: MemoryJournal, rdj_path: Path) -> None:
    """An exported run reads back frame for frame, with its run row and flags."""
    rj = redrive.open_journal(str(rdj_path))
    assert isinstance(rj, RdjJournal)
    assert list(rj.frames("r1")) == list(journal.frames("r1"))
    assert list(rj.frames("r1", start=5)) == list(journal.frames("r1", start=5))
    record = journal.get_run("r1")
    assert record is not None
    assert rj.get_run("r1") == attrs.evolve(record, lease_owner=None, lease_expires=None)
    assert rj.header.flags["model_commit"] == "write"
    assert read_header(rdj_path).frames == record.next_seq
    assert rj.get_run("other") is None and list(rj.frames("other")) == []
    assert [r.run_id for r in rj.runs()] == ["r1"] and rj.runs(status="failed") == []


def test_replay_from_the_file_makes_no_live_call(rdj_path: Path) -> None:
    """A finished run replays from the .rdj file read-only and returns its recorded output."""
    rj = RdjJournal(rdj_path)
    with redrive.run(rj, "r1", live=False) as run:
        for i in range(3):
            assert _fake_model(f"step {i}") == {
                "text": f"STEP {i}",
                "usage": {"input_tokens": 3, "output_tokens": 2},
            }
            assert _charge(i) == {"charged": i}
    assert run.live_steps == 0 and run.replayed_steps == 6
    assert run.output == {"steps": 3}


def test_writes_are_refused(rdj_path: Path) -> None:
    """The file journal is read-only: writes raise PermissionError naming the way out."""
    rj = RdjJournal(rdj_path)
    first = next(rj.frames("r1"))
    with pytest.raises(PermissionError, match="import"):
        rj.append("r1", [], expected_seq=1)
    with pytest.raises(PermissionError):
        rj.create_run(RunRecord(run_id="x"), first)
    with pytest.raises(PermissionError):
        rj.acquire_lease("r1", "me", 1.0)
    with pytest.raises(PermissionError):
        rj.decide("r1", "ok", True, by="me")


def test_import_into_memory_and_duckdb(rdj_path: Path, tmp_path: Path) -> None:
    """Import copies the run with its status and output; a second import is a no-op."""
    for target in (MemoryJournal(), redrive.open_journal(str(tmp_path / "j.duckdb"))):
        row = import_run(rdj_path, target)
        assert row.status == "succeeded" and row.output_value() == {"steps": 3}
        assert list(target.frames("r1")) == list(RdjJournal(rdj_path).frames("r1"))
        assert import_run(rdj_path, target).next_seq == row.next_seq
        target.close()


def test_import_conflict_with_another_run_of_the_same_id(rdj_path: Path) -> None:
    """Importing over a different run with the same id raises AppendConflictError."""
    other = MemoryJournal()
    _record(other, steps=1)
    with pytest.raises(AppendConflictError, match="already holds a run"):
        import_run(rdj_path, other)


def test_imported_running_run_resumes_live(tmp_path: Path) -> None:
    """A run exported while running is resumed after import and goes live where it stopped."""
    prod = MemoryJournal()
    with pytest.raises(ConnectionError), redrive.run(prod, "r2") as run:
        _fake_model("a")
        raise ConnectionError("worker lost")
    assert prod.get_run("r2").status == "paused"  # type: ignore[union-attr]
    export_run(prod, "r2", tmp_path / "r2.rdj")
    local = MemoryJournal()
    import_run(tmp_path / "r2.rdj", local)
    with redrive.run(local, "r2") as run:
        _fake_model("a")
        _charge(7)
    assert (run.replayed_steps, run.live_steps) == (1, 1)


def test_export_unknown_run_and_corrupt_source(journal: MemoryJournal, tmp_path: Path) -> None:
    """Export refuses an unknown run and a run whose chain is broken, leaving no file."""
    with pytest.raises(UnknownRunError):
        export_run(journal, "nope", tmp_path / "x.rdj")
    frames = journal._state.frames["r1"]
    frames[3] = attrs.evolve(frames[3], payload=encode({"tampered": True}))
    with pytest.raises(JournalCorruptError) as info:
        export_run(journal, "r1", tmp_path / "x.rdj")
    assert info.value.last_good_seq == 2
    assert not (tmp_path / "x.rdj").exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_wrong_magic(tmp_path: Path) -> None:
    """A file that is not an .rdj export is refused by its magic bytes."""
    path = tmp_path / "x.rdj"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    with pytest.raises(JournalCorruptError, match=r"not a redrive \.rdj file") as info:
        RdjJournal(path)
    assert info.value.reason == "magic" and info.value.last_good_seq is None
    path.write_bytes(b"")
    with pytest.raises(JournalCorruptError):
        RdjJournal(path)


def test_every_truncation_names_the_last_good_seq(rdj_path: Path) -> None:
    """Cutting the file at any record boundary or inside a record gives the right last good seq."""
    data = rdj_path.read_bytes()
    offsets = _frame_offsets(data)
    frame_starts = offsets[1:-1]
    for index, start in enumerate(frame_starts):
        for cut in (start, start + 3, start + 20):
            rdj_path.write_bytes(data[:cut])
            with pytest.raises(JournalCorruptError) as info:
                RdjJournal(rdj_path)
            assert info.value.last_good_seq == (index - 1 if index else None)
            assert info.value.reason == "truncated"
    rdj_path.write_bytes(data[: offsets[-1]])  # every frame, no end record
    with pytest.raises(JournalCorruptError, match="without its end record"):
        RdjJournal(rdj_path)


def test_flipped_byte_in_a_frame(rdj_path: Path) -> None:
    """A changed byte inside frame k fails its checksum with last good seq k-1."""
    data = bytearray(rdj_path.read_bytes())
    offsets = _frame_offsets(bytes(data))
    data[offsets[4] + 10] ^= 0x40  # inside frame seq 3
    rdj_path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match="checksum") as info:
        RdjJournal(rdj_path)
    assert info.value.last_good_seq == 2 and info.value.run_id == "r1"


def _rebuild(rdj_path: Path, change: Any) -> None:
    """Rewrite the file's records through ``change(records)`` with valid checksums."""
    data = rdj_path.read_bytes()
    offsets = [*_frame_offsets(data), len(data)]
    records = [(data[a : a + 1], data[a + 5 : b - 8]) for a, b in itertools.pairwise(offsets)]
    records = change(records)
    out = data[:16] + b"".join(rdjmod.record_bytes(tag, body) for tag, body in records)
    rdj_path.write_bytes(out)


def test_reordered_frames_with_valid_checksums(rdj_path: Path) -> None:
    """Swapping two well-formed frame records is caught by the seq/chain check."""
    _rebuild(rdj_path, lambda r: [r[0], r[1], r[3], r[2], *r[4:]])
    with pytest.raises(JournalCorruptError) as info:
        RdjJournal(rdj_path)
    assert info.value.reason == "seq" and info.value.last_good_seq == 0


def test_altered_payload_with_valid_checksum_breaks_the_chain(rdj_path: Path) -> None:
    """A payload rewritten with a fresh record checksum still fails the chain."""

    def change(records: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        body = msgpack.unpackb(records[3][1])
        body[4] = encode({"args": {"amount": 1_000_000}})
        records[3] = (b"F", msgpack.packb(body, use_bin_type=True))
        return records

    _rebuild(rdj_path, change)
    with pytest.raises(JournalCorruptError, match="chain") as info:
        RdjJournal(rdj_path)
    assert info.value.seq == 2 and info.value.last_good_seq == 1


def test_giant_declared_size_is_refused_without_reading(rdj_path: Path) -> None:
    """A record declaring 4 GiB in a small file is refused by its size, not allocated."""
    data = bytearray(rdj_path.read_bytes())
    offsets = _frame_offsets(bytes(data))
    data[offsets[2] + 1 : offsets[2] + 5] = struct.pack(">I", 2**32 - 1)
    rdj_path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match="declares 4294967295 bytes") as info:
        RdjJournal(rdj_path)
    assert info.value.reason == "size" and info.value.last_good_seq == 0
    with pytest.raises(JournalCorruptError, match="limit"):
        RdjJournal(FIXTURES / "pass" / "refunded.rdj", max_record=16)


def test_deep_nesting_is_refused_by_the_writer(tmp_path: Path) -> None:
    """A payload nesting 100,000 deep is refused when written: no journal acknowledges a frame
    its readers would refuse (the reader's refusal of such a file is the next test)."""
    deep = b"\x91" * 100_000 + b"\xc0"
    first = make_frame(
        run_id="h", seq=0, kind="run_start", name="run", payload={}, prev_chain=GENESIS, at=1.0
    )
    hostile = attrs.evolve(first, seq=1, kind="note", payload=deep)
    hostile = attrs.evolve(hostile, chain=hostile.expected_chain(first.chain))
    mem = MemoryJournal()
    mem.create_run(RunRecord(run_id="h"), first)
    with pytest.raises(ValueError, match="payload"):
        mem.append("h", [hostile], expected_seq=1)
    assert [f.seq for f in mem.frames("h")] == [0]


def test_deep_nesting_written_by_hand_is_refused(tmp_path: Path) -> None:
    """A hand-written file with a deeply nested, chained payload gives JournalCorruptError."""
    deep = b"\x91" * 100_000 + b"\xc0"
    first = make_frame(
        run_id="h", seq=0, kind="run_start", name="run", payload={}, prev_chain=GENESIS, at=1.0
    )
    second = attrs.evolve(first, seq=1, kind="note", payload=deep)
    second = attrs.evolve(second, chain=second.expected_chain(first.chain))
    record = RunRecord(run_id="h", status="succeeded", next_seq=2, last_chain=second.chain)
    records = [(b"H", rdjmod.header_bytes(record, {}))]
    for f in (first, second):
        body = [f.seq, f.kind, f.name, f.key, f.payload, f.chain, f.at, f.epoch]
        records.append((b"F", msgpack.packb(body, use_bin_type=True)))
    records.append((b"E", msgpack.packb({"frames": 2, "last_chain": second.chain})))
    path = tmp_path / "h.rdj"
    path.write_bytes(
        rdjmod.preamble_bytes(1) + b"".join(rdjmod.record_bytes(t, b) for t, b in records)
    )
    with pytest.raises(JournalCorruptError, match="payload") as info:
        RdjJournal(path)
    assert info.value.last_good_seq == 0


def test_newer_format_is_refused_clearly(rdj_path: Path) -> None:
    """A file of a newer format version raises JournalFormatError naming both versions."""
    data = rdj_path.read_bytes()
    newer = rdjmod.RDJ_VERSION + 1
    rdj_path.write_bytes(rdjmod.preamble_bytes(newer) + data[16:])
    with pytest.raises(
        JournalFormatError, match=rf"format version {newer}.*reads versions 1 to {newer - 1}"
    ):
        RdjJournal(rdj_path)
    bad = bytearray(data)
    bad[9] = newer  # version changed without its checksum: corruption, not a newer file
    rdj_path.write_bytes(bytes(bad))
    with pytest.raises(JournalCorruptError, match="preamble"):
        RdjJournal(rdj_path)


def _only_corrupt(path: Path, original: bytes, data: bytes) -> None:
    path.write_bytes(data)
    try:
        rj = RdjJournal(path)
        frames = list(rj.frames(rj.run_id))
    except JournalCorruptError as exc:
        assert exc.source == str(path)
        return
    assert data == original and frames


@pytest.mark.parametrize("name", [p.name for p in REAL_FILES])
def test_random_flips_and_cuts_over_real_files(name: str, tmp_path: Path) -> None:
    """300 random byte flips, cuts and splices of each saved run give only JournalCorruptError."""
    source = next(p for p in REAL_FILES if p.name == name)
    original = source.read_bytes()
    path = tmp_path / "fuzz.rdj"
    rng = random.Random(name)
    for _ in range(300):
        data = bytearray(original)
        action = rng.randrange(4)
        if action == 0:
            for _flip in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif action == 1:
            del data[rng.randrange(len(data)) :]
        elif action == 2:
            at = rng.randrange(len(data))
            data[at:at] = os.urandom(rng.randint(1, 40))
        else:
            a, b = sorted(rng.randrange(len(data)) for _ in range(2))
            del data[a:b]
        _only_corrupt(path, original, bytes(data))


@settings(
    max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(
    position=st.floats(min_value=0, max_value=1, exclude_max=True),
    replacement=st.binary(min_size=0, max_size=64),
    cut=st.booleans(),
)
def test_hypothesis_splices_over_a_real_file(
    position: float, replacement: bytes, cut: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any splice of arbitrary bytes into a real journal file gives only JournalCorruptError."""
    original = (FIXTURES / "pass" / "refunded.rdj").read_bytes()
    at = int(position * len(original))
    end = len(original) if cut else at + len(replacement)
    data = original[:at] + replacement + original[end:]
    path = tmp_path_factory.mktemp("fuzz") / "f.rdj"
    _only_corrupt(path, original, data)


@settings(
    max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(tail=st.binary(max_size=300))
def test_hypothesis_arbitrary_bytes_after_the_magic(
    tail: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Arbitrary bytes behind a valid preamble give only JournalCorruptError."""
    path = tmp_path_factory.mktemp("fuzz") / "f.rdj"
    _only_corrupt(path, b"", rdjmod.preamble_bytes(1) + tail)


def test_a_version_1_file_still_reads(rdj_path: Path) -> None:
    """A file written as layout version 1 (before stored values) imports and replays."""
    data = rdj_path.read_bytes()
    rdj_path.write_bytes(rdjmod.preamble_bytes(1) + data[16:])
    journal = RdjJournal(rdj_path)
    assert list(journal.frames(journal.run_id))
