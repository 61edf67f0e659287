"""Scripted model turns of the conformance matrix's scenarios (matrix_cells.py).

Some turns check what the client sends back, as the real provider does: the
signed thinking block must come back unchanged, the stored history must be
in the request, the tool's error must reach the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.integrations.fakeapi import FINAL, TOOL_ARGS, anthropic, chat
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
