"""A support job on Celery (Redis broker), made durable by redrive.

Each delivery of the job resumes the run ``support:{job_id}`` under a run lease:
a job redelivered while its first worker still runs it is retried later, a job
whose worker died resumes where it stopped (finished model calls replayed, not
paid again; finished tools not run again), and a job stopped by a side effect in
flight fails as parked, listed by ``redrive runs --status blocked``. Needs
``pip install 'redrive[celery,postgres,openai]'``, Redis (``REDIS_URL``), a
Postgres journal (``REDRIVE_JOURNAL``) and ``OPENAI_API_KEY`` (or ``OPENAI_BASE_URL``).

    python examples/celery_queue.py worker      # as many as you like
    python examples/celery_queue.py send 42     # prints the answer; again: replayed
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import openai
from celery import Celery

import redrive
from redrive.queues import celery as rq

REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
JOURNAL = os.environ.get("REDRIVE_JOURNAL", "postgresql://postgres@127.0.0.1:5432/test")
app = Celery("support", broker=REDIS, backend=REDIS)
app.conf.broker_transport_options = {"visibility_timeout": 300}  # seconds
app.conf.worker_prefetch_multiplier = 1

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


@functools.cache
def client() -> Any:
    """The wrapped OpenAI client of this worker process (made after the pool forked)."""
    return redrive.wrap(openai.OpenAI())


def answer(text: str) -> str:
    """The agent loop: the model may ask for send_email, then answers."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Apologise to the customer by email, then say what you did."},
        {"role": "user", "content": text},
    ]
    while True:
        reply = client().chat.completions.create(
            model="gpt-4o", messages=messages, tools=[SEND_EMAIL]
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = send_email(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


@app.task(bind=True, name="support.handle", **rq.TASK_OPTIONS)
def handle(self, job_id: str, text: str) -> str:
    """One support job: its run is named after the job, so every delivery resumes it."""
    with rq.run(self, JOURNAL, f"support:{job_id}", input={"text": text}) as run:
        return run.finish(answer(text))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        app.worker_main(["worker", "--pool=prefork", "--concurrency=2", "--loglevel=INFO"])
    else:
        job_id = sys.argv[2] if len(sys.argv) > 2 else "42"
        print(handle.delay(job_id, "ada@example.com: my order arrived damaged").get(timeout=120))
