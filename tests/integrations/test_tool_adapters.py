"""The framework tool adapters, in process: schemas, refusals and parallel tool calls.

The property: whatever batches of parallel tool calls the model asks for
(peers' reports: pydantic-ai #2853 and kitaru #306, parallel tool calls
completing in a different order on every run), a run recorded through the
framework replays offline (``live=False``) with no tool body run and no model
call, and each call gets its own recorded result back (a swapped result
would change the next recorded request and diverge).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from tests.integrations.conftest import need
from tests.sdkserver import Reply, ScriptServer, serve

FINAL = "All orders checked."


def _chat(message: dict[str, Any]) -> Reply:
    return Reply(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    )


def _turns(batches: list[list[str]]) -> list[Reply]:
    replies = []
    for t, batch in enumerate(batches):
        calls = [
            {
                "id": f"call_{t}_{i}",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": oid})},
            }
            for i, oid in enumerate(batch)
        ]
        replies.append(_chat({"role": "assistant", "content": None, "tool_calls": calls}))
    replies.append(_chat({"role": "assistant", "content": FINAL}))
    return replies


Body = Callable[[str], Awaitable[str]]
Runner = Callable[[Body, str], Awaitable[Any]]


async def _agents(body: Body, base_url: str) -> Any:
    import agents
    from openai import AsyncOpenAI

    from redrive.integrations.openai_agents import function_tool

    agents.set_tracing_disabled(True)

    @function_tool(read_only=True)
    async def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return await body(order_id)

    raw = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    client = redrive.wrap(raw)
    model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
    agent = agents.Agent(name="a", instructions="Help.", model=model, tools=[lookup_order])
    try:
        return (await agents.Runner.run(agent, "check the orders")).final_output
    finally:
        await client.close()
        await raw.close()


async def _pydantic(body: Body, base_url: str) -> Any:
    import pydantic_ai
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from redrive.integrations.pydantic_ai import tool

    @tool(read_only=True)
    async def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return await body(order_id)

    raw = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    client = redrive.wrap(raw)
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
    agent = pydantic_ai.Agent(model, tools=[lookup_order])
    try:
        return (await agent.run("check the orders")).output
    finally:
        await client.close()
        await raw.close()


async def _langchain(body: Body, base_url: str) -> Any:
    from langchain_openai import ChatOpenAI

    from redrive.integrations.langchain import openai_http_clients, tool

    @tool(read_only=True)
    async def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return await body(order_id)

    sync_http, async_http = openai_http_clients(base_url)
    llm = ChatOpenAI(
        model="gpt-4o",
        base_url=base_url,
        api_key="sk-test",  # type: ignore[arg-type]
        max_retries=0,
        http_client=sync_http,
        http_async_client=async_http,
    ).bind_tools([lookup_order])
    try:
        return await _langchain_loop(llm, lookup_order)
    finally:
        sync_http.close()
        await async_http.aclose()


async def _langchain_loop(llm: Any, lookup_order: Any) -> Any:
    from langchain_core.messages import ToolMessage

    messages: list[Any] = [("user", "check the orders")]
    while True:
        reply = await llm.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return reply.content
        results = await asyncio.gather(*(lookup_order.ainvoke(c["args"]) for c in reply.tool_calls))
        messages += [
            ToolMessage(content=r, tool_call_id=c["id"])
            for c, r in zip(reply.tool_calls, results, strict=True)
        ]


RUNNERS: dict[str, Callable[[Body, str], Awaitable[Any]]] = {
    "agents": _agents,
    "pydantic": _pydantic,
    "langchain": _langchain,
}

order_ids = st.text(alphabet="ABCDEFGH0123456789", min_size=1, max_size=6)
batches = st.lists(st.lists(order_ids, min_size=1, max_size=3, unique=True), min_size=1, max_size=3)


@pytest.mark.parametrize("family", sorted(RUNNERS))
@settings(max_examples=12)
@given(batches=batches, seed=st.integers(0, 2**16))
def test_parallel_tool_calls_replay_offline_to_their_callers(
    family: str, batches: list[list[str]], seed: int
) -> None:
    """Any batches of parallel tool calls, finishing in any order, replay with no body or model."""
    need(family)
    drive = RUNNERS[family]
    shuffle = random.Random(seed)
    ran: list[str] = []

    async def live_body(order_id: str) -> str:
        for _ in range(shuffle.randint(0, 5)):  # finish in a scrambled order
            await asyncio.sleep(0)
        ran.append(order_id)
        return f"order {order_id}: shipped"

    async def no_body(order_id: str) -> str:
        raise AssertionError(f"tool body ran on replay for {order_id}")

    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(*_turns(batches))

        async def record(body: Body, live: bool) -> Any:
            async with redrive.run(journal, "orders", live=live) as run:
                return run.finish(await drive(body, server.url + "/v1"))

        assert asyncio.run(record(live_body, True)) == FINAL
        assert sorted(ran) == sorted(oid for batch in batches for oid in batch)
        sent = len(server.requests)
        assert sent == len(batches) + 1
        _assert_each_call_got_its_result(server)
        assert asyncio.run(record(no_body, False)) == FINAL
        assert len(server.requests) == sent


def _assert_each_call_got_its_result(server: ScriptServer) -> None:
    for request in server.requests[1:]:
        messages = json.loads(request.body)["messages"]
        asked = {
            call["id"]: json.loads(call["function"]["arguments"])["order_id"]
            for m in messages
            for call in m.get("tool_calls") or []
        }
        for m in messages:
            if m["role"] == "tool":
                content = m["content"]
                text = content if isinstance(content, str) else content[0]["text"]
                assert text == f"order {asked[m['tool_call_id']]}: shipped"


@pytest.mark.parametrize("family", sorted(RUNNERS))
def test_idempotency_key_is_filled_in_and_not_shown_to_the_model(family: str) -> None:
    """A tool taking ``idempotency_key`` gets the run's key; the schema the model sees omits it."""
    need(family)
    keys: list[str] = []

    def charge_card(amount: str, idempotency_key: str) -> str:
        """Charge the card."""
        keys.append(idempotency_key)
        return "charged"

    if family == "agents":
        from redrive.integrations.openai_agents import function_tool

        made: Any = function_tool(restart_safe=True)(charge_card)
        schema = made.params_json_schema
        call: Callable[[], Any] = lambda: made.on_invoke_tool(  # noqa: E731
            _agents_context(made), json.dumps({"amount": "10"})
        )
    elif family == "pydantic":
        from redrive.integrations.pydantic_ai import tool

        made = tool(restart_safe=True)(charge_card)
        schema = made.function_schema.json_schema
        call = lambda: made.function_schema.call({"amount": "10"}, None)  # noqa: E731
    else:
        from redrive.integrations.langchain import tool as lc_tool

        made = lc_tool(restart_safe=True)(charge_card)
        schema = made.tool_call_schema.model_json_schema()
        call = lambda: made.ainvoke({"amount": "10"})  # noqa: E731
    assert set(schema["properties"]) == {"amount"}

    async def main() -> None:
        async with redrive.run(redrive.open_journal(":memory:"), "pay:7") as run:
            await call()
            run.finish(None)

    asyncio.run(main())
    assert keys == ["pay:7:1:charge_card"]


