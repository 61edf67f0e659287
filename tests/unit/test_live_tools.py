"""``live_tools``: model steps replayed while the named tools run, checked against the record."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive.errors import DivergenceError, DivergenceReason
from redrive.storage import MemoryJournal
from tests.conftest import Drive, Loop


def _agent(drive: Drive, db: list[str], behaviour: dict[str, Any]) -> Any:
    """A model that plans an order, a tool that writes it to a test database."""

    @drive.model(name="model:plan")
    def plan(text: str) -> dict[str, Any]:
        return {"order_id": "O-1", "amount": 5}

    @drive.tool(restart_safe=False)
    def create_order(order_id: str, amount: int) -> dict[str, Any]:
        if behaviour.get("raise"):
            raise ValueError("stock empty")
        db.append(order_id)
        return {"order": order_id, "amount": amount + behaviour.get("extra", 0)}

    def loop(run: redrive.Run) -> Loop:
        order = yield plan("refund O-1")
        return (yield create_order(order["order_id"], order["amount"]))

    return loop


def test_live_tools_runs_the_body_on_replay(drive: Drive) -> None:
    """Issue 17 #3: a replayed run with live_tools runs the tool (it writes to the test's db)
    while the model step is replayed; on main the body never ran on replay."""
    db: list[str] = []
    journal = MemoryJournal()
    loop = _agent(drive, db, {})
    drive.run(journal, "r", loop)
    db.clear()
    ran = drive.run(journal, "r", loop, live=False, live_tools=["create_order"])
    assert db == ["O-1"]
    assert ran.value == {"order": "O-1", "amount": 5}
    # without it the body does not run (the recorded result is handed back)
    db.clear()
    drive.run(journal, "r", loop, live=False)
    assert db == []
    # live_tools=True: every tool
    drive.run(journal, "r", loop, live=False, live_tools=True)
    assert db == ["O-1"]


def test_live_tools_other_names_stay_replayed(drive: Drive) -> None:
    """A tool not named in live_tools is replayed as usual."""
    db: list[str] = []
    journal = MemoryJournal()
    loop = _agent(drive, db, {})
    drive.run(journal, "r", loop)

    @drive.tool(restart_safe=False)
    def something_else() -> None:
        db.append("something_else")

    db.clear()
    drive.run(journal, "r", loop, live=False, live_tools=["something_else"])
    assert db == []


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=15)
@given(extra=st.integers(min_value=-3, max_value=3), fails=st.booleans())
def test_a_live_tools_outcome_that_differs_from_the_record_diverges(
    drive: Drive, extra: int, fails: bool
) -> None:
    """Strict check: any other result (or an exception where a result was recorded) raises
    DivergenceError naming the path; the same outcome passes. Nothing is written."""
    db: list[str] = []
    journal = MemoryJournal()
    behaviour: dict[str, Any] = {}
    loop = _agent(drive, db, behaviour)
    drive.run(journal, "r", loop)
    frames = len(list(journal.frames("r")))
    behaviour.update(extra=extra, **({"raise": True} if fails else {}))
    if extra == 0 and not fails:
        drive.run(journal, "r", loop, live=False, live_tools=["create_order"])
    else:
        with pytest.raises(DivergenceError) as caught:
            drive.run(journal, "r", loop, live=False, live_tools=["create_order"])
        err = caught.value
        assert err.reason is DivergenceReason.OUTCOME and err.name == "create_order"
        paths = [p for p, _, _ in err.diff or []]
        assert paths == (["$.error", "$.result"] if fails else ["$.result.amount"])
        assert "live_tools" in str(err)
    assert len(list(journal.frames("r"))) == frames


def test_a_recorded_error_must_be_raised_again(drive: Drive) -> None:
    """A tool recorded failing passes the check only when it raises the same error again."""
    db: list[str] = []
    journal = MemoryJournal()
    behaviour: dict[str, Any] = {"raise": True}
    loop = _agent(drive, db, behaviour)
    with pytest.raises(ValueError):
        drive.run(journal, "r", loop)
    with pytest.raises(ValueError, match="stock empty"):
        drive.run(journal, "r", loop, live=False, live_tools=["create_order"])
    behaviour.clear()
    with pytest.raises(DivergenceError, match=r"\$\.error"):
        drive.run(journal, "r", loop, live=False, live_tools=["create_order"])


@pytest.mark.parametrize("bad", ["create_order", 3, [""], None])
def test_live_tools_refuses_a_malformed_value(bad: Any) -> None:
    """A bare string (read as its letters), a number, an empty name: TypeError, nothing written."""
    journal = MemoryJournal()
    with pytest.raises(TypeError, match="live_tools"):
        redrive.run(journal, "r", live_tools=bad)
    assert journal.get_run("r") is None
