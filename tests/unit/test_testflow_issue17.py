"""Issue 17 (outside tester, second round): the pytest plugin and test workflows.

Each test here failed on main before the fix; the outside scripts are in
``/work/wt/outside17`` (t2, t4, t7, o1, o2, o3).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive.errors import DivergenceError, ReplayMissError
from redrive.frames import GENESIS, make_frame
from redrive.replay import current_tools, unknown_live_tools
from redrive.storage import MemoryJournal
from redrive.storage.rdj import export_run, import_run
from redrive.storage.rdj._text import frame_line, read_text
from tests.conftest import Drive, Loop

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


APP = """
import os
import redrive

@redrive.model(name="model:classify")
def classify(text):
    return {"action": "refund"}

@redrive.tool(read_only=True)
def lookup(order_id):
    return {"order": order_id}

@redrive.tool(restart_safe=True)
def refund(order_id):
    with open(os.environ["SIDE_LOG"], "a") as log:
        log.write("refund\\n")
    return {"refunded": order_id}

def handle(order_id):
    classify("order " + order_id)
    if os.environ.get("DROP") != "lookup":
        lookup(order_id)
    if os.environ.get("DROP") != "refund":
        refund(order_id)
    return "ok"

def job(job_id):
    with redrive.run("memory://", "support:" + job_id):
        return handle(job_id)
"""

TEST = """
import os
import pytest
import app

@pytest.mark.redrive{marker}
def test_job(redrive_run):
    if os.environ.get("OPENED"):
        assert app.job(os.environ.get("JOB", "7")) == "ok"
    else:
        assert app.handle("A-1") == "ok"
