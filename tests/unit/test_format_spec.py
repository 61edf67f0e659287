"""The journal format specification (docs/reference/format.md) holds, in both directions.

- Every committed fixture of every format version (``fixtures/formats/``) and
  every saved run (``fixtures/runs/``) is read by redrive *and* by the
  independent reader in ``tests/spec_reader.py`` (written from the spec alone),
  and both find the same frames.
- Today's writers still produce the current version's fixtures byte for byte
  (a change of format shows up here, not in a user's journal).
- An export of the demo's run reads with the independent reader.
- A run written by the independent writer imports into redrive and replays.
"""

from __future__ import annotations

import datetime as dt
import decimal
import http
import os
import subprocess
import sys
import uuid
import zoneinfo
from pathlib import Path
from typing import Any

import msgpack
import pytest

import redrive
from fixtures.formats import make_fixtures
from redrive.storage._framelog import FrameLog
from redrive.storage._logrecord import parse_record
from redrive.storage.rdj import RdjJournal, export_run, export_text, read_text
from tests import spec_reader as spec

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ROOT / "fixtures" / "formats"
VERSIONS = (1, 2)
SAVED_RUNS = sorted((ROOT / "fixtures" / "runs").rglob("*.rdj"))


def _same(spec_frames: list[spec.SpecFrame], frames: list[redrive.Frame]) -> None:
    assert len(spec_frames) == len(frames)
    for mine, theirs in zip(spec_frames, frames, strict=True):
        assert (
            mine.run_id,
            mine.seq,
            mine.kind,
            mine.name,
            mine.key,
            mine.payload,
            mine.chain,
            mine.at,
            mine.epoch,
        ) == (
            theirs.run_id,
            theirs.seq,
            theirs.kind,
            theirs.name,
            theirs.key,
            theirs.payload,
            theirs.chain,
            theirs.at,
            theirs.epoch,
        )


@pytest.mark.parametrize("version", VERSIONS)
def test_each_rdj_version_reads_alike_in_both_readers(version: int) -> None:
    path = FORMATS / f"v{version}" / "run.rdj"
    mine = spec.read_rdj(path)
    journal = RdjJournal(path)
    assert mine.header["format"] == version
    _same(mine.frames, list(journal.frames(journal.run_id)))
    record = journal.get_run(journal.run_id)
    assert record is not None
    assert (mine.run["status"], mine.run["next_seq"], mine.run["last_chain"]) == (
        record.status,
        record.next_seq,
        record.last_chain,
    )
    assert spec.check_keys(mine.frames) == 5


@pytest.mark.parametrize("version", VERSIONS)
def test_each_text_form_reads_alike_in_both_readers(version: int) -> None:
    path = FORMATS / f"v{version}" / "run.rdj.jsonl"
    mine = spec.read_text(path)
    record, frames = read_text(path)
    _same(mine.frames, frames)
    assert mine.run["last_chain"] == record.last_chain
    _same(mine.frames, spec.read_rdj(FORMATS / f"v{version}" / "run.rdj").frames)


@pytest.mark.parametrize("version", VERSIONS)
def test_each_rdlog_version_reads_alike_in_both_readers(version: int, tmp_path: Path) -> None:
    path = FORMATS / f"v{version}" / "journal.rdlog"
    mine = spec.read_rdlog(path)
    assert mine.format == version and not mine.torn_tail
    theirs = list(FrameLog(str(path), read_only=True).records())
    assert mine.records == theirs
    assert [parse_record(r).tag for r in theirs] == ["frames", "frames", "run", "decision"]
    (run_frames,) = spec.log_frames(mine).values()
    _same(run_frames, list(RdjJournal(FORMATS / f"v{version}" / "run.rdj").frames("spec:format")))
    # a DuckDB journal opened beside the log applies it
    target = tmp_path / "runs.duckdb"
    (tmp_path / "runs.duckdb.rdlog").write_bytes(path.read_bytes())
    journal = redrive.open_journal(str(target))
    try:
        _same(run_frames, list(journal.frames("spec:format")))
    finally:
        journal.close()


def test_a_zero_tail_is_the_end_of_a_log_in_both_readers(tmp_path: Path) -> None:
    """A format-2 log that ends in its writer's preallocated zeros is whole, not torn."""
    data = (FORMATS / "v2" / "journal.rdlog").read_bytes()
    tailed = tmp_path / "tailed.rdlog"
    tailed.write_bytes(data + bytes(65536))
    mine = spec.read_rdlog(tailed)
    assert not mine.torn_tail and len(mine.records) == 4
    assert list(FrameLog(str(tailed), read_only=True).records()) == mine.records
    tailed.write_bytes(data[:-7] + bytes(65536))  # the last record torn inside the tail
    assert spec.read_rdlog(tailed).records == mine.records[:3]
    assert list(FrameLog(str(tailed), read_only=True).records()) == mine.records[:3]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_torn_tail_is_told_apart_from_damage_in_both_readers(
    version: int, tmp_path: Path
) -> None:
    data = (FORMATS / f"v{version}" / "journal.rdlog").read_bytes()
    torn = tmp_path / "torn.rdlog"
    torn.write_bytes(data[:-7])  # the last record's body cut short
    mine = spec.read_rdlog(torn)
    assert mine.torn_tail and len(mine.records) == 3
    assert len(list(FrameLog(str(torn), read_only=True).records())) == 3


