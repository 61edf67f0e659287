"""`redrive view`: one self-contained HTML timeline, checked in a real headless Chromium."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.cli import main
from redrive.replay._timeline import _json_for_script, page, render_run, run_data
from tests import sample_run
from tests.docblocks import claimed
from tests.sdkserver import ScriptServer, serve

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
ROOT = Path(__file__).resolve().parents[2]


def chromium() -> str:
    """The headless browser: Debian's ``chromium``. Missing: skip locally, fail in CI."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing in CI: .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def browse(
    page: Path, *, screenshot: Path | None = None, size: tuple[int, int] = (1100, 520)
) -> str:
    """Load ``page`` in headless Chromium, network cut; return the DOM after scripts ran.

    ``screenshot``: also save a PNG of the page at ``size`` (width, height in pixels) there.

    The page's own ``<script>`` elements are cut out of what is returned, so a
    check on the DOM sees what the script drew, not the script's source.
    """
    # a profile of its own per call: two test processes (pytest-xdist workers) never meet
    # in one profile's singleton lock
    with tempfile.TemporaryDirectory(prefix="redrive-chromium-") as profile:
        base = [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--proxy-server=127.0.0.1:9",  # nothing may load from elsewhere
            "--proxy-bypass-list=<-loopback>",
        ]
        url = page.resolve().as_uri()
        dom = subprocess.run(
            [*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
        ).stdout
        dom = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [*base, f"--window-size={size[0]},{size[1]}", f"--screenshot={screenshot}", url],
                capture_output=True,
                timeout=120,
                check=True,
            )
            assert screenshot.stat().st_size > 1000
    return dom


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


@pytest.fixture
def db(server: ScriptServer, tmp_path: Path) -> str:
    """A DuckDB journal with run ``support:42`` and ``support:43`` (a bigger charge)."""
    path = str(tmp_path / "runs.duckdb")
    journal = redrive.open_journal(path)
    sample_run.record(server, journal)
    sample_run.record(server, journal, "support:43", cents=9900)
    journal.close()
    return path


def test_view_renders_in_chromium(db: str, tmp_path: Path) -> None:
    """The page's script ran: four steps drawn with durations, tokens, live mode and the error."""
    page = tmp_path / "one.html"
    assert main(["--journal", db, "view", "support:42", "-o", str(page)]) == 0
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and " src=" not in text
    dom = browse(page, screenshot=ARTIFACTS / "view_one.png")
    assert 'data-rendered="yes"' in dom
    assert re.search(r'<span id="step-count">4</span>', dom)
    assert dom.count('class="step"') == 4
    assert "11→7 tok" in dom and "20→6 tok" in dom
    assert 'class="bar tool error live"' in dom
    assert "model gpt-4o (openai)" in dom


def test_view_two_runs_marks_the_first_divergent_step(db: str, tmp_path: Path) -> None:
    """`redrive view A B`: both runs side by side, the first divergent step marked."""
    page = tmp_path / "two.html"
    assert main(["--journal", db, "view", "support:42", "support:43", "-o", str(page)]) == 0
    dom = browse(page, screenshot=ARTIFACTS / "view_two.png")
    assert 'data-rendered="yes"' in dom
    assert '<span id="step-count">8</span>' in dom
    assert dom.count('class="run"') == 2
    assert 'id="divergence"' in dom
    assert re.search(r'<details class="step divergent" [^>]*id="divergent-0"', dom)
    assert re.search(r'<details class="step divergent" [^>]*id="divergent-1"', dom)
    assert "9900" in dom  # the path diff names what changed


def test_same_runs_show_no_divergence(db: str, tmp_path: Path) -> None:
    """A run compared with itself has no divergence marker."""
    page = tmp_path / "same.html"
    assert main(["--journal", db, "view", "support:42", "support:42", "-o", str(page)]) == 0
    dom = browse(page)
    assert 'data-rendered="yes"' in dom
    assert 'id="divergence"' not in dom and "step divergent" not in dom
    assert "The runs take the same steps and end the same." in dom


def test_recorded_text_is_never_markup(server: ScriptServer, tmp_path: Path) -> None:
    """A tool argument holding markup and a script end tag is text: no element is made of it."""
    journal = redrive.open_journal(str(tmp_path / "h.duckdb"))
    hostile = "</script><img src=x onerror=\"document.title='pwned'\"><b>bold</b>\u2028"
    sample_run.record(server, journal, "hostile", order=hostile)
    page = tmp_path / "hostile.html"
    page.write_text(render_run(journal, "hostile"))
    journal.close()
    dom = browse(page)
    assert 'data-rendered="yes"' in dom
    assert "<img" not in dom and "<b>" not in dom and "pwned" not in dom.split("<body", 1)[0]
    assert "&lt;/script&gt;&lt;img src=x" in dom


