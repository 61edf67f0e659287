"""Scripted model turns of the conformance matrix's scenarios (matrix_cells.py).

Some turns check what the client sends back, as the real provider does: the
signed thinking block must come back unchanged, the stored history must be
in the request, the tool's error must reach the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.integrations.fakeapi import FINAL, TOOL_ARGS, _sse, anthropic, chat, responses
from tests.sdkserver import Reply

#: a thinking block the provider signed; the secret-looking text inside must come back as is
THINKING = {
    "type": "thinking",
    "thinking": "The tracking link is https://track.example/o/7?key=demo-7f3a9c21; apologise.",
    "signature": "EqQBCkgIARABGAIiQPlX0c2cWz3Vn3yq8mJrDq4C2k8Z2m2g0+Yk3Kc1v5o0==",
}


def _refuse(message: str) -> Reply:
    return Reply(
        status=400,
        body={"type": "error", "error": {"type": "invalid_request_error", "message": message}},
    )


def _wanting(reply: Reply, test: Callable[[bytes], str | None]) -> Reply:
    """``reply``, answered only when ``test(request body)`` finds nothing wrong (else a 400)."""

    def check(body: bytes) -> Reply | None:
        wrong = test(body)
        return None if wrong is None else _refuse(wrong)

    reply.check = check
    return reply


def _signed_back(body: bytes) -> str | None:
    sent = json.loads(body)["messages"][1]["content"][0]
    if sent != THINKING:
        return f"messages.1.content.0: Invalid signature in thinking block: {sent!r}"
    return None


def thinking() -> list[Reply]:
    """A tool use after a signed thinking block; the next request must carry the block as is."""
    first = anthropic(False)
    first.body["content"].insert(0, dict(THINKING))
    return [first, _wanting(anthropic(True), _signed_back)]


def streamed_thinking() -> list[Reply]:
    """:func:`thinking` streamed (pydantic-ai streams its Anthropic requests itself).

    The thinking text comes in two deltas that split the secret-looking key,
    then the signature in its own delta, then the tool use.
    """
    first = anthropic(False)
    start = {**first.body, "content": [], "stop_reason": None}
    text = THINKING["thinking"]
    half = text.index("demo-") + 3  # the key is split across the two deltas
    use = first.body["content"][0]
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": start}),
        (
            "content_block_start",
            {"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        ),
        *(
            (
                "content_block_delta",
                {"index": 0, "delta": {"type": "thinking_delta", "thinking": t}},
            )
            for t in (text[:half], text[half:])
        ),
        (
            "content_block_delta",
            {"index": 0, "delta": {"type": "signature_delta", "signature": THINKING["signature"]}},
        ),
        ("content_block_stop", {"index": 0}),
        ("content_block_start", {"index": 1, "content_block": {**use, "input": {}}}),
        (
            "content_block_delta",
            {
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(TOOL_ARGS)},
            },
        ),
        ("content_block_stop", {"index": 1}),
        (
            "message_delta",
            {
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {}),
    ]
    chunks = [_sse({"type": kind, **data}, kind) for kind, data in events]
    return [Reply(chunks=chunks), _wanting(anthropic(True, True), _thinking_back)]


def _thinking_back(body: bytes) -> str | None:
    """Every thinking block of the request, wherever it sits, must be :data:`THINKING` as is."""
    sent = [
        block
        for m in json.loads(body)["messages"]
        if isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") in ("thinking", "redacted_thinking")
    ]
    if sent != [THINKING]:
        return f"Invalid signature in thinking block: {sent!r}"
    return None


#: a reasoning item the provider encrypted (``include=["reasoning.encrypted_content"]``,
#: ``store=False``): its encrypted content holds a key-shaped run, its summary a ``?key=``,
#: and it carries a ``session_token`` (a field a later API version may add); each must
#: come back as sent
REASONING: dict[str, Any] = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [
        {
            "type": "summary_text",
            "text": "Apologise; the tracking link is https://track.example/o/7?key=demo-7f3a9c21.",
        }
    ],
    "encrypted_content": "gAAAAABo7Q2x/sk-proj-Zr8f2K1mQ9xW4vB7nT3pL6yH0cJ5dA2e/Hk4vR1bN8yT2==",
    "session_token": "st-9c21f3a7e0b84d52a1",
}


def _openai_refuse(message: str) -> Reply:
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": "input",
        "code": "invalid_encrypted_content",
    }
    return Reply(status=400, body={"error": error})


def _reasoning_back(body: bytes) -> str | None:
    """The request's reasoning items must be exactly :data:`REASONING` (OpenAI's 400 otherwise)."""
    sent = [
        item
        for item in json.loads(body)["input"]
        if isinstance(item, dict) and item.get("type") == "reasoning"
    ]
    if sent != [REASONING]:
        return f"The encrypted content for item rs_1 could not be verified: {sent!r}"
    return None


def reasoning() -> list[Reply]:
    """A function call after an encrypted reasoning item; the next request must carry it as is."""
    first = responses(False)
    first.body["output"].insert(0, dict(REASONING))
    first.body["usage"]["output_tokens_details"]["reasoning_tokens"] = 3
    second = responses(True)

    def check(body: bytes) -> Reply | None:
        wrong = _reasoning_back(body)
        return None if wrong is None else _openai_refuse(wrong)

    second.check = check
    return [first, second]


def told() -> list[Reply]:
    """A tool call; the next request must tell the model the tool's error."""

    def has_error(body: bytes) -> str | None:
        return None if b"the mailbox is full" in body else "the tool's error is not in the request"

    return [chat(False), _wanting(chat(True), has_error)]