def test_payloads_decode_to_the_values_recorded() -> None:
    """Format 2 hands back types and key order; the spec reader rebuilds them from the bytes."""
    mine = spec.read_rdj(FORMATS / "v2" / "run.rdj")
    result = spec.decode(mine.frames[4].payload)["result"]
    assert list(result) == [
        "order_id", "amount", "placed", "tags", "flags", "status", "ref", "raw", "big", "ratio"
    ]  # fmt: skip
    assert result["amount"] == decimal.Decimal("42.50") and str(result["amount"]) == "42.50"
    assert result["placed"] == dt.datetime(
        2026, 3, 29, 1, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")
    )
    assert result["placed"].tzinfo == zoneinfo.ZoneInfo("Europe/Paris")
    assert result["tags"] == ("priority", "eu") and isinstance(result["tags"], tuple)
    assert result["flags"] == frozenset({"paid", "shipped"})
    assert result["status"] is http.HTTPStatus.OK
    assert result["ref"] == uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert result["raw"] == b"\x00\xff" and result["big"] == 2**70
    assert str(result["ratio"]) == "-0.0"
    requests = [p for f, p in zip(mine.frames, spec.expanded_payloads(mine.frames), strict=True)
                if f.kind == "model_request"]  # fmt: skip
    assert len(requests[1]["args"]["body"]["messages"]) == 4
    old = spec.decode(spec.read_rdj(FORMATS / "v1" / "run.rdj").frames[4].payload)["result"]
    assert old["amount"] == decimal.Decimal("42.5")  # canonical: trailing zeros stripped
    assert old["placed"] == result["placed"]


def test_todays_writers_produce_the_committed_fixtures() -> None:
    """A change in the bytes redrive writes is a format change: it must be versioned."""
    for version in VERSIONS:
        folder = FORMATS / f"v{version}"
        assert make_fixtures.rdj_bytes(version) == (folder / "run.rdj").read_bytes()
        assert make_fixtures.rdlog_bytes(version) == (folder / "journal.rdlog").read_bytes()
    text = FORMATS / "v2" / "run.rdj.jsonl"
    journal = RdjJournal(FORMATS / "v2" / "run.rdj")
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"spec-{os.getpid()}.rdj.jsonl"
    try:
        export_text(journal, "spec:format", out)
        assert out.read_bytes() == text.read_bytes()
    finally:
        out.unlink(missing_ok=True)


@pytest.mark.parametrize("path", SAVED_RUNS, ids=lambda p: p.name)
def test_saved_runs_read_alike_in_both_readers(path: Path) -> None:
    mine = spec.read_rdj(path)
    journal = RdjJournal(path)
    _same(mine.frames, list(journal.frames(journal.run_id)))
    assert spec.check_keys(mine.frames) > 0


def test_an_export_of_the_demos_run_reads_with_the_spec_reader(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redrive.cli", "demo", "--dir", str(tmp_path), "--run-id",
         "demo:spec"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    try:
        export_run(journal, "demo:spec", tmp_path / "demo.rdj")
        export_text(journal, "demo:spec", tmp_path / "demo.rdj.jsonl")
        frames = list(journal.frames("demo:spec"))
    finally:
        journal.close()
    binary = spec.read_rdj(tmp_path / "demo.rdj")
    text = spec.read_text(tmp_path / "demo.rdj.jsonl")
    _same(binary.frames, frames)
    _same(text.frames, frames)
    assert binary.run["status"] == "succeeded"
    assert spec.check_keys(binary.frames) >= 5
    kinds = {f.kind for f in binary.frames}
    assert {"run_start", "model_request", "model_response", "tool_start", "tool_done"} <= kinds


def test_a_run_written_from_the_spec_imports_and_resumes(tmp_path: Path) -> None:
    """The independent writer's interrupted run passes redrive's checks and resumes from it.

    The finished tool step replays (the tool does not run again, its stored
    value comes back with its key order); the run then finishes live, and its
    export reads back with the independent reader.
    """
    stored = msgpack.ExtType(10, spec.pack({"ticket": "T-9", "queue": "billing"}))
    args = {"subject": "refund", "customer": "C-7"}
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("run_start", "run", {"entrypoint": None, "flags": {"format": 2}, "input": {"job": 1},
                              "input_fp": spec.fingerprint({"job": 1})}),
        ("tool_start", "open_ticket", {"args": args, "idempotency_key": "spec:w:1:open_ticket",
                                       "read_only": False, "restart_safe": False, "turn": 0}),
        ("tool_done", "open_ticket", {"result": stored, "step": 1}),
    ]  # fmt: skip
    path = tmp_path / "written.rdj"
    written = spec.write_rdj(path, "spec:w", steps, status="running")
    record = RdjJournal(path).get_run("spec:w")
    assert record is not None and record.last_chain == written.run["last_chain"]
    journal = redrive.open_journal(":memory:")
    redrive.import_run(path, journal)
    ran: list[dict[str, str]] = []

    @redrive.tool
    def open_ticket(subject: str, customer: str) -> dict[str, str]:
        ran.append({"subject": subject, "customer": customer})
        return {"ticket": "live"}

    with redrive.run(journal, "spec:w", input={"job": 1}) as run:
        got = open_ticket(subject="refund", customer="C-7")
        run.finish(got["ticket"])
    assert got == {"ticket": "T-9", "queue": "billing"} and list(got) == ["ticket", "queue"]
    assert ran == []
    export_run(journal, "spec:w", tmp_path / "after.rdj")
    after = spec.read_rdj(tmp_path / "after.rdj")
    assert after.run["status"] == "succeeded"
    assert after.frames[:3] == written.frames
    assert spec.decode(after.frames[-1].payload)["output"] == "T-9"