def _agents_context(made: Any) -> Any:
    from agents.tool_context import ToolContext

    return ToolContext(
        context=None, tool_name=made.name, tool_call_id="call_1", tool_arguments='{"amount": "10"}'
    )


def test_a_run_context_parameter_is_refused_with_the_fix() -> None:
    """A tool whose first parameter is the framework's run context is refused at decoration."""
    refused = 0
    if need_soft("agents"):
        from agents import RunContextWrapper

        from redrive.integrations.openai_agents import function_tool

        def with_ctx(ctx: RunContextWrapper[Any], city: str) -> str:
            """Weather."""
            return city

        with pytest.raises(TypeError, match="drop the context parameter"):
            function_tool(with_ctx)
        refused += 1
    if need_soft("pydantic"):
        from pydantic_ai import RunContext

        from redrive.integrations.pydantic_ai import tool

        def with_run_ctx(ctx: RunContext[None], city: str) -> str:
            """Weather."""
            return city

        with pytest.raises(TypeError, match="cannot be journaled"):
            tool(with_run_ctx)
        refused += 1
    if not refused:
        need("agents")


def need_soft(family: str) -> bool:
    """Whether ``family``'s framework is importable (no skip)."""
    import importlib.util

    from tests.integrations.conftest import FRAMEWORKS

    return importlib.util.find_spec(FRAMEWORKS[family][0]) is not None


def test_outside_a_run_the_tools_just_run() -> None:
    """Outside ``redrive.run`` an adapted tool calls its function as the framework would."""
    need("langchain")
    from redrive.integrations.langchain import tool as lc_tool

    @lc_tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}"

    assert lookup_order.invoke({"order_id": "A1"}) == "order A1"


@pytest.mark.parametrize(("status", "resumable"), [(429, True), (503, True), (400, False)])
def test_chat_openai_transient_errors_leave_the_run_resumable(status: int, resumable: bool) -> None:
    """With ``retryable=TRANSIENT_ERRORS`` a 429/5xx keeps the run resumable; a 400 fails it."""
    need("langchain")
    from langchain_openai import ChatOpenAI

    from redrive.integrations.langchain import TRANSIENT_ERRORS, openai_http_clients

    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(Reply(status=status, body={"error": {"message": "no", "type": "x"}}))
        server.add(_chat({"role": "assistant", "content": FINAL}))
        base_url = server.url + "/v1"

        async def attempt() -> Any:
            sync_http, async_http = openai_http_clients(base_url)
            llm = ChatOpenAI(
                model="gpt-4o",
                base_url=base_url,
                api_key="sk-test",  # type: ignore[arg-type]
                max_retries=0,
                http_client=sync_http,
                http_async_client=async_http,
            )
            try:
                async with redrive.run(journal, "lc", retryable=TRANSIENT_ERRORS) as run:
                    return run.finish((await llm.ainvoke("hi")).content)
            finally:
                sync_http.close()
                await async_http.aclose()

        with pytest.raises(Exception) as caught:  # the SDK's own error type
            asyncio.run(attempt())
        assert getattr(caught.value, "status_code", None) == status
        record = journal.get_run("lc")
        assert record is not None
        assert record.status == ("paused" if resumable else "failed")
        if resumable:
            assert asyncio.run(attempt()) == FINAL
