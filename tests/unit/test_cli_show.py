"""``redrive show`` shows what people debug with: results, responses, attempts, approvals."""

from __future__ import annotations

import contextvars
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive import cli
from redrive.cli._steps import response_text
from redrive.replay import set_boundary_hook
from redrive.storage.rdj import export_run


class _Crash(BaseException):
    """Stands in for a worker killed mid-step."""


@redrive.model(name="model:support")
def _support(text: str) -> dict[str, Any]:
    return {"text": f"ok: {text}"}


@redrive.tool(restart_safe=True)
def _create_refund(order_id: str, amount: int) -> dict[str, Any]:
    return {"refund": "R-9", "order_id": order_id, "amount": amount}


@redrive.tool(read_only=True)
def _lookup(order_id: str) -> dict[str, Any]:
    raise LookupError(f"no order {order_id}")


def _show(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    capsys.readouterr()
    assert cli.main(["show", str(path)]) == cli.EXIT_OK
    return capsys.readouterr().out


def test_show_prints_results_responses_errors_and_attempts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 17 #7: the tool's result, the model's response, a tool's error and the attempt
    written after a crash are in the terminal output (on main only arguments and status)."""
    journal = redrive.open_journal(":memory:")

    def crash(point: str, info: dict[str, Any]) -> None:
        if point == "tool_body_done" and info["name"] == "_create_refund":
            raise _Crash

    def abandoned() -> None:
        run = redrive.run(journal, "refund:1001")
        run.__enter__()  # abandoned mid-tool, as a SIGKILL leaves it (in a context of its own)
        _support("refund 1001")
        with pytest.raises(_Crash):
            _create_refund("O-1", 5)

    set_boundary_hook(crash)
    try:
        contextvars.copy_context().run(abandoned)
    finally:
        set_boundary_hook(None)
    with redrive.run(journal, "refund:1001") as again:
        _support("refund 1001")
        _create_refund("O-1", 5)  # restart safe: re-executed, a second attempt
        with pytest.raises(LookupError):
            _lookup("O-2")
        again.finish("done")
    path = tmp_path / "refund.rdj"
    export_run(journal, "refund:1001", path)
    out = _show(capsys, path)
    assert '"refund": "R-9"' in out  # the tool's result
    assert '"text": "ok: refund 1001"' in out  # the model's response
    assert "LookupError: no order O-2" in out  # the error
    assert "done (attempt 2)" in out  # the re-executed tool says so


def test_show_lists_pending_approvals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 17 #7: a run suspended on an approval shows what waits for a decision."""
    journal = redrive.open_journal(":memory:")
    with redrive.run(journal, "refund:1002"):
        redrive.await_approval("refund:O-7", {"amount": 9965})
    path = tmp_path / "pending.rdj"
    export_run(journal, "refund:1002", path)
    out = _show(capsys, path)
    assert "pending approval refund:O-7" in out and "9965" in out


def test_a_model_response_reads_as_its_semantic_view() -> None:
    """An SDK step's response shows as its text and the tool calls it asked for."""
    view = {
        "model": "gpt-4o",
        "text": "Refunding.",
        "tool_calls": [{"id": "c1", "name": "create_refund", "arguments": '{"amount": 5}'}],
        "usage": {"prompt_tokens": 3},
    }
    shown = response_text({"response": {"status": 200, "body": b"..."}, "view": view})
    assert shown == 'text: "Refunding."; tool calls: create_refund({"amount": 5})'
    assert response_text({"response": {"text": "hi"}}) == {"text": "hi"}


def test_show_marks_interruptions_resolutions_usage_and_savings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25 #5: ``show`` names the crash and the resume (which workers), the resolution
    (who and why), the in-flight step's own duration, the usage and what replay saved."""
    from tests.unit.test_view import _interrupted_run

    db = str(tmp_path / "pay.duckdb")
    _interrupted_run(db)
    prices = tmp_path / "prices.json"
    prices.write_text('{"gpt-4o": {"input": 2.5, "output": 10}}')
    capsys.readouterr()
    assert cli.main(["--journal", db, "show", "pay:1", "--prices", str(prices)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "usage: 2 live model call(s), 200/40 tokens in/out, cost 0.0009" in out
    assert "replay saved 1 call(s), 100/20 tokens in/out, cost 0.00045" in out
    assert "interrupted after seq 3: worker " in out and "resumed at seq 5 by worker " in out
    assert "seq 3 (pay) resolved as done by alice: the bank shows the payment" in out
    assert "done, resolved by alice: the bank shows the payment" in out
    capsys.readouterr()
    assert cli.main(["--journal", db, "--json", "show", "pay:1"]) == cli.EXIT_OK
    import json

    shown = json.loads(capsys.readouterr().out)
    kinds = [e["kind"] for e in shown["info"]["events"]]
    assert kinds == ["interrupted", "resolved", "resumed"]
    pay = next(s for s in shown["steps"] if s["name"] == "pay")
    interrupted = shown["info"]["events"][0]
    started = shown["info"]["started_at"]
    # the step's duration ends where its worker stopped, not at the resolution
    assert pay["duration_ms"] <= (interrupted["at"] - started) * 1000 + 0.001
    assert shown["info"]["usage"]["saved"]["calls"] == 1


@pytest.mark.parametrize("face", ["sync", "async"])
def test_show_and_view_mark_a_pause_and_the_resume_after_it(
    face: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25: a paused run's stop is named as a pause with its kind and reason (not as a
    crash), with the time until the resume; the page carries the same event."""
    import asyncio
    import json

    from redrive.replay import render_run

    class Upstream(ConnectionError):
        """A provider outage that outlasted the client's retries."""

    db = str(tmp_path / "p.duckdb")
    journal = redrive.open_journal(db)

    def attempt(fail: bool) -> None:
        if face == "sync":
            with redrive.run(journal, "p:1", retryable=(Upstream,)) as run:
                redrive.now()
                if fail:
                    raise Upstream("503 from the provider")
                run.finish("ok")
            return

        async def main() -> None:
            async with redrive.run(journal, "p:1", retryable=(Upstream,)) as run:
                redrive.now()
                if fail:
                    raise Upstream("503 from the provider")
                run.finish("ok")

        asyncio.run(main())

    with pytest.raises(Upstream):
        attempt(True)
    assert journal.get_run("p:1").status == "paused"  # type: ignore[union-attr]
    attempt(False)
    page = render_run(journal, "p:1")
    journal.close()
    capsys.readouterr()
    assert cli.main(["--journal", db, "show", "p:1"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "paused after seq 2: worker " in out
    assert "paused (retries_exhausted: Upstream: 503 from the provider)" in out
    assert "interrupted after" not in out and "resumed at seq 3 by worker " in out
    data = json.loads(page.split('id="redrive-data">', 1)[1].split("</script>", 1)[0])
    assert "paused" in json.dumps(data)
