"""Usage and spend across attempts and resumes (``run.usage``), prices, and run budgets.

Issue 25, item 4: each model call counts once across attempts and resumes,
replayed calls are counted apart (what replay saved), and ``max_tokens`` /
``max_cost`` hold across resumes (no fresh budget, replayed steps not charged).
"""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive import BudgetExceededError, Price
from redrive.replay import Tokens
from tests.sdkserver import Reply, ScriptServer, chat_completion, serve

CHAT = {
    **chat_completion("ok"),
    "usage": {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 60},
        "completion_tokens_details": {"reasoning_tokens": 8},
    },
}
PRICES = {"gpt-4o": Price(input=2.5, cached=1.25, output=10.0)}


def test_tokens_are_read_from_each_providers_own_shape() -> None:
    """Chat, Responses and Anthropic usage read to one meaning: input includes cached tokens."""
    chat = Tokens.of(CHAT["usage"])
    assert (chat.input, chat.output, chat.cached, chat.reasoning) == (100, 20, 60, 8)
    responses = Tokens.of(
        {
            "input_tokens": 50,
            "input_tokens_details": {"cached_tokens": 40},
            "output_tokens": 30,
            "output_tokens_details": {"reasoning_tokens": 12},
        }
    )
    assert (responses.input, responses.cached, responses.output, responses.reasoning) == (
        50,
        40,
        30,
        12,
    )
    # Anthropic: input_tokens counts only what follows the last cache breakpoint
    claude = Tokens.of(
        {
            "input_tokens": 12,
            "cache_read_input_tokens": 4000,
            "cache_creation_input_tokens": 300,
            "output_tokens": 9,
        }
    )
    assert (claude.input, claude.cached, claude.cache_write, claude.output) == (4312, 4000, 300, 9)
    assert Tokens.of(None) == Tokens() and Tokens.of({"prompt_tokens": True}) == Tokens()


COUNTS = st.integers(min_value=0, max_value=10**6)


@given(a=st.tuples(COUNTS, COUNTS, COUNTS, COUNTS), b=st.tuples(COUNTS, COUNTS, COUNTS, COUNTS))
def test_cost_adds_up_and_takes_only_given_prices(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """The cost of two calls is the sum of their costs; a price left out takes its kind's."""

    def tokens(t: tuple[int, ...]) -> Tokens:
        cached = min(t[1], t[0])
        return Tokens(input=t[0], cached=cached, output=t[2], reasoning=min(t[3], t[2]))

    price = Price(input=3, output=15, cached=0.3)
    assert price.cost(tokens(a) + tokens(b)) == pytest.approx(
        price.cost(tokens(a)) + price.cost(tokens(b))
    )
    plain = Price(input=3, output=15)  # no cached or reasoning price: input's and output's
    x = tokens(a)
    assert plain.cost(x) == pytest.approx((x.input * 3 + x.output * 15) / 1e6)


def test_budget_options_are_checked() -> None:
    """max_cost needs prices (redrive knows none); malformed limits and prices are refused."""
    journal = redrive.open_journal(":memory:")
    with pytest.raises(ValueError, match="max_cost needs prices"):
        redrive.run(journal, "r", max_cost=1.0)
    with pytest.raises(TypeError, match="max_tokens"):
        redrive.run(journal, "r", max_tokens=0)
    with pytest.raises(ValueError, match="'input' and 'output'"):
        redrive.run(journal, "r", max_cost=1.0, prices={"m": {"input": 1}})
    with pytest.raises(ValueError, match="non-negative"):
        redrive.run(journal, "r", prices={"m": {"input": -1, "output": 1}})


# -- the kind: every live call once, across crashes and resumes, under any budget ---------


@settings(max_examples=40, deadline=None)
@given(
    usages=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=6),
    crashes=st.lists(st.integers(min_value=0, max_value=6), max_size=3),
    limit=st.none() | st.integers(min_value=1, max_value=200),
)
def test_spend_counts_each_live_call_once_across_crashes_and_resumes(
    usages: list[int], crashes: list[int], limit: int | None
) -> None:
    """Whatever the crashes: spent = the calls the model received (each once), a call goes
    live only while the spend is under the budget, and replay saves what it answered."""
    journal = redrive.open_journal(":memory:")
    received: list[int] = []
    pending = list(crashes)

    @redrive.model
    def ask(i: int) -> dict[str, Any]:
        if pending and pending[0] == len(received):
            pending.pop(0)
            raise KeyboardInterrupt  # the worker dies before this call goes out
        received.append(i)
        return {"model": "m", "usage": {"prompt_tokens": usages[i], "completion_tokens": 1}}

    def body(run: redrive.Run) -> None:
        for i in range(len(usages)):
            ask(i)
        run.finish("done")

    options: dict[str, Any] = {} if limit is None else {"max_tokens": limit}
    last: redrive.Run | None = None
    for _ in range(len(crashes) + 2):
        try:
            with redrive.run(journal, "r", **options) as last:
                body(last)
            break
        except (KeyboardInterrupt, BudgetExceededError):
            continue
    # a call went live only while the spend before it was under the budget
    spend, expected = 0, []
    for i, u in enumerate(usages):
        if limit is not None and spend >= limit:
            break
        expected.append(i)
        spend += u + 1
    assert received == expected
    stored = redrive.run_usage(journal, "r")
    assert stored.spent.calls == len(received)
    assert stored.spent.tokens.total == sum(usages[i] + 1 for i in received)
    assert last is not None and last.usage.spent == stored.spent
    # the last execution replayed every call made before it, and counted it as saved
    assert last.usage.saved.calls == last.replayed_steps