def test_a_newer_version_is_refused_by_both_readers(tmp_path: Path) -> None:
    from redrive.errors import JournalFormatError
    from redrive.storage.rdj import _format as rdj

    data = (FORMATS / "v2" / "run.rdj").read_bytes()
    newer = tmp_path / "newer.rdj"
    newer.write_bytes(rdj.preamble_bytes(3) + data[16:])
    with pytest.raises(spec.SpecError, match="newer"):
        spec.read_rdj(newer)
    with pytest.raises(JournalFormatError):
        RdjJournal(newer)


def test_the_pages_layouts_are_what_the_readers_read() -> None:
    """The layout drawings of docs/reference/format.md agree with the files and both readers."""
    import json
    import re

    from redrive.storage._logformat import _HEAD2, MAGIC

    page = (ROOT / "docs" / "reference" / "format.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```text\n(.*?)^```$", page, re.S | re.M)
    assert len(blocks) == 5, "a layout drawing was added or removed: check it here"
    chain, rdj, run_line, frame_line, rdlog = blocks
    # the chain's head is the frame fields in this order, then the payload
    assert "pack([run_id, seq, kind, name, key, float(at)])" in chain and "|| payload" in chain
    # the .rdj preamble: the magic's bytes as drawn are the file's first bytes
    magic = bytes.fromhex("".join(re.search(r"magic\s+((?:[0-9a-f]{2} ?){8})", rdj)[1].split()))  # type: ignore[index]
    assert magic == spec.RDJ_MAGIC == (FORMATS / "v2" / "run.rdj").read_bytes()[:8]
    assert "tag u8 | body length u32 | body | xxh3-64" in rdj
    # the text form: the keys drawn are the keys written, in order
    lines = (FORMATS / "v2" / "run.rdj.jsonl").read_text(encoding="utf-8").splitlines()
    drawn_run = re.findall(r'"(\w+)":', run_line)
    assert [k for k in drawn_run if k in json.loads(lines[0])] == list(json.loads(lines[0]))
    drawn_frame = [k for k in re.findall(r'"(\w+)":', frame_line) if k != "volatile"][:5]
    assert drawn_frame == list(json.loads(lines[1]))[:5]
    # the .rdlog header: the drawn field widths add up to the header the readers use
    widths = {"u32": 4, "u64": 8}
    fields = re.search(r"^(marker\(4\).*)$", rdlog, re.M)[1].split("|")[:-1]  # type: ignore[index]
    total = sum(
        int(m[1]) if (m := re.search(r"\((\d+)\)", f)) else widths[f.split()[-1]] for f in fields
    )
    assert total == _HEAD2.size == 28
    assert MAGIC == spec.LOG_MAGIC_V2


def test_stored_map_keys_that_are_arrays_decode_in_the_spec_reader() -> None:
    """A stored map's key may be a tuple or frozenset (an array in the bytes), as the spec allows.

    msgpack readers that need hashable keys fail on an array in key position
    unless they decode arrays as immutable (msgpack-python #474/#476 are the
    same trap for integer keys); the independent reader must not.
    """
    from redrive.frames import encode, store

    value: dict[Any, Any] = {
        ("a", 1): "tuple",
        frozenset({"x"}): "frozenset",
        http.HTTPStatus.OK: "enum",
        1: "int",
        (("n",), 2): "nested",
    }
    payload = encode({"result": store(value)[0], "step": 1})
    got = spec.decode(payload)["result"]
    assert got == value and list(got) == list(value)
