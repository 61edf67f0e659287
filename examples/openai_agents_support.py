"""A support agent on the OpenAI Agents SDK, recorded and replayed by redrive.

Run it twice with the same job id: the second run replays the journal (no
model call, no email sent again). Kill it mid-run and run it again: finished
model calls and tools replay, the run goes on live from the first unfinished
step. Needs ``pip install 'redrive[agents]'`` and ``OPENAI_API_KEY`` (or
``OPENAI_BASE_URL`` for an OpenAI-compatible server).

    python examples/openai_agents_support.py 42
"""

from __future__ import annotations

import asyncio
import sys

import agents
from openai import AsyncOpenAI

import redrive
from redrive.integrations.openai_agents import function_tool

agents.set_tracing_disabled(True)  # traces would go to OpenAI with their own client
client = redrive.wrap(AsyncOpenAI())  # every model request is a recorded step
journal = redrive.open_journal("runs.duckdb")


@function_tool(restart_safe=True)  # dedupes on its idempotency key
def send_email(to: str, body: str, idempotency_key: str) -> str:
    """Send an email to a customer.

    Args:
        to: the customer's address.
        body: the text of the email.
        idempotency_key: filled in by redrive (the model never sees it).
    """
    print(f"[email to {to}, key {idempotency_key}]", file=sys.stderr)
    return f"sent to {to}"


agent = agents.Agent(
    name="support",
    instructions="Apologise to the customer by email, then say what you did.",
    model=agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client),
    tools=[send_email],
)


async def handle(job_id: str, text: str) -> str:
    """Run the agent for one job; a retry with the same job id resumes or replays it."""
    async with redrive.run(journal, f"support:{job_id}", input={"text": text}) as run:
        streamed = agents.Runner.run_streamed(agent, text)
        async for _event in streamed.stream_events():
            pass  # forward events to your UI here
        return run.finish(str(streamed.final_output))


if __name__ == "__main__":
    job = sys.argv[1] if len(sys.argv) > 1 else "42"
    print(asyncio.run(handle(job, "ada@example.com: my order arrived damaged")))
