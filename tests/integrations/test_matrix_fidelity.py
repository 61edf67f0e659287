"""The fidelity cells of the conformance matrix can fail (issue 27): none is vacuous.

The cells ``openai-reasoning``, ``agents-reasoning``, ``pydantic-thinking``
(tests/integrations/matrix_scenarios.py, drivers in matrix_signed.py) and
``anthropic-thinking`` (matrix_more.py) hold
only if the signed or encrypted content comes back byte for byte. Here:

* the scripted server's check refuses the content altered anywhere, or left
  out (a property over every string of it), and takes it as sent;
* the same driver, the real package, one run resumed after a provider error
  at the model call after the tool (the matrix's ``error_2``): with the
  scrubber's signed-content rule broken (it masks the secret-looking text
  inside, as it does anywhere else) the resumed request is refused with the
  server's 400, and a replay hands the loop content that is not the
  provider's, which the cell's ``expect`` tells; with the rule in place the
  same resume finishes with the content as sent.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redrive import _scrub, _scrub_stream
from tests.integrations.conftest import need
from tests.integrations.matrix_cells import SCENARIOS, Scenario
from tests.integrations.matrix_child import _run_job
from tests.integrations.matrix_scripts import REASONING, THINKING
from tests.sdkserver import Reply, serve

#: the fidelity scenarios, by name
SIGNED_NAMES = ("openai-reasoning", "agents-reasoning", "pydantic-thinking", "anthropic-thinking")
FIDELITY = {s.name: s for s in SCENARIOS if s.name in SIGNED_NAMES}


def _second_check(scenario: Scenario) -> Any:
    """The check of the scripted turn that receives the content back."""
    check = scenario.script()[1].check
    assert check is not None, scenario.name
    return check


def _body(name: str, content: Any) -> bytes:
    """A request carrying ``content`` back where the scenario's provider expects it."""
    if name in ("pydantic-thinking", "anthropic-thinking"):
        messages = [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [*content, {"type": "tool_use", "id": "toolu_1"}]},
        ]
        return json.dumps({"messages": messages}).encode()
    return json.dumps({"input": [{"role": "user", "content": "hi"}, *content]}).encode()


def _original(name: str) -> dict[str, Any]:
    return THINKING if name.endswith("thinking") else REASONING


