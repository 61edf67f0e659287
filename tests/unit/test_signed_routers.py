"""OpenRouter's ``reasoning_details`` come back byte for byte through a resume (issue 27).

OpenRouter answers Chat Completions with the upstream model's reasoning in
``message.reasoning_details`` (``reasoning.text`` with a ``signature``,
``reasoning.encrypted`` with opaque ``data``) and asks for the entries back
unmodified in the next request (before a tool call's result, as Anthropic
does). The OpenAI SDK keeps the field (an extra one) and a loop sends the
message back as it got it. Here the scripted server answers 400 when an entry
comes back altered; the entries hold a ``?key=`` and a key-shaped run, which
the default rules mask anywhere else. Recorded, the next call failed with a
503 (the job gives up), resumed: the first call replayed from the journal and
its message sent back live, then the run replayed whole with no request.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

import redrive
from tests.sdkserver import Reply, serve

DETAILS = [
    {
        "type": "reasoning.text",
        "text": "The tracking link is https://track.example/o/7?key=demo-7f3a9c21.",
        "signature": "EqQBCkgIARABGAIiQPlX0c2cWz3Vn3yq8mJrDq4C2k8Z2m2g0+Yk3Kc1v5o0==",
        "format": "anthropic-claude-v1",
        "index": 0,
    },
    {
        "type": "reasoning.encrypted",
        "data": "gAAAAABo7Q2x/sk-proj-Zr8f2K1mQ9xW4vB7nT3pL6yH0cJ5dA2e/Hk4vR1bN8yT2==",
        "id": "rs_1",
        "format": "openai-responses-v1",
        "index": 1,
    },
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup", "arguments": "{}"},
}


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "gen-1",
        "object": "chat.completion",
        "created": 1,
        "model": "anthropic/claude-sonnet-4.5",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
    }


FIRST = _completion(
    {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_details": DETAILS}
)
FINAL = _completion({"role": "assistant", "content": "done"})


def _validate(body: bytes) -> Reply | None:
    """Refuse the request unless the assistant message carries the entries as they were sent."""
    sent = [m.get("reasoning_details") for m in json.loads(body)["messages"] if "tool_calls" in m]
    if sent != [DETAILS]:
        error = {"message": f"Invalid signature in reasoning_details: {sent!r}", "code": 400}
        return Reply(400, {"error": error})
    return None


def _fault() -> Reply:
    return Reply(503, {"error": {"message": "503: try again later", "code": 503}})


_MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Where is order 7?"}]
_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "shipped"}


def _sync_attempt(journal: Any, url: str) -> Any:
    with openai.OpenAI(base_url=url, api_key="sk-or-test", max_retries=0) as raw:
        client: Any = redrive.wrap(raw)
        with redrive.run(journal, "router") as run:
            made = client.chat.completions.create(model="m", messages=_MESSAGES)
            message = made.choices[0].message.model_dump(exclude_none=True)
            messages = [*_MESSAGES, message, _RESULT]
            final = client.chat.completions.create(model="m", messages=messages)
            return run.finish(final.choices[0].message.content)


def _async_attempt(journal: Any, url: str) -> Any:
    async def main() -> Any:
        raw = openai.AsyncOpenAI(base_url=url, api_key="sk-or-test", max_retries=0)
        client: Any = redrive.wrap(raw)
        async with raw, redrive.run(journal, "router") as run:
            made = await client.chat.completions.create(model="m", messages=_MESSAGES)
            message = made.choices[0].message.model_dump(exclude_none=True)
            messages = [*_MESSAGES, message, _RESULT]
            final = await client.chat.completions.create(model="m", messages=messages)
            return run.finish(final.choices[0].message.content)

    return asyncio.run(main())


@pytest.mark.parametrize("attempt", [_sync_attempt, _async_attempt], ids=["sync", "async"])
def test_reasoning_details_go_back_as_sent_after_a_resume(attempt: Any) -> None:
    """The resumed run sends the replayed entries back and the server takes them.

    Before the fix, the journal held the entries masked (``?key=[REDACTED]``),
    the resumed request carried them so, and the server refused it (400).
    """
    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(Reply(body=FIRST), _fault(), Reply(body=FINAL, check=_validate))
        with pytest.raises(openai.InternalServerError):
            attempt(journal, server.url)
        assert attempt(journal, server.url) == "done"
        assert attempt(journal, server.url) == "done"  # replayed whole
        assert len(server.requests) == 3
