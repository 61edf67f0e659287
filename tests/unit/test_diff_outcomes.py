"""redrive diff and the two-run view (issue 25, failure 4): outputs, statuses and errors shown,
volatile fields no divergence, steps named one way, values printed as the user's."""

from __future__ import annotations

import copy
import decimal
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive._volatile import settled_response
from redrive.replay import set_boundary_hook
from redrive.storage import Journal
from tests import sample_run
from tests.sdkserver import Reply, ScriptServer, serve


@redrive.tool()
def refund(order: str) -> str:
    """Refund an order (side-effecting: never re-run silently after a crash)."""
    return "ok"


def _answer(n: int) -> Reply:
    """The same chat answer each time, but for what the provider mints: ids, time, Date."""
    body = copy.deepcopy(sample_run.TOOL_CALLS)
    body.update(id=f"chatcmpl-{n}", created=1_700_000_000 + n, system_fingerprint=f"fp_{n}")
    (call, _) = body["choices"][0]["message"]["tool_calls"]
    call.update(id=f"call_{n}", function={"name": "refund", "arguments": '{"order": "A-1"}'})
    body["choices"][0]["message"]["tool_calls"] = [call]
    headers = {"date": f"Wed, 02 Dec 2026 08:0{n}:00 GMT", "x-request-id": f"req_{n}"}
    return Reply(body=body, headers=headers)


def _support(client: openai.OpenAI, journal: Journal, run_id: str, **options: Any) -> None:
    """One model call asking for a refund, the refund, and the run's output."""
    with redrive.run(journal, run_id, input={"order": "A-1"}, **options) as run:
        reply = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "refund order A-1"}]
        )
        (call,) = reply.choices[0].message.tool_calls or []
        done = refund(**json.loads(call.function.arguments)) == "ok"
        run.finish("refunded" if done else "no such order, no refund")


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


def _record_two(server: ScriptServer, url: str) -> None:
    """Run ``done``: refunded. Run ``blocked``: killed with the refund in flight, then resumed
    with ``on_in_flight="tell_model"``: the refund is blocked, the output says so."""
    server.add(_answer(1), _answer(2))
    journal = redrive.open_journal(url)
    client = openai.OpenAI(api_key="sk-test", base_url=server.url + "/v1", max_retries=0)
    wrapped = redrive.wrap(client)
    try:
        _support(wrapped, journal, "done")

        def kill(boundary: str, info: dict[str, Any]) -> None:
            if boundary == "tool_claimed":
                raise KeyboardInterrupt  # the worker is stopped with the refund in flight

        set_boundary_hook(kill)
        try:
            with pytest.raises(KeyboardInterrupt):
                _support(wrapped, journal, "blocked")
        finally:
            set_boundary_hook(None)
        _support(wrapped, journal, "blocked", on_in_flight="tell_model")
    finally:
        client.close()
        journal.close()
    assert len(server.requests) == 2


def test_the_first_real_divergence_and_the_outputs(
    server: ScriptServer, journal_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Response ids, created times and Date headers are no divergence: the first one is the
    refund, done in one run and blocked in the other; the outputs' difference is shown in the
    text, in --json and in the HTML, each naming the step the same way."""
    _record_two(server, journal_url)
    journal = redrive.open_journal(journal_url)
    found = redrive.diff_runs("done", "blocked", journal=journal)
    journal.close()
    assert found is not None and (found.what, found.index) == ("status", 1)
    assert found.step_a is not None and found.step_b is not None
    assert (found.step_a.name, found.step_a.status, found.step_b.status) == (
        "refund",
        "done",
        "blocked",
    )
    where = found.location()
    assert where == f"seq {found.step_a.seq} (step 2)"
    outputs = ("$.run_end.output", "refunded", "no such order, no refund")
    assert outputs in found.ends

    assert cli.main(["--journal", journal_url, "diff", "done", "blocked"]) == cli.EXIT_FAILED
    text = capsys.readouterr().out
    assert f"first differ at {where[:-1]}; status)" in text
    assert "$.status: 'done' -> 'blocked'" in text
    assert "$.run_end.output: 'refunded' -> 'no such order, no refund'" in text
    assert "chatcmpl" not in text and "date" not in text.lower()

    assert cli.main(["--json", "--journal", journal_url, "diff", "done", "blocked"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["location"] == where
    assert list(outputs) in document["output_diff"]
    assert document["first_divergent_step"]["b"]["status"] == "blocked"

    page = tmp_path / "two.html"
    argv = ["--journal", journal_url, "view", "done", "blocked", "-o", str(page)]
    assert cli.main(argv) == cli.EXIT_OK
    html = page.read_text()
    assert json.dumps(where) in html and "index 0" not in html


def test_a_decimal_prints_as_the_users_value() -> None:
    """A Decimal argument, recorded and replayed, prints as a Decimal in a divergence error,
    in diff_runs and in --json, never as its msgpack encoding."""

    @redrive.tool(read_only=True)
    def price(amount: decimal.Decimal) -> str:
        return str(amount)

    journal = redrive.open_journal(":memory:")
    for run_id, amount in (("a", "1.10"), ("b", "1.20")):
        with redrive.run(journal, run_id) as run:
            run.finish(price(decimal.Decimal(amount)))
    with pytest.raises(redrive.DivergenceError) as caught, redrive.run(journal, "a") as run:
        run.finish(price(decimal.Decimal("1.30")))
    assert "-> Decimal('1.3')" in str(caught.value) and "ExtType" not in str(caught.value)
    found = redrive.diff_runs("a", "b", journal=journal)
    assert found is not None and "ExtType" not in str(found)
    assert ("$.args.amount", decimal.Decimal("1.1"), decimal.Decimal("1.2")) in found.diff


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    content=_JSON,
    ids=st.tuples(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8)),
    times=st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)),
    cut=st.integers(1, 40),
    stream=st.booleans(),
)
def test_recordings_of_one_answer_settle_equal(
    content: Any, ids: tuple[str, str], times: tuple[int, int], cut: int, stream: bool
) -> None:
    """Two recordings of one answer (other ids, times, Date and request-id headers, stream
    chunking) settle equal; the same answer with other content does not."""

    def recording(n: int, answer: Any, *, chunk: int) -> dict[str, Any]:
        body = {"id": ids[n], "object": "chat.completion", "created": times[n], "answer": answer}
        headers = [["date", f"day {times[n]}"], ["x-request-id", ids[n]], ["x", "1"]]
        if not stream:
            return {"status": 200, "headers": headers, "stream": False, "body": json.dumps(body)}
        text = f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n"
        chunks = [text[i : i + chunk] for i in range(0, len(text), chunk)]
        return {"status": 200, "headers": headers, "stream": True, "chunks": chunks}

    first = settled_response(recording(0, content, chunk=cut))
    assert first == settled_response(recording(1, content, chunk=cut + 7))
    assert first != settled_response(recording(1, [content], chunk=cut))
