"""A support agent on pydantic-ai (OpenAI or Anthropic), recorded and replayed by redrive.

Run it twice with the same job id: the second run replays the journal (no
model call, no email sent again). Needs ``pip install 'redrive[pydantic-ai]'``
and ``OPENAI_API_KEY`` (or ``ANTHROPIC_API_KEY`` with ``--anthropic``).

    python examples/pydantic_ai_support.py 42 [--anthropic]
"""

from __future__ import annotations

import asyncio
import sys

import pydantic_ai

import redrive
from redrive.integrations.pydantic_ai import tool

journal = redrive.open_journal("runs.duckdb")


@tool(restart_safe=True)
def send_email(to: str, body: str, idempotency_key: str) -> str:
    """Send an email to a customer.

    Args:
        to: the customer's address.
        body: the text of the email.
        idempotency_key: filled in by redrive (the model never sees it).
    """
    print(f"[email to {to}, key {idempotency_key}]", file=sys.stderr)
    return f"sent to {to}"


def make_model(anthropic: bool) -> pydantic_ai.models.Model:
    """The model, on a wrapped SDK client: every request is a recorded step."""
    if anthropic:
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        aprovider = AnthropicProvider(anthropic_client=redrive.wrap(AsyncAnthropic()))
        return AnthropicModel("claude-sonnet-4-5", provider=aprovider)
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel(
        "gpt-4o", provider=OpenAIProvider(openai_client=redrive.wrap(AsyncOpenAI()))
    )


async def handle(job_id: str, text: str, anthropic: bool = False) -> str:
    """Run the agent for one job, streamed; a retry with the same job id resumes or replays it."""
    agent = pydantic_ai.Agent(
        make_model(anthropic),
        instructions="Apologise to the customer by email, then say what you did.",
        tools=[send_email],
    )
    async with (
        redrive.run(journal, f"support:{job_id}", input={"text": text}) as run,
        agent.run_stream(text) as streamed,
    ):
        return run.finish(await streamed.get_output())


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    text = "ada@example.com: my order arrived damaged"
    print(asyncio.run(handle(args[0] if args else "42", text, "--anthropic" in sys.argv)))
