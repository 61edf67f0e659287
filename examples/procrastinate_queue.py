"""A support job on procrastinate (PostgreSQL), made durable by redrive.

Each delivery of the job resumes the run ``support:{job_id}`` under a run lease:
a duplicate job taken while the first runs is retried later, a job whose worker
died (handed out again by the periodic ``requeue_stalled`` task) resumes where it
stopped (finished model calls replayed, not paid again; finished tools not run
again), and a job stopped by a side effect in flight fails as parked, listed by
``redrive runs --status blocked``. Needs ``pip install
'redrive[procrastinate,openai]'``, Postgres (``DATABASE_URL`` for the queue,
``REDRIVE_JOURNAL`` for the journal) and ``OPENAI_API_KEY`` (or ``OPENAI_BASE_URL``).

    python examples/procrastinate_queue.py schema      # once: the queue's tables
    python examples/procrastinate_queue.py worker      # as many as you like
    python examples/procrastinate_queue.py send 42     # prints the answer; again: replayed
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import procrastinate
from openai import AsyncOpenAI

import redrive
from redrive.queues import procrastinate as rq

DATABASE = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
JOURNAL = os.environ.get("REDRIVE_JOURNAL", DATABASE)
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=DATABASE))
client = redrive.wrap(AsyncOpenAI())

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
    """Send an email (the mail service dedupes on the idempotency key)."""
    print(f"[email to {to}, key {idempotency_key}]", file=sys.stderr, flush=True)
    return f"sent to {to}"


async def answer(text: str) -> str:
    """The agent loop: the model may ask for send_email, then answers."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Apologise to the customer by email, then say what you did."},
        {"role": "user", "content": text},
    ]
    while True:
        reply = await client.chat.completions.create(
            model="gpt-4o", messages=messages, tools=[SEND_EMAIL]
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = send_email(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


@app.task(name="support.handle", retry=rq.RETRY)
async def handle(job_id: str, text: str) -> str:
    """One support job: its run is named after the job, so every delivery resumes it."""
    async with rq.run(JOURNAL, f"support:{job_id}", input={"text": text}) as run:
        return run.finish(await answer(text))


@app.periodic(cron="* * * * *")
@app.task(name="support.requeue_stalled", queueing_lock="requeue_stalled")
async def requeue_stalled(timestamp: int) -> None:
    """Every minute: hand out again the jobs of workers whose heartbeat stopped."""
    await rq.requeue_stalled(app, seconds_since_heartbeat=30)


async def send(job_id: str) -> str:
    """Enqueue the job, wait for it, and return the run's answer from the journal."""
    async with app.open_async():
        job = await handle.defer_async(
            job_id=job_id, text="ada@example.com: my order arrived damaged"
        )
        while next(iter(await app.job_manager.list_jobs_async(id=job))).status != "succeeded":
            await asyncio.sleep(0.2)
    record = redrive.storage.shared_journal(JOURNAL).get_run(f"support:{job_id}")
    assert record is not None
    return str(record.output_value())


async def main(argv: list[str]) -> None:
    """``schema``, ``worker`` or ``send JOB_ID``."""
    if argv[:1] == ["schema"]:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
    elif argv[:1] == ["worker"]:
        async with app.open_async():
            await app.run_worker_async(update_heartbeat_interval=5, stalled_worker_timeout=30)
    else:
        print(await send(argv[1] if len(argv) > 1 else "42"))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
