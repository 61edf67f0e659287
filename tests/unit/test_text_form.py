"""The JSON Lines text form of a run: readable in a review, lossless back to the same frames."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive._check import collect_sources
from redrive.errors import JournalCorruptError
from redrive.storage import MemoryJournal
from redrive.storage.rdj import RdjJournal, export_run, import_run, read_text
from tests.strategies import text, values

ROOT = Path(__file__).resolve().parents[2]


def _record(journal: MemoryJournal, args: Any, result: Any, reply: Any) -> str:
    @redrive.model(name="model:any")
    def model(payload: Any) -> Any:
        return reply

    @redrive.tool(restart_safe=True)
    def tool(value: Any) -> Any:
        return result

    with redrive.run(journal, "text:1", input={"x": args}) as run:
        model({"messages": [args, args], "extra": args})
        model({"messages": [args, args, args], "extra": args})  # a prefix delta
        tool(args)
        run.finish({"out": result})
    return "text:1"


def _frames(journal: Any, run_id: str) -> list[tuple[int, str, str, str, bytes, str, float]]:
    return [
        (f.seq, f.kind, f.name, f.key, f.payload, f.chain, f.at) for f in journal.frames(run_id)
    ]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(args=values, result=values, reply=values)
def test_rdj_to_text_to_rdj_keeps_every_frame_and_its_chain(
    tmp_path_factory: pytest.TempPathFactory, args: Any, result: Any, reply: Any
) -> None:
    """Issue 17 #10, round trip: .rdj -> .jsonl -> .rdj keeps every frame's bytes and chain,
    whatever the recorded values (bytes, datetimes, big ints, non-ASCII text...)."""
    folder = tmp_path_factory.mktemp("text")
    journal = MemoryJournal()
    run_id = _record(journal, args, result, reply)
    export_run(journal, run_id, folder / "a.rdj")
    source = RdjJournal(folder / "a.rdj")
    export_run(source, run_id, folder / "a.rdj.jsonl")
    back = MemoryJournal()
    import_run(folder / "a.rdj.jsonl", back)
    export_run(back, run_id, folder / "b.rdj")
    again = RdjJournal(folder / "b.rdj")
    assert _frames(again, run_id) == _frames(source, run_id)
    original = source.get_run(run_id)
    copied = again.get_run(run_id)
    assert original is not None and copied is not None
    assert (copied.status, copied.output, copied.last_chain) == (
        original.status,
        original.output,
        original.last_chain,
    )
    # the run keeps its timestamps, as an .rdj import does (import_run's contract)
    assert (copied.created_at, copied.updated_at) == (original.created_at, original.updated_at)


@pytest.mark.parametrize("finished", [False, True], ids=["running", "finished"])
def test_a_text_import_keeps_the_runs_timestamps_like_an_rdj_import(
    tmp_path: Path, finished: bool
) -> None:
    """``.rdj`` -> text -> import: ``updated_at`` is the run's, not the import's wall time.

    A running run (exported to resume elsewhere) and a finished one alike; the
    ``.rdj`` import of the same run is the reference.
    """
    journal = MemoryJournal()
    with redrive.run(journal, "text:times", input={"x": 1}) as run:
        redrive.tool(read_only=True)(lambda: 1)()
        if not finished:  # exported mid-run, to resume elsewhere
            export_run(journal, "text:times", tmp_path / "t.rdj")
            export_run(journal, "text:times", tmp_path / "t.rdj.jsonl")
        run.finish("done")
    if finished:
        export_run(journal, "text:times", tmp_path / "t.rdj")
        export_run(journal, "text:times", tmp_path / "t.rdj.jsonl")
    by_rdj, by_text = MemoryJournal(), MemoryJournal()
    a = import_run(tmp_path / "t.rdj", by_rdj)
    b = import_run(tmp_path / "t.rdj.jsonl", by_text)
    assert a.status == ("succeeded" if finished else "running")
    assert (b.status, b.created_at, b.updated_at) == (a.status, a.created_at, a.updated_at)
    assert b.lease_owner is None


@given(
    value=st.dictionaries(
        st.sampled_from(["$ext", "$map", "a", "$bytes", "$stored", "$prefix"]), text, max_size=4
    )
)
def test_user_keys_that_look_like_tags_survive(value: dict[str, str]) -> None:
    """A recorded map with keys starting ``$`` is written as a ``$map`` and read back as itself."""
    from redrive.storage.rdj._text import _from_json, _to_json

    assert _from_json(json.loads(json.dumps(_to_json(value)))) == value


def test_each_step_is_one_readable_line_with_volatile_fields_last(tmp_path: Path) -> None:
    """Issue 17 #10: one frame a line, keys in a fixed order, the payload as JSON, and the
    volatile fields (wall time, chain) in one trailing ``volatile`` object."""
    journal = MemoryJournal()
    _record(journal, {"order": "O-1"}, {"refund": "R-1"}, {"text": "ok"})
    path = tmp_path / "run.rdj.jsonl"
    export_run(journal, "text:1", path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    # the output is a stored value (kept as the loop finished with it), shown as one
    assert lines[0]["redrive"] == "run" and lines[0]["output"] == {
        "data": {"$stored": {"out": {"refund": "R-1"}}}
    }
    for line in lines[1:]:
        assert list(line) == ["seq", "kind", "name", "key", "data", "volatile"]
        # a request's started_at, the worker that started the run: volatile data
        wall_clock = ["data"] if line["kind"] in ("model_request", "run_start") else []
        assert list(line["volatile"]) == ["at", "chain", "epoch", *wall_clock]
        assert "started_at" not in line["data"] and "worker" not in line["data"]
    tool = next(line for line in lines[1:] if line["kind"] == "tool_done")
    assert tool["data"]["result"] == {"$stored": {"refund": "R-1"}}
    assert "R-1" in path.read_text()


def test_a_hand_edit_is_refused(tmp_path: Path) -> None:
    """Changing a recorded value in the text breaks its chain: import refuses it."""
    journal = MemoryJournal()
    _record(journal, {"amount": 5}, {"refund": "R-1"}, {"text": "ok"})
    path = tmp_path / "run.rdj.jsonl"
    export_run(journal, "text:1", path)
    path.write_text(path.read_text().replace('"amount": 5', '"amount": 6'))
    with pytest.raises(JournalCorruptError):
        read_text(path)


def test_textconv_prints_an_rdj_file_as_its_text_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``redrive textconv FILE.rdj`` (the .gitattributes diff driver) prints the same lines as
    the exported text form."""
    rdj = ROOT / "fixtures" / "runs" / "pass" / "refunded.rdj"
    assert (
        cli.main(
            [
                "--journal",
                str(rdj),
                "export",
                "refund:A-100:refunded",
                "-o",
                str(tmp_path / "r.jsonl"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert cli.main(["textconv", str(rdj)]) == cli.EXIT_OK
    assert capsys.readouterr().out == (tmp_path / "r.jsonl").read_text()


def test_special_floats_survive() -> None:
    """NaN and infinities, which JSON lacks, are tagged and read back."""
    from redrive.storage.rdj._text import _from_json, _to_json

    back = _from_json(json.loads(json.dumps(_to_json([math.inf, -math.inf, math.nan]))))
    assert back[:2] == [math.inf, -math.inf] and math.isnan(back[2])


def test_check_show_and_update_take_the_text_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fixture kept as text is checked, shown, diffed and updated like an .rdj file; an
    update rewrites it in text form, as a reviewer reads it."""
    monkeypatch.chdir(ROOT)
    fixture = tmp_path / "prompt.rdj.jsonl"
    source = RdjJournal(ROOT / "fixtures" / "runs" / "fail" / "prompt.rdj")
    export_run(source, source.run_id, fixture)
    assert redrive.check_run(fixture).outcome == "diverged"
    assert collect_sources([tmp_path]) == [str(fixture)]
    assert cli.main(["show", str(fixture)]) == cli.EXIT_OK
    assert "model:support" in capsys.readouterr().out
    assert cli.main(["check", "--update", "--write", str(fixture)]) == cli.EXIT_OK
    assert redrive.check_run(fixture).passed
    first = json.loads(fixture.read_text().split("\n")[1])
    assert first["kind"] == "run_start"
    assert cli.main(["check", str(tmp_path)]) == cli.EXIT_OK
