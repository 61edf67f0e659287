"""A tool loop on LiteLLM's OpenAI-compatible path, streamed, recorded and replayed by redrive.

LiteLLM takes the OpenAI SDK client to use (``client=``) on its OpenAI path
(``model="openai/..."``, any OpenAI-compatible server with ``api_base``);
hand it a wrapped one. Needs ``pip install 'redrive[litellm]'`` and
``OPENAI_API_KEY`` (or ``OPENAI_BASE_URL``). Set
``LITELLM_LOCAL_MODEL_COST_MAP=True`` to keep LiteLLM from fetching its cost
map at import.

    python examples/litellm_support.py 42
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import litellm
from openai import AsyncOpenAI

import redrive

client = redrive.wrap(AsyncOpenAI())
journal = redrive.open_journal("runs.duckdb")
SEND_EMAIL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"],
        },
    },
}


@redrive.tool(restart_safe=True)
def send_email(to: str, body: str, idempotency_key: str) -> str:
    """Send an email to a customer."""
    print(f"[email to {to}, key {idempotency_key}]", file=sys.stderr)
    return f"sent to {to}"


async def handle(job_id: str, text: str) -> str:
    """Run the loop for one job; a retry with the same job id resumes or replays it."""
    async with redrive.run(journal, f"support:{job_id}", input={"text": text}) as run:
        messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
        while True:
            stream = await litellm.acompletion(
                model="openai/gpt-4o",
                messages=messages,
                tools=[SEND_EMAIL],
                stream=True,
                client=client,
                api_base=os.environ.get("OPENAI_BASE_URL"),
            )
            chunks = [chunk async for chunk in stream]
            reply = litellm.stream_chunk_builder(chunks, messages=messages)
            message = reply.choices[0].message
            if not message.tool_calls:
                return run.finish(message.content)
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = send_email(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


if __name__ == "__main__":
    job = sys.argv[1] if len(sys.argv) > 1 else "42"
    print(asyncio.run(handle(job, "ada@example.com: my order arrived damaged")))
