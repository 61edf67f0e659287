"""pydantic-ai's ``ModelRetry`` through a redrive tool (issue 23 item 9, DESIGN C7).

A tool that is not restart safe raises ``ModelRetry("ticket service busy, try
again")``; the model calls it again with the same arguments. The retry runs
(the same idempotency key), live and on resume, against the real pydantic-ai
package and a scripted OpenAI-compatible server.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redrive
from tests.integrations.conftest import need
from tests.sdkserver import Reply, ScriptServer, serve

FINAL = "Ticket T-1 is open."


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


def _call_tool(turn: int) -> Reply:
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": "open_ticket", "arguments": json.dumps({"subject": "printer"})},
    }
    return _chat({"role": "assistant", "content": None, "tool_calls": [call]})


class Tickets:
    """The ticket service: refuses the first request (nothing created), then opens tickets."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.opened: list[str] = []


async def _agent(tickets: Tickets, base_url: str) -> Any:
    import pydantic_ai
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from redrive.integrations.pydantic_ai import tool

    @tool(restart_safe=False)
    async def open_ticket(subject: str, idempotency_key: str) -> str:
        """Open a support ticket."""
        tickets.keys.append(idempotency_key)
        if len(tickets.keys) == 1:
            raise pydantic_ai.ModelRetry("ticket service busy, try again")
        tickets.opened.append(subject)
        return f"T-{len(tickets.opened)}"

    raw = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    client = redrive.wrap(raw)
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
    agent = pydantic_ai.Agent(model, tools=[open_ticket])
    try:
        return (await agent.run("open a ticket for the printer")).output
    finally:
        await client.close()
        await raw.close()


def _run(journal: Any, tickets: Tickets, server: ScriptServer, **options: Any) -> Any:
    async def main() -> Any:
        async with redrive.run(journal, "ticket:9", **options) as run:
            return run.finish(await _agent(tickets, server.url + "/v1"))

    return asyncio.run(main())


def test_model_retry_lets_the_model_call_the_tool_again_live_then_replays() -> None:
    """Live: the body raises ModelRetry, the model calls again, the retry runs under the
    same key (one ticket); offline replay: no body, no model call, the same answer."""
    need("pydantic")
    journal = redrive.open_journal(":memory:")
    tickets = Tickets()
    with serve() as server:
        server.add(_call_tool(1), _call_tool(2), _chat({"role": "assistant", "content": FINAL}))
        assert _run(journal, tickets, server) == FINAL
        assert tickets.keys == ["ticket:9:3:open_ticket"] * 2 and tickets.opened == ["printer"]
        retried = json.loads(server.requests[1].body)["messages"]
        assert any("ticket service busy" in str(m.get("content")) for m in retried)
        errors = [f.data() for f in journal.frames("ticket:9") if f.kind == "tool_error"]
        assert [e["error"]["retry_requested"] for e in errors] == [True]
        sent = len(server.requests)
        assert _run(journal, tickets, server, live=False) == FINAL
        assert len(server.requests) == sent and len(tickets.keys) == 2


def test_model_retry_recorded_then_the_worker_stops_the_resume_runs_the_retry() -> None:
    """The model's second call fails (a connection error ends the execution) after ModelRetry
    was recorded: the resume replays the recorded ModelRetry (no body), asks the model live,
    and runs the retry under the first attempt's key."""
    need("pydantic")
    import pydantic_ai

    journal = redrive.open_journal(":memory:")
    tickets = Tickets()
    with serve() as server:
        server.add(_call_tool(1), Reply(500, {"error": {"message": "overloaded"}}))
        try:
            _run(journal, tickets, server, retryable=(pydantic_ai.exceptions.ModelHTTPError,))
        except pydantic_ai.exceptions.ModelHTTPError:
            pass
        else:  # pragma: no cover - the script makes the second request fail
            raise AssertionError("the first execution should have stopped")
        assert tickets.keys == ["ticket:9:3:open_ticket"] and tickets.opened == []
        server.add(_call_tool(2), _chat({"role": "assistant", "content": FINAL}))
        assert _run(journal, tickets, server) == FINAL
        assert tickets.keys == ["ticket:9:3:open_ticket"] * 2 and tickets.opened == ["printer"]


def test_retry_requested_through_the_openai_agents_sdk_runs_the_retry_once() -> None:
    """The Agents SDK has no retry signal of its own: a body raising redrive.RetryRequested
    reaches the model through failure_error_function, and the model's retry runs (same key)."""
    need("agents")
    import agents
    from openai import AsyncOpenAI

    from redrive.integrations.openai_agents import function_tool

    agents.set_tracing_disabled(True)
    tickets = Tickets()

    @function_tool(restart_safe=False)
    def open_ticket(subject: str, idempotency_key: str) -> str:
        """Open a support ticket."""
        tickets.keys.append(idempotency_key)
        if len(tickets.keys) == 1:
            raise redrive.RetryRequested("ticket service busy, try again")
        tickets.opened.append(subject)
        return f"T-{len(tickets.opened)}"

    async def drive(base_url: str) -> Any:
        raw = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
        client = redrive.wrap(raw)
        model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
        agent = agents.Agent(name="a", instructions="Help.", model=model, tools=[open_ticket])
        try:
            return (await agents.Runner.run(agent, "open a ticket")).final_output
        finally:
            await client.close()
            await raw.close()

    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(_call_tool(1), _call_tool(2), _chat({"role": "assistant", "content": FINAL}))

        async def main(live: bool) -> Any:
            async with redrive.run(journal, "ticket:a", live=live) as run:
                return run.finish(await drive(server.url + "/v1"))

        assert asyncio.run(main(True)) == FINAL
        assert len(set(tickets.keys)) == 1 and len(tickets.keys) == 2
        assert tickets.opened == ["printer"]
        assert asyncio.run(main(False)) == FINAL and len(tickets.keys) == 2
