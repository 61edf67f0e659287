"""Issue 23 item 5 through the framework adapters: pydantic-ai and the OpenAI Agents SDK call a
tool with every parameter of its schema, the defaults bound in. A parameter added since the
record at its default keeps the recorded call (CONTRACT C1): the replay answers it from the
record and the body does not run again; a changed default is another call and diverges
before the body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

import redrive
from redrive.errors import DivergenceError
from redrive.storage import MemoryJournal
from tests.integrations.conftest import need

#: tool parameters after ``order``: then, now, and whether the recorded call still replays
CHANGES = [
    pytest.param("", ", priority: str = 'normal'", True, id="added-at-its-default"),
    pytest.param(", priority: str = 'low'", ", priority: str = 'normal'", False, id="new-default"),
]


def _define(params: str, sent: list[str]) -> Callable[..., Any]:
    """An async ``send_invoice(order{params})`` that notes each invoice in ``sent``."""
    scope: dict[str, Any] = {"SENT": sent}
    exec(
        f"async def send_invoice(order: str{params}) -> str:\n"
        '    """Send an invoice."""\n'
        "    SENT.append(order)\n"
        "    return f'sent {order}'\n",
        scope,
    )
    return scope["send_invoice"]  # type: ignore[no-any-return]


def _agents_call(fn: Callable[..., Any]) -> Callable[[], Any]:
    import agents
    from agents.tool_context import ToolContext

    from redrive.integrations.openai_agents import function_tool

    agents.set_tracing_disabled(True)
    made = function_tool(restart_safe=False)(fn)
    arguments = json.dumps({"order": "A"})  # what the model asked for

    async def call() -> Any:
        ctx = ToolContext(
            context=None, tool_name="send_invoice", tool_call_id="call_1", tool_arguments=arguments
        )
        return await made.on_invoke_tool(ctx, arguments)

    return call


def _pydantic_call(fn: Callable[..., Any]) -> Callable[[], Any]:
    import pydantic_ai
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from redrive.integrations.pydantic_ai import tool

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:  # the model asks for the invoice, then answers
            return ModelResponse(parts=[ToolCallPart("send_invoice", {"order": "A"})])
        return ModelResponse(parts=[TextPart("done")])

    agent = pydantic_ai.Agent(FunctionModel(model), tools=[tool(restart_safe=False)(fn)])

    async def call() -> Any:
        return (await agent.run("invoice A")).output

    return call


FAMILIES = {"agents": _agents_call, "pydantic": _pydantic_call}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize(("before", "after", "replays"), CHANGES)
def test_a_parameter_added_at_its_default_replays_through_the_adapter(
    family: str, before: str, after: str, replays: bool
) -> None:
    need(family)
    journal, sent = MemoryJournal(), list[str]()
    record = FAMILIES[family](_define(before, sent))

    async def go(call: Callable[[], Any], live: bool) -> Any:
        async with redrive.run(journal, "invoice", live=live):
            return await call()

    first = asyncio.run(go(record, True))
    assert sent == ["A"]
    again = FAMILIES[family](_define(after, sent))
    if replays:
        assert asyncio.run(go(again, False)) == first
    else:
        with pytest.raises(DivergenceError) as caught:
            asyncio.run(go(again, False))
        assert caught.value.kind == "tool" and "$.priority" in str(caught.value)
    assert sent == ["A"], "the recorded invoice was sent again"