def _strings(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every string in ``node`` (but the ``type`` tags)."""
    if isinstance(node, dict):
        return [p for k, v in node.items() if k != "type" for p in _strings(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _strings(v, (*path, i))]
    return [path] if isinstance(node, str) else []


@pytest.mark.parametrize("name", SIGNED_NAMES)
def test_the_server_takes_the_content_as_sent(name: str) -> None:
    """The original content passes the check (the cell can succeed)."""
    assert _second_check(FIDELITY[name])(_body(name, [copy.deepcopy(_original(name))])) is None


@pytest.mark.parametrize("name", SIGNED_NAMES)
def test_the_server_refuses_the_content_left_out(name: str) -> None:
    """A request without the content is refused (a loop that drops it cannot pass)."""
    refused = _second_check(FIDELITY[name])(_body(name, []))
    assert isinstance(refused, Reply) and refused.status == 400


@pytest.mark.parametrize("name", SIGNED_NAMES)
@given(data=st.data())
def test_the_server_refuses_the_content_altered_anywhere(name: str, data: st.DataObject) -> None:
    """Any string of the content changed (a mask, one character) is refused with a 400."""
    original = _original(name)
    path = data.draw(st.sampled_from(_strings(original)))
    altered = copy.deepcopy(original)
    node: Any = altered
    for step in path[:-1]:
        node = node[step]
    before = node[path[-1]]
    after = data.draw(
        st.sampled_from(["[REDACTED]", before + " ", before[:-1]]) | st.text(max_size=8)
    )
    if after == before:
        after = before + "x"
    node[path[-1]] = after
    refused = _second_check(FIDELITY[name])(_body(name, [altered]))
    assert isinstance(refused, Reply) and refused.status == 400, (path, after)


def _broken_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the scrubber's signed-content rule: signed content is scrubbed like any other."""
    monkeypatch.setattr(_scrub, "signed", lambda node: False)
    monkeypatch.setattr(_scrub_stream, "signed", lambda node: False)
    monkeypatch.setattr(_scrub, "holds_signed", lambda text: True)


def _job(name: str, work: Path, url: str, mode: str = "live") -> dict[str, Any]:
    work.mkdir(exist_ok=True)
    return {
        "cell": f"{name}@error_2",
        "scenario": name,
        "run_id": f"fidelity:{name}",
        "journal": str(work / "runs.duckdb"),
        "effects": str(work / "effects.log"),
        "workdir": str(work),
        "base_url": url + "/v1",
        "mode": mode,
        "kill": None,
    }


def _fault() -> Reply:
    error = {"type": "overloaded_error", "message": "503: try again later"}
    return Reply(status=503, body={"type": "error", "error": error})


def _attempt(name: str, job: dict[str, Any]) -> Any:
    """One attempt of the scenario's run (the matrix child's job): its answer or its error."""
    from tests.integrations.matrix_more import MORE_DRIVERS
    from tests.integrations.matrix_signed import SIGNED_DRIVERS

    drive, face = {**MORE_DRIVERS, **SIGNED_DRIVERS}[name]
    try:
        return _run_job(job, drive, face)
    except Exception as exc:
        return exc


def _resumed(name: str, work: Path) -> tuple[Any, list[bytes]]:
    """Record the first turn, fail the second with a 503 (the job gives up), then resume.

    Returns what the resume returned (or the error it raised) and the bodies
    the server received.
    """
    first, second = FIDELITY[name].script()
    with serve() as server:
        server.add(first, _fault(), second)
        failed = _attempt(name, _job(name, work, server.url))
        assert "503" in str(failed), failed
        outcome = _attempt(name, _job(name, work, server.url))
        return outcome, [r.body for r in server.requests]


def _replayed(name: str, work: Path) -> tuple[Any, Any]:
    """Run the scenario through live, then replay it offline: both answers (or errors)."""
    with serve() as server:
        server.add(*FIDELITY[name].script())
        live = _attempt(name, _job(name, work, server.url))
        offline = _attempt(name, _job(name, work, server.url, "offline"))
        assert len(server.requests) == 2, server.requests
    return live, offline


def _need(scenario: Scenario) -> None:
    if scenario.family not in ("openai", "anthropic"):
        need(scenario.family)


def _expected(scenario: Scenario, output: Any) -> bool:
    """Whether ``output`` has what the cell expects (its ``verdict`` compares the same)."""
    return isinstance(output, dict) and all(output.get(k) == v for k, v in scenario.expect.items())


@pytest.mark.parametrize("name", SIGNED_NAMES)
def test_a_resume_and_a_replay_give_the_content_as_the_provider_sent_it(
    name: str, tmp_path: Path
) -> None:
    """The control: the recorded turn replayed, its content goes back and is taken."""
    scenario = FIDELITY[name]
    _need(scenario)
    outcome, bodies = _resumed(name, tmp_path / "resumed")
    assert len(bodies) == 3, bodies  # the first turn was not asked again
    assert _expected(scenario, outcome), outcome
    live, offline = _replayed(name, tmp_path / "replayed")
    assert _expected(scenario, live) and offline == live, (live, offline)


@pytest.mark.parametrize("name", SIGNED_NAMES)
def test_with_the_signed_rule_broken_the_cell_fails(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Signed content masked like any text: the resume is refused, the replay is not the same."""
    scenario = FIDELITY[name]
    _need(scenario)
    _broken_rule(monkeypatch)
    outcome, bodies = _resumed(name, tmp_path / "resumed")
    assert isinstance(outcome, Exception), outcome
    assert "Invalid signature" in str(outcome) or "could not be verified" in str(outcome), outcome
    assert b"[REDACTED]" in bodies[-1]
    live, offline = _replayed(name, tmp_path / "replayed")
    assert _expected(scenario, live), live  # the live loop got what was sent
    assert not _expected(scenario, offline), offline  # the replay did not