def structured_lc() -> list[Reply]:
    """The tool loop, then one more turn answering the structured-output schema in JSON."""
    shaped = chat(True)
    shaped.body["choices"][0]["message"]["content"] = json.dumps({"sent": True, "summary": FINAL})
    return [chat(False), chat(True), shaped]


def history() -> list[Reply]:
    """A tool call whose request must carry the stored conversation, then the answer."""

    def carries(body: bytes) -> str | None:
        return None if b"Hi, order 7?" in body else "the stored history is not in the request"

    return [_wanting(chat(False), carries), chat(True)]


# --- the first scenarios' turns --------------------------------------------------------------


def two(build: Callable[[bool, bool], Reply], stream: bool = False) -> Callable[[], list[Reply]]:
    return lambda: [build(False, stream), build(True, stream)]


def chat_call(name: str, args: dict[str, object], call_id: str = "call_1") -> Reply:
    """A Chat Completions turn calling tool ``name`` with ``args``."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    reply = chat(False)
    reply.body["choices"][0]["message"]["tool_calls"] = [call]
    return reply


def chat_text(text: str) -> Reply:
    reply = chat(True)
    reply.body["choices"][0]["message"]["content"] = text
    return reply


def handoff() -> list[Reply]:
    return [chat_call("transfer_to_billing", {}, "call_0"), chat(False), chat(True)]


def structured_agents() -> list[Reply]:
    return [chat(False), chat_text(json.dumps({"sent": True, "summary": FINAL}))]


def structured_pydantic() -> list[Reply]:
    return [chat(False), chat_call("final_result", {"sent": True, "summary": FINAL}, "call_2")]


def retry() -> list[Reply]:
    bad = {**TOOL_ARGS, "body": "sorry"}  # the tool asks for a retry: no capital letter
    return [chat_call("send_email", bad, "call_0"), chat(False), chat(True)]


def interrupt() -> list[Reply]:
    calls = [
        chat_call("send_email", TOOL_ARGS, "call_1"),
        chat_call("ask_human", {"question": "Also refund?"}, "call_2"),
    ]
    both = calls[0]
    both.body["choices"][0]["message"]["tool_calls"] += calls[1].body["choices"][0]["message"][
        "tool_calls"
    ]
    return [both, chat(True)]