def test_view_masks_secrets(server: ScriptServer) -> None:
    """A secret-looking string the journal kept (a tool argument) is masked in the page data."""
    journal = redrive.open_journal(":memory:")
    key = "sk-proj-" + "Z9" * 16
    sample_run.record(server, journal, "secret", order=key)
    data = run_data(journal.frames("secret"), "secret")
    assert key not in repr(data) and key not in render_run(journal, "secret")


def test_run_repr_html(server: ScriptServer) -> None:
    """A Run displays in Jupyter: an iframe holding the page, the steps it replayed marked so."""
    journal = redrive.open_journal(":memory:")
    sample_run.record(server, journal)

    async def replay() -> str:
        client = redrive.wrap(
            openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
        )
        try:
            async with redrive.run(journal, "support:42", input={"order": "A-1"}) as run:
                run.finish(await sample_run.agent(client))
                shown = run._repr_html_()
        finally:
            await client.close()
        return shown

    shown = asyncio.run(replay())
    assert shown.startswith("<iframe") and 'sandbox="allow-scripts"' in shown
    document = html.unescape(shown.split('srcdoc="', 1)[1])
    assert document.startswith("<!doctype html>")
    assert document.count('"mode": "replayed"') == 4 and '"mode": "live"' not in document


def test_docs_view_commands(
    server: ScriptServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commands of docs/how-to/look-at-a-run.md run as printed and write their files."""
    (block,) = claimed("tests/unit/test_view.py::test_docs_view_commands")
    commands = block.code.strip().splitlines()
    assert len(commands) == 3
    page = (ROOT / block.page).read_text()
    assert "](../timeline.png)" in page
    assert (ROOT / "docs" / "timeline.png").stat().st_size > 10_000
    monkeypatch.chdir(tmp_path)
    journal = redrive.open_journal("runs.duckdb")
    sample_run.record(server, journal)
    sample_run.record(server, journal, "support:43", cents=9900)
    journal.close()
    for command in commands:
        words = shlex.split(command)
        assert main(words[1:]) == 0, command
        assert Path(words[-1]).stat().st_size > 1000


def _eventful_run(path: str) -> None:
    """Run ``ops:1`` in the journal at ``path``: a re-attempted, a blocked, an approved step."""
    crash = {"fetch": True, "pay": True}

    @redrive.tool(restart_safe=True)
    def fetch(item: str) -> str:
        if crash["fetch"]:
            crash["fetch"] = False
            raise KeyboardInterrupt  # the worker dies; a restart-safe step runs again
        return item

    @redrive.tool()
    def pay(cents: int) -> str:
        if crash["pay"]:
            crash["pay"] = False
            raise KeyboardInterrupt  # dies inside a side effect: never re-run silently
        return "paid"

    def body(run: redrive.Run) -> None:
        fetch("box")
        pay(100)
        decision = redrive.await_approval("ship", {"item": "box"})
        run.finish({"approved": decision.approved})

    journal = redrive.open_journal(path)
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt), redrive.run(journal, "ops:1") as run:
            body(run)
    with redrive.run(journal, "ops:1", on_in_flight="tell_model") as run:
        body(run)  # suspends at the approval
    journal.close()
    assert main(["--journal", path, "decide", "ops:1", "ship", "--approve", "--by", "alice"]) == 0
    journal = redrive.open_journal(path)
    with redrive.run(journal, "ops:1", on_in_flight="tell_model") as run:
        body(run)
    journal.close()


def test_view_shows_attempts_blocked_steps_and_approvals(tmp_path: Path) -> None:
    """A run that crashed twice and waited for a person: attempts, a blocked step, an approval."""
    db = str(tmp_path / "ops.duckdb")
    _eventful_run(db)
    page = tmp_path / "ops.html"
    assert main(["--journal", db, "view", "ops:1", "-o", str(page)]) == 0
    dom = browse(page, screenshot=ARTIFACTS / "view_ops.png")
    assert 'data-rendered="yes"' in dom
    assert "2 attempts" in dom
    assert re.search(r'class="bar tool blocked live"', dom)
    assert "approval ship" in dom and "approved by alice" in dom
    assert '<span class="badge succeeded">succeeded</span>' in dom


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(value=JSON, tail=st.sampled_from(["</script>", "<!--", "<script>", "]]>", "\u2028", "&lt;"]))
def test_page_data_cannot_leave_its_script_element(value: Any, tail: str) -> None:
    """Recorded data embeds as JSON without ``<``, ``>`` or ``&`` and reads back the same."""
    data = {"v": value, "t": tail}
    embedded = _json_for_script(data)
    assert not set(embedded) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(embedded) == data
    document = page([{"run_id": tail, "steps": [], "status": "x", "duration_ms": 0}], None)
    head, _, rest = document.partition('<script type="application/json" id="redrive-data">')
    title = head.split("<title>", 1)[1].split("</title>", 1)[0]
    assert "<" not in title and ">" not in title
    assert rest.count("</script>") == 2  # the data element's end and the code element's end


def test_view_of_an_unknown_run_exits_3(db: str, tmp_path: Path, capsys: Any) -> None:
    """A run that is not in the journal: exit 3 and no file; ``--json`` names the file written."""
    page = tmp_path / "none.html"
    assert main(["--journal", db, "view", "support:999", "-o", str(page)]) == 3
    assert not page.exists()
    capsys.readouterr()
    assert main(["--journal", db, "--json", "view", "support:42", "-o", str(page)]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(page), "runs": ["support:42"]}


def _interrupted_run(path: str) -> None:
    """Run ``pay:1`` at ``path``: a model call, a payment killed in its body, a person's
    resolution (who and why), then a resume by another worker that replays the model call."""
    state = {"crash": True}

    @redrive.model
    def plan(goal: str) -> dict[str, Any]:
        return {"model": "gpt-4o", "usage": {"prompt_tokens": 100, "completion_tokens": 20}}

    @redrive.tool()
    def pay(cents: int) -> str:
        if state["crash"]:
            state["crash"] = False
            raise KeyboardInterrupt  # the worker dies inside the side effect
        return "paid"

    def body(run: redrive.Run) -> None:
        plan("refund")
        pay(500)
        plan("confirm")
        run.finish("ok")

    journal = redrive.open_journal(path)
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "pay:1") as run:
        body(run)
    journal.close()
    argv = ["--journal", path, "resolve", "pay:1", "3", "--done", '"paid"', "--by", "alice"]
    assert main([*argv, "--reason", "the bank shows the payment"]) == 0
    journal = redrive.open_journal(path)
    with redrive.run(journal, "pay:1") as run:
        body(run)
    journal.close()


def test_view_marks_the_interruption_resume_and_resolution(tmp_path: Path) -> None:
    """Issue 25 #5: the crash and the resume are marked (which worker), the resolution says
    who and why, the in-flight step's bar is its own time (it ends at the crash, not at the
    resolution), and the page shows the usage and what replay saved."""
    db = str(tmp_path / "pay.duckdb")
    _interrupted_run(db)
    journal = redrive.open_journal(db)
    data = run_data(journal.frames("pay:1"), "pay:1")
    journal.close()
    events = {e["kind"]: e for e in data["events"]}
    assert set(events) == {"interrupted", "resumed", "resolved"}
    assert events["resolved"]["by"] == "alice"
    assert events["interrupted"]["worker"] != events["resumed"]["worker"]
    pay = next(s for s in data["steps"] if s["name"] == "pay")
    assert pay["settled"] == "resolved by alice: the bank shows the payment"
    # the bar ends where the worker stopped, before the resolution was written
    assert pay["start_ms"] + pay["duration_ms"] <= events["interrupted"]["start_ms"] + 0.001
    assert events["interrupted"]["start_ms"] < events["resolved"]["start_ms"]
    assert data["usage"]["spent"]["calls"] == 2 and data["usage"]["saved"]["calls"] == 1
    page = tmp_path / "pay.html"
    assert main(["--journal", db, "view", "pay:1", "-o", str(page)]) == 0
    dom = browse(page, screenshot=ARTIFACTS / "view_interrupted.png")
    assert 'data-rendered="yes"' in dom
    assert 'data-event="interrupted"' in dom and 'data-event="resumed"' in dom
    assert 'class="bar gap interrupted"' in dom
    assert "resolved by alice: the bank shows the payment" in dom
    assert "usage: 2 live model call(s) · 200→40 tok" in dom
    assert "replay saved: 1 call(s) · 100→20 tok" in dom
    # docs/timeline.md shows this page (made from this test's screenshot)
    assert "](timeline-interrupted.png)" in (ROOT / "docs" / "timeline.md").read_text()
    assert (ROOT / "docs" / "timeline-interrupted.png").stat().st_size > 10_000