"""


def _project(pytester: pytest.Pytester, marker: str = "") -> None:
    pytester.makepyfile(app=APP, test_d=TEST.format(marker=marker))
    pytester.syspathinsert()


def _env(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester, **env: str) -> None:
    monkeypatch.setenv("SIDE_LOG", str(pytester.path / "side.log"))
    for name in ("DROP", "OPENED", "JOB"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


# -- 1. t7: an unused side-effecting tool step fails replay-only tests ---------------------


@pytest.mark.parametrize("opened", ["", "1"], ids=["own run", "run opened by the code"])
def test_a_dropped_side_effect_fails_ci_replay_in_the_tests_own_run_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, opened: str
) -> None:
    """t7 (temporal sdk-go#983): the code no longer makes a recorded refund. On main the test's
    own run passed with a summary line while a run the code opened failed: one rule now."""
    _project(pytester)
    _env(monkeypatch, pytester, OPENED=opened)
    _run(pytester).assert_outcomes(passed=1)
    _env(monkeypatch, pytester, OPENED=opened, DROP="refund")
    result = _run(pytester, "--redrive-record-mode=none")
    assert result.ret != 0
    out = result.stdout.str()
    assert "refund" in out
    assert "pytest test_d.py::test_job --redrive-record-mode=rewrite" in out


def test_a_dropped_read_only_lookup_stays_a_summary_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unused read-only lookups (and model steps) of the test's own run are listed, not failed."""
    _project(pytester)
    _env(monkeypatch, pytester)
    _run(pytester).assert_outcomes(passed=1)
    _env(monkeypatch, pytester, DROP="lookup")
    result = _run(pytester, "--redrive-record-mode=none")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "recorded journals not used completely" in out and "lookup" in out


# -- 2. t2: rewrite replaces the recording only when the test passes -------------------------


def test_a_failing_rewrite_keeps_the_recording_and_its_opened_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """t2 (pytest-recording#81): on main, rewrite deleted the file (and ``.runs/``) before the
    test ran, so a failing re-record left nothing to replay."""
    _project(pytester)
    _env(monkeypatch, pytester, OPENED="1")
    _run(pytester).assert_outcomes(passed=1)
    files = sorted(p for p in (pytester.path / "journals").rglob("*") if p.is_file())
    before = {p: p.read_bytes() for p in files}
    assert any(".runs" in str(p) for p in files)
    pytester.makepyfile(test_d=TEST.format(marker="") + "    assert False\n")
    _run(pytester, "--redrive-record-mode=rewrite").assert_outcomes(failed=1)
    assert {p: p.read_bytes() for p in files} == before
    pytester.makepyfile(test_d=TEST.format(marker=""))
    _run(pytester, "--redrive-record-mode=none").assert_outcomes(passed=1)


def test_rewrite_records_the_opened_runs_live_not_from_the_old_files(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ultimate-notion#383: a rewrite replayed stale shared-fixture cassettes. Here the runs the
    code opens (``.runs/``) are recorded live again on rewrite, and the stale one goes."""
    _project(pytester)
    _env(monkeypatch, pytester, OPENED="1", JOB="7")
    _run(pytester).assert_outcomes(passed=1)
    side = pytester.path / "side.log"
    assert side.read_text().split() == ["refund"]
    _env(monkeypatch, pytester, OPENED="1", JOB="8")
    _run(pytester, "--redrive-record-mode=rewrite").assert_outcomes(passed=1)
    assert side.read_text().split() == ["refund", "refund"]
    runs = sorted(p.name for p in (pytester.path / "journals").rglob("*.runs/*"))
    assert runs == ["support%3A8.rdj"]


# -- 3. t4 + o2: the caller line in replay misses and live-tool divergences -----------------


def _classify_orders(journal: MemoryJournal, times: int, **options: Any) -> None:
    @redrive.model(name="model:classify")
    def classify(text: str) -> str:
        return "refund"

    with redrive.run(journal, "r", **options):
        for _ in range(times):
            classify("order A-1")


def test_a_repeated_call_recorded_once_names_the_replayed_seq_and_the_caller() -> None:
    """t4 (vcrpy#929): the same call made twice where the record has it once. On main the
    ReplayMissError said only "no unconsumed recorded step of that kind", and no caller."""
    journal = MemoryJournal()
    _classify_orders(journal, 1)
    with pytest.raises(ReplayMissError) as caught:
        _classify_orders(journal, 2, live=False)
    message = caught.value.message
    assert "an identical model step at seq 1 was already replayed" in message
    assert "called from: " in message and "test_testflow_issue17.py" in message
    assert "in _classify_orders" in message


def _order(journal: MemoryJournal, extra: int, **options: Any) -> None:
    @redrive.tool(restart_safe=False)
    def create_order(amount: int) -> dict[str, int]:
        return {"amount": amount + extra}

    with redrive.run(journal, "r", **options):
        create_order(5)


def test_a_live_tool_divergence_names_the_caller() -> None:
    """o2: the live-tool outcome divergence carries ``called from: file:line in fn``."""
    journal = MemoryJournal()
    _order(journal, 0)
    with pytest.raises(DivergenceError) as caught:
        _order(journal, 1, live=False, live_tools=["create_order"])
    assert "$.result.amount: 5 -> 6" in caught.value.message
    assert caught.value.caller is not None and "in _order" in caught.value.caller
    assert f"called from: {caught.value.caller}" in caught.value.message


# -- 4. o2: live_tools names that match no tool are an error --------------------------------


def test_a_live_tools_typo_fails_the_run(drive: Drive) -> None:
    """o2: ``live_tools=["create_ordr"]`` replayed silently with no body run on main."""

    @drive.tool(restart_safe=False)
    def create_order(amount: int) -> int:
        return amount

    def loop(run: redrive.Run) -> Loop:
        return (yield create_order(5))

    journal = MemoryJournal()
    drive.run(journal, "r", loop)
    with pytest.raises(ValueError, match=r"'create_ordr' \(did you mean 'create_order'\?\)"):
        drive.run(journal, "r", loop, live=False, live_tools=["create_ordr"])


@pytest.mark.parametrize("how", ["marker", "option"])
def test_a_live_tools_typo_fails_the_plugin_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """o2: the marker's ``live_tools`` and ``--redrive-live-tools`` with a typo passed on main."""
    _project(pytester)
    _env(monkeypatch, pytester)
    _run(pytester).assert_outcomes(passed=1)
    if how == "marker":
        _project(pytester, marker='(live_tools=["refnd"])')
        result = _run(pytester, "--redrive-record-mode=none")
    else:
        result = _run(pytester, "--redrive-record-mode=none", "--redrive-live-tools=refnd")
    assert result.ret != 0
    out = result.stdout.str() + result.stderr.str()
    assert "'refnd' (did you mean 'refund'?)" in out


names = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)


@given(asked=st.lists(names, max_size=4), recorded=st.sets(names, max_size=4))
def test_unknown_live_tools_names_exactly_the_names_no_tool_has(
    asked: list[str], recorded: set[str]
) -> None:
    """The kind: a name is unknown iff no tool of the process or the journal has it."""
    problem = unknown_live_tools(asked, recorded)
    unknown = set(asked) - set(recorded) - set(current_tools())
    assert (problem is None) == (not unknown)
    for name in unknown:
        assert problem is not None and repr(name) in problem
    assert unknown_live_tools(True, ()) is None and unknown_live_tools(False, ()) is None


# -- 5. o1: UnknownRunError in a plugin test ------------------------------------------------


def test_an_unknown_run_in_a_test_names_the_recorded_runs_and_the_command(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """o1: the code opened ``support:8`` where the test recorded ``support:7``."""
    _project(pytester)
    _env(monkeypatch, pytester, OPENED="1", JOB="7")
    _run(pytester).assert_outcomes(passed=1)
    _env(monkeypatch, pytester, OPENED="1", JOB="8")
    result = _run(pytester, "--redrive-record-mode=none")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "UnknownRunError" in out and "'support:7'" in out
    assert "pytest test_d.py::test_job --redrive-record-mode=rewrite" in out


# -- 6. o3: re-recording the same behaviour changes only volatile fields --------------------


def _record(journal: MemoryJournal) -> None:
    @redrive.model(name="model:classify")
    def classify(text: str) -> str:
        return "refund"

    @redrive.tool(restart_safe=True)
    def refund(order_id: str) -> dict[str, str]:
        return {"refunded": order_id}

    with redrive.run(journal, "support:7", input={"job": "7"}) as run:
        classify("order 7")
        classify("order 7, again")
        refund("7")
        run.finish("ok")


def _stable(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in line.items() if k != "volatile"} for line in lines]


def test_recording_twice_gives_the_same_text_but_volatile(tmp_path: Path) -> None:
    """o3: on main a model request's ``started_at`` sat in ``data``, so every re-record
    changed the review diff. The frames (and their chain) still round-trip exactly."""
    paths = []
    for name in ("a", "b"):
        journal = MemoryJournal()
        _record(journal)
        path = tmp_path / f"{name}.rdj.jsonl"
        export_run(journal, "support:7", path)
        back = MemoryJournal()
        import_run(path, back)
        assert [(f.payload, f.chain) for f in back.frames("support:7")] == [
            (f.payload, f.chain) for f in journal.frames("support:7")
        ]
        paths.append(path)
    assert _stable(paths[0]) == _stable(paths[1])
    requests = [json.loads(x) for x in paths[0].read_text().splitlines()[1:]]
    assert any("started_at" in r["volatile"].get("data", {}) for r in requests)


def _storable(data: dict[str, Any]) -> bool:
    """A model request payload the one validator accepts (the writer refuses the others)."""
    from redrive.frames import GENESIS, make_frame
    from redrive.storage import frame_problem

    frame = make_frame(
        run_id="r", seq=0, kind="model_request", name="model:m", key="0" * 32,
        payload=data, prev_chain=GENESIS, at=1.5,
    )  # fmt: skip
    return frame_problem(frame) is None


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(
    data=st.dictionaries(
        st.sampled_from(["args", "issue", "started_at", "turn", "view", "$x", "zz"]),
        st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    )
    .map(lambda d: {**d, "turn": abs(d["turn"])} if type(d.get("turn")) is int else d)
    .filter(_storable)
)
def test_any_model_request_payload_round_trips_through_its_line(
    tmp_path_factory: pytest.TempPathFactory, data: dict[str, Any]
) -> None:
    """The kind: moving wall-clock keys to ``volatile`` never changes a frame's bytes, whatever
    the payload's keys, order or values (a key that cannot move exactly stays in ``data``)."""
    frame = make_frame(
        run_id="r",
        seq=0,
        kind="model_request",
        name="model:m",
        key="0" * 32,
        payload=data,
        prev_chain=GENESIS,
        at=1.5,
    )
    folder = tmp_path_factory.mktemp("line")
    head = {
        "redrive": "run",
        "format": 1,
        "run_id": "r",
        "status": "running",
        "entrypoint": None,
        "input_fp": "",
        "output": None,
        "error": None,
        "volatile": {"frames": 1},
    }
    path = folder / "r.rdj.jsonl"
    path.write_text(json.dumps(head) + "\n" + frame_line(frame) + "\n")
    _, frames = read_text(path)
    assert (frames[0].payload, frames[0].chain) == (frame.payload, frame.chain)
    line = json.loads(frame_line(frame))
    assert "started_at" not in (line.get("data") or {}) or "$map" in (line.get("data") or {})
