"""Conformance-matrix scenarios of fidelity: content a provider signs or encrypts, sent back.

Issue 27: what the loop received live it receives on replay, and sends back
to the provider byte for byte, at every crash boundary (DESIGN invariant 16).
Each driver runs a tool loop whose first model turn carries signed or
encrypted content with secret-looking text inside (the scripts in
matrix_scripts.py), and whose next request carries that content back; the
scripted server refuses it (400) when it comes back altered, as the provider
does:

* ``openai-reasoning``: the bare OpenAI SDK's Responses API with
  ``include=["reasoning.encrypted_content"]`` and ``store=False``;
* ``agents-reasoning``: the OpenAI Agents SDK's ``OpenAIResponsesModel``, the
  same reasoning item sent back by the SDK itself;
* ``pydantic-thinking``: pydantic-ai's Anthropic model with thinking on, its
  ``ThinkingPart`` signed.

Each returns the answer and the signed content as the loop saw it, so the
parent compares it across attempts and with what the provider sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redrive
from tests.integrations import matrix_bare as bare
from tests.integrations.matrix_child import PROMPT, Effects

#: the Responses API's ``send_email`` function tool
_TOOL = {
    "type": "function",
    "name": "send_email",
    "parameters": bare._anthropic_tools()[0]["input_schema"],
}


def openai_reasoning(job: dict[str, Any], run: redrive.Run) -> Any:
    """A Responses tool loop that keeps no state at OpenAI: each reasoning item is sent back."""
    from openai import OpenAI

    raw = OpenAI(base_url=job["base_url"], api_key="sk-test", max_retries=0)
    try:
        return _reasoning_loop(job, redrive.wrap(raw))
    finally:
        raw.close()


def _reasoning_loop(job: dict[str, Any], client: Any) -> Any:
    send_email = bare._email_tool(job)
    items: list[Any] = [{"role": "user", "content": PROMPT}]
    seen: list[dict[str, Any]] = []
    while True:
        response = client.responses.create(
            model="o4-mini",
            input=items,
            tools=[_TOOL],
            reasoning={"effort": "low"},
            include=["reasoning.encrypted_content"],
            store=False,
        )
        seen += [o.model_dump(exclude_none=True) for o in response.output if o.type == "reasoning"]
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            return {
                "output": response.output_text,
                "usage": response.usage.total_tokens,
                "reasoning": seen,
            }
        items += [o.model_dump(exclude_none=True) for o in response.output]
        for call in calls:
            result = send_email(**json.loads(call.arguments))
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": result}
            )


async def agents_reasoning(job: dict[str, Any], run: redrive.Run) -> Any:
    """An Agents SDK run on the Responses API, reasoning encrypted: the SDK sends it back."""
    import agents
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning

    from redrive.integrations.openai_agents import function_tool

    agents.set_tracing_disabled(True)
    effects = Effects(job["effects"])

    @function_tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer.

        Args:
            to: the address.
            body: the text.
        """
        return effects.send(to, idempotency_key)

    raw = AsyncOpenAI(base_url=job["base_url"], api_key="sk-test", max_retries=0)
    model = agents.OpenAIResponsesModel(model="o4-mini", openai_client=redrive.wrap(raw))
    settings = agents.ModelSettings(
        reasoning=Reasoning(effort="low"),
        store=False,
        response_include=["reasoning.encrypted_content"],
    )
    agent = agents.Agent(
        name="support",
        instructions="Help.",
        model=model,
        model_settings=settings,
        tools=[send_email],
    )
    try:
        result = await agents.Runner.run(agent, PROMPT)
    finally:
        await raw.close()
    seen = [
        item.raw_item.model_dump(exclude_none=True)
        for item in result.new_items
        if item.type == "reasoning_item"
    ]
    return {
        "output": result.final_output,
        "usage": result.context_wrapper.usage.total_tokens,
        "reasoning": seen,
    }


async def pydantic_thinking(job: dict[str, Any], run: redrive.Run) -> Any:
    """A pydantic-ai agent on Anthropic with thinking on: its signed ThinkingPart goes back."""
    import pydantic_ai
    from anthropic import AsyncAnthropic
    from pydantic_ai.messages import ThinkingPart
    from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from redrive.integrations.pydantic_ai import tool

    effects = Effects(job["effects"])

    @tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer."""
        return effects.send(to, idempotency_key)

    root = job["base_url"].removesuffix("/v1")
    raw = AsyncAnthropic(base_url=root, api_key="sk-ant-t", max_retries=0)
    client = redrive.wrap(raw)
    model = AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=client))
    settings = AnthropicModelSettings(anthropic_thinking={"type": "enabled", "budget_tokens": 1024})
    agent = pydantic_ai.Agent(
        model, instructions="Help.", tools=[send_email], model_settings=settings
    )
    try:
        result = await agent.run(PROMPT)
    finally:
        await raw.close()
    seen = [
        {"type": "thinking", "thinking": part.content, "signature": part.signature}
        for message in result.all_messages()
        for part in message.parts
        if isinstance(part, ThinkingPart)
    ]
    return {"output": result.output, "usage": result.usage.total_tokens, "thinking": seen}


#: scenario name -> (driver, face)
SIGNED_DRIVERS: dict[str, tuple[Callable[..., Any], str]] = {
    "openai-reasoning": (openai_reasoning, "sync"),
    "agents-reasoning": (agents_reasoning, "async"),
    "pydantic-thinking": (pydantic_thinking, "async"),
}
