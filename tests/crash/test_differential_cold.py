"""The differential test's sample in fresh processes, with real kills (issue 23, CONTRACT C8).

Each attempt of a model program runs in a fresh process (``tests/model/child.py``: cold
imports, first SDK call), the first one SIGKILLed at a step boundary for some cases. The
tool bodies of the resume are those the reference model (``tests/model/resume_model.py``)
names, each side effect runs at most once per idempotency key (an fsynced ledger outside
the processes), and a replay in yet another fresh process hands every caller what it got.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.model import driver
from tests.model import resume_model as m
from tests.model.child import items_of
from tests.model.harness import RULES, on

pytestmark = pytest.mark.crash

#: (program, kill point in the first process or "none", the rule it needs or "")
COLD: dict[str, tuple[list[Any], str, str]] = {
    "distinct-tasks-kill": (
        [
            ["model", "chat", "p"],
            [["model", "chat", "q"], ["read", "lookup", "a"]],
            ["effect", "send", "a"],
            ["model", "chat", "r"],
        ],
        "tool_body_done:send:1",
        "",
    ),
    "effect-claimed-kill": (
        [["model", "chat", "p"], ["effect", "send", "a"], ["effect", "refund", "b"]],
        "tool_recorded:send:1",
        "",
    ),
    "identical-tasks": (
        [
            ["model", "chat", "p"],
            [["model", "chat", "q"], ["model", "chat", "q"]],
            ["model", "chat", "r"],
        ],
        "none",
        "C8",
    ),
    "identical-tasks-kill": (
        [
            [
                ["model", "chat", "q"],
                ["model", "chat", "q"],
                ["read", "lookup", "a"],
                ["read", "lookup", "a"],
            ],
            ["effect", "send", "a"],
            ["model", "chat", "r"],
        ],
        "tool_recorded:send:1",
        "C8",
    ),
}


def _child(tmp: str, program: list[Any], kill_at: str, replay: str) -> dict[str, Any] | None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.model.child",
            os.path.join(tmp, "runs.duckdb"),
            os.path.join(tmp, "ledger"),
            json.dumps(program),
            "async",
            kill_at,
            replay,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    if done.returncode == -9:
        return None  # SIGKILLed where it was told to
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", sorted(COLD))
def test_cold_processes(case: str, tmp_path: Any) -> None:
    """Each attempt in a fresh process (cold imports, first SDK call), the first one
    SIGKILLed at a boundary: bodies run as the model says, at most once per key, and a
    replay in yet another fresh process hands every caller what it got (C8)."""
    program, kill_at, rule = COLD[case]
    if rule and not on(rule):
        pytest.skip(f"CONTRACT {rule} (issue 23) not implemented yet: {RULES[rule]}")
    tmp = str(tmp_path)
    first = _child(tmp, program, kill_at, "live")
    assert (first is None) == (kill_at != "none"), first
    ledger_path = os.path.join(tmp, "ledger")

    def ledger() -> list[str]:
        if not os.path.exists(ledger_path):
            return []
        with open(ledger_path) as fh:
            return fh.read().splitlines()

    after_first = ledger()
    items = items_of(program)
    mj = m.Journal()
    live: dict[str, Any] | None = first
    if kill_at != "none":
        boundary, name, _nth = kill_at.split(":")
        caller = next(c for c, _f, call in m.callers(items) if driver.step_name(call) == name)
        mj = m.attempt(items, mj, m.Policy(), m.Crash(caller, boundary)).journal
        want = m.attempt(items, mj, m.Policy())
        second = _child(tmp, program, "none", "live")
        assert second is not None
        assert (second["error"], second["status"]) == (want.error, want.status), second
        bodies = [tuple(line.split()[:2]) for line in ledger()[len(after_first) :]]
        assert collections.Counter(bodies) == collections.Counter(want.bodies)
        live = second
    keys = collections.Counter(line.split()[2] for line in ledger())
    assert all(n == 1 for n in keys.values()), keys
    assert live is not None
    if live["status"] != "succeeded":
        return
    replayed = _child(tmp, program, "none", "only")
    assert replayed is not None and replayed["error"] is None
    assert replayed["got"] == live["got"], "a caller got another caller's recorded answer"