# -- real SDKs, both faces, DuckDB and Postgres --------------------------------------------


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


@pytest.fixture(params=["duckdb", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A DuckDB file journal, then a Postgres one (in a schema of its own)."""
    if request.param == "duckdb":
        opened: Any = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    else:
        from redrive.storage.postgres import PostgresJournal

        opened = PostgresJournal(
            request.getfixturevalue("pg_url"), schema=request.getfixturevalue("pg_schema")
        )
    try:
        yield opened
    finally:
        opened.close()


def _loop(face: str, server: ScriptServer, journal: Any, run_id: str, **options: Any) -> Any:
    """Four chat completions in a run, through the sync or the async OpenAI client."""
    messages = [{"role": "user", "content": "hi"}]
    if face == "sync":
        client = redrive.wrap(openai.OpenAI(api_key="sk-x", base_url=server.url, max_retries=0))
        with client, redrive.run(journal, run_id, **options) as run:
            for _ in range(4):
                client.chat.completions.create(model="gpt-4o", messages=messages)
            run.finish("done")
        return run

    async def main() -> Any:
        aclient = redrive.wrap(
            openai.AsyncOpenAI(api_key="sk-x", base_url=server.url, max_retries=0)
        )
        async with aclient, redrive.run(journal, run_id, **options) as run:
            for _ in range(4):
                await aclient.chat.completions.create(model="gpt-4o", messages=messages)
            run.finish("done")
        return run

    return asyncio.run(main())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_budget_holds_across_resumes(face: str, server: ScriptServer, journal: Any) -> None:
    """max_tokens=300: the third call goes live (240 < 300), the fourth is refused before it is
    made, with the run left paused (kind "budget": waiting does not clear it); a resume with
    the same budget stops at the same step without a call (no fresh budget, replayed calls
    not charged); a larger budget finishes it, as the error advises, and the spend counts
    each call once."""
    server.add(*[Reply(body=CHAT) for _ in range(4)])
    with pytest.raises(BudgetExceededError) as caught:
        _loop(face, server, journal, "job:1", max_tokens=300, prices=PRICES)
    err = caught.value
    assert (err.run_id, err.seq, err.limit_kind, err.used, err.limit) == (
        "job:1",
        7,
        "tokens",
        360,
        300,
    )
    assert "max_tokens=300" in str(err) and "larger max_tokens=" in str(err)
    assert "stays resumable" in str(err)
    assert pickle.loads(pickle.dumps(err)).used == 360
    assert len(server.requests) == 3
    record = journal.get_run("job:1")
    assert record is not None and record.status == "paused"  # resumable, not failed
    pause = redrive.paused_reason(journal, "job:1")
    assert pause is not None and pause.kind == "budget" and not pause.retry

    with pytest.raises(BudgetExceededError) as again:
        _loop(face, server, journal, "job:1", max_tokens=300, prices=PRICES)
    assert again.value.used == 360 and len(server.requests) == 3

    run = _loop(face, server, journal, "job:1", max_tokens=1000, prices=PRICES)
    assert run.status == "succeeded" and len(server.requests) == 4
    assert run.usage.spent.calls == 4 and run.usage.input_tokens == 400
    assert run.usage.cached_tokens == 240 and run.usage.reasoning_tokens == 32
    # 4 calls: 40 uncached input at 2.5, 60 cached at 1.25, 20 output at 10 (per million)
    assert run.usage.cost == pytest.approx(4 * (40 * 2.5 + 60 * 1.25 + 20 * 10) / 1e6)
    assert run.usage.saved.calls == 3 and run.usage.saved.tokens.input == 300
    stored = redrive.run_usage(journal, "job:1", prices=PRICES)
    assert stored.spent == run.usage.spent
    # each resume's note lists what it replayed: the refused resume (its `paused` note is a
    # write) replayed 3 calls, the finishing one 3 more
    assert stored.saved.calls == 6


def test_usage_of_responses_and_anthropic_streams(server: ScriptServer) -> None:
    """OpenAI Responses and a streamed Anthropic message with cache reads: usage as billed."""
    server.add(
        Reply(
            body={
                "id": "resp_1",
                "object": "response",
                "created_at": 1,
                "model": "gpt-5",
                "status": "completed",
                "output": [],
                "usage": {
                    "input_tokens": 50,
                    "input_tokens_details": {"cached_tokens": 40},
                    "output_tokens": 30,
                    "output_tokens_details": {"reasoning_tokens": 12},
                    "total_tokens": 80,
                },
            }
        ),
        Reply(chunks=_anthropic_stream()),
    )
    journal = redrive.open_journal(":memory:")
    oa = redrive.wrap(openai.OpenAI(api_key="sk-x", base_url=server.url, max_retries=0))
    an = redrive.wrap(anthropic.Anthropic(api_key="sk-ant-x", base_url=server.url, max_retries=0))
    prices = {"gpt-5": {"input": 1, "output": 8}, "claude-x": {"input": 3, "output": 15}}
    with oa, an, redrive.run(journal, "r", prices=prices) as run:
        oa.responses.create(model="gpt-5", input="hi")
        with an.messages.stream(model="claude-x", max_tokens=10, messages=[]) as stream:
            stream.get_final_message()
    usage = run.usage
    assert usage.spent.calls == 2
    assert usage.input_tokens == 50 + 4312 and usage.cached_tokens == 40 + 4000
    assert usage.spent.tokens.cache_write == 300 and usage.reasoning_tokens == 12
    assert usage.spent.unpriced == ()
    assert redrive.run_usage(journal, "r", prices=prices).spent == usage.spent


def _anthropic_stream() -> list[str]:
    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "cache_read_input_tokens": 4000,
            "cache_creation_input_tokens": 300,
            "output_tokens": 1,
        },
    }
    return [
        event("message_start", message=message),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "ok"}),
        event("content_block_stop", index=0),
        event(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage={"output_tokens": 9},
        ),
        event("message_stop"),
    ]
