"""A scripted provider that signs what it hands out and refuses what comes back altered.

Used by tests/integrations/test_signed_peer_reports.py. Each builder returns
a :class:`tests.sdkserver.Reply` for one model turn, and each ``*_check``
function is a ``Reply.check``: it reads the request the client sent and
answers the provider's own 400 when signed content came back altered,
dropped, or out of place, as the real APIs do:

* OpenAI Responses: a ``reasoning`` item's ``encrypted_content`` must come
  back unchanged (``invalid_encrypted_content``: "The encrypted content ...
  could not be verified."), followed by the item produced after it ("Item
  'rs_1' of type 'reasoning' was provided without its required following
  item."), and a ``function_call`` needs its reasoning item ("... was
  provided without its required 'reasoning' item").
* Anthropic Messages: a ``thinking`` block's ``signature`` must match its
  text (an HMAC here) and a ``redacted_thinking`` block's ``data`` must come
  back unchanged ("messages.1.content.0: Invalid `signature` in `thinking`
  block").

The signed values hold text the default secret rules would mask anywhere else
(an ``sk-`` key shape, a ``?key=`` parameter): redrive keeps signed content
byte for byte (redrive/_signed.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from tests.integrations.fakeapi import FINAL, TOOL_ARGS, _response, _sse
from tests.sdkserver import Reply

_KEY = b"provider-signing-key"

#: A Responses reasoning item's encrypted content: url-safe base64 (Fernet-like), holding
#: a run of characters that has the shape of an OpenAI key.
BLOB = "gAAAAABp" + base64.urlsafe_b64encode(b"\x8a" * 30).decode() + "-sk-" + "Q7" * 12 + "=="
SUMMARY = "Look the order up at https://shop.example/o?key=demo-7f3a9c21 first."
#: Anthropic: the thinking text (masked anywhere else), a signature-only block, a redacted one.
THINKING = "I will check https://api.example/v1/p?key=demo-7f3a9c21 before emailing."
REDACTED = "EmwKAhgBEgy/" + "sk-" + "R2" * 12 + "x9Zq=="


def sign(text: str) -> str:
    """The signature the provider gives ``text`` (base64 of an HMAC-SHA256)."""
    return base64.b64encode(hmac.new(_KEY, text.encode(), hashlib.sha256).digest()).decode()


def _error(status: int, message: str, code: str | None = None) -> Reply:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None}}
    body["error"]["code"] = code
    return Reply(status=status, body=body)


# --- OpenAI Responses ---------------------------------------------------------------------------

REASONING: dict[str, Any] = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": SUMMARY}],
    "encrypted_content": BLOB,
}
CALL: dict[str, Any] = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "send_email",
    "arguments": json.dumps(TOOL_ARGS),
    "status": "completed",
}
MESSAGE: dict[str, Any] = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": FINAL, "annotations": []}],
}


def reasoned(final: bool, stream: bool = False, model: str = "o4-mini") -> Reply:
    """A Responses turn: reasoning + the function call, or the final message (checked)."""
    output = [MESSAGE] if final else [REASONING, CALL]
    done = {**_response(output), "model": model}
    check = responses_check if final else None
    if not stream:
        return Reply(body=done, check=check)
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {**_response([], "in_progress"), "model": model}})
    ]
    for index, item in enumerate(output):
        if item["type"] == "reasoning":
            opened = {**item, "summary": [], "encrypted_content": None}
            events += [
                ("response.output_item.added", {"output_index": index, "item": opened}),
                (
                    "response.reasoning_summary_part.added",
                    {
                        "item_id": "rs_1",
                        "output_index": index,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""},
                    },
                ),
            ]
            for piece in (SUMMARY[:30], SUMMARY[30:]):  # the ?key= split across two deltas
                events.append(
                    (
                        "response.reasoning_summary_text.delta",
                        {
                            "item_id": "rs_1",
                            "output_index": index,
                            "summary_index": 0,
                            "delta": piece,
                        },
                    )
                )
            events += [
                (
                    "response.reasoning_summary_text.done",
                    {"item_id": "rs_1", "output_index": index, "summary_index": 0, "text": SUMMARY},
                ),
                (
                    "response.reasoning_summary_part.done",
                    {
                        "item_id": "rs_1",
                        "output_index": index,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": SUMMARY},
                    },
                ),
            ]
        else:
            events.append(("response.output_item.added", {"output_index": index, "item": item}))
        if item["type"] == "message":
            delta = {"item_id": "msg_1", "output_index": index, "content_index": 0}
            events.append(("response.output_text.delta", {**delta, "delta": FINAL, "logprobs": []}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": done}))
    chunks = [
        _sse({"type": kind, "sequence_number": i, **data}, kind)
        for i, (kind, data) in enumerate(events)
    ]
    return Reply(chunks=chunks, check=check)


def responses_check(body: bytes) -> Reply | None:
    """The Responses API's checks of the reasoning items a request sends back."""
    items = [i for i in json.loads(body).get("input", []) if isinstance(i, dict)]
    seen = False
    for n, item in enumerate(items):
        if item.get("type") == "reasoning":
            seen = True
            if item.get("encrypted_content") != BLOB:
                shown = str(item.get("encrypted_content"))
                return _error(
                    400,
                    f"The encrypted content {shown[:4]}...{shown[-4:]} could not be verified.",
                    "invalid_encrypted_content",
                )
            follows = items[n + 1] if n + 1 < len(items) else {}
            if follows.get("type") != "function_call" or follows.get("call_id") != "call_1":
                return _error(
                    400,
                    f"Item '{item.get('id')}' of type 'reasoning' was provided without its "
                    "required following item.",
                )
        if item.get("type") == "function_call" and not seen:
            return _error(
                400,
                f"Item '{item.get('id')}' of type 'function_call' was provided without its "
                "required 'reasoning' item: 'rs_1'.",
            )
    if not seen:
        return _error(400, "The reasoning item rs_1 was not sent back (store=false).")
    return None


# --- Anthropic Messages -------------------------------------------------------------------------


def thinking_blocks() -> list[dict[str, Any]]:
    """A thinking block, a signature-only one (``display: omitted``), a redacted one."""
    return [
        {"type": "thinking", "thinking": THINKING, "signature": sign(THINKING)},
        {"type": "thinking", "thinking": "", "signature": sign("")},
        {"type": "redacted_thinking", "data": REDACTED},
    ]


def thought(final: bool, stream: bool = False) -> Reply:
    """An Anthropic turn: thinking blocks + the tool use, or the final text (checked)."""
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "send_email", "input": TOOL_ARGS}
    content = [{"type": "text", "text": FINAL}] if final else [*thinking_blocks(), tool_use]
    stop = "end_turn" if final else "tool_use"
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 5},
    }
    check = anthropic_check if final else None
    if not stream:
        return Reply(body=message, check=check)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": {**message, "content": [], "stop_reason": None}})
    ]
    for index, block in enumerate(content):
        kind = block["type"]
        if kind == "thinking":
            opened: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas: list[dict[str, Any]] = [
                {"type": "thinking_delta", "thinking": part}
                for part in (block["thinking"][:25], block["thinking"][25:])
                if part
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            opened = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(TOOL_ARGS)}]
        elif kind == "text":
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:  # redacted_thinking arrives whole
            opened, deltas = block, []
        events.append(("content_block_start", {"index": index, "content_block": opened}))
        events += [("content_block_delta", {"index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"index": index}))
    events += [
        (
            "message_delta",
            {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}},
        ),
        ("message_stop", {}),
    ]
    return Reply(chunks=[_sse({"type": k, **d}, k) for k, d in events], check=check)


def anthropic_check(body: bytes) -> Reply | None:
    """Anthropic's check of the thinking blocks an assistant turn sends back."""
    messages = json.loads(body).get("messages", [])
    for m, message in enumerate(messages):
        if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
            continue
        sent = [b for b in message["content"] if b.get("type") in ("thinking", "redacted_thinking")]
        if sent != thinking_blocks():
            kinds = [block.get("type") for block in message["content"]]
            c = next((n for n, k in enumerate(kinds) if k in ("thinking", "redacted_thinking")), 0)
            return Reply(
                status=400,
                body={
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": f"messages.{m}.content.{c}: Invalid `signature` in "
                        f"`thinking` block (sent {sent!r})",
                    },
                },
            )
    return None


# --- Gemini's OpenAI-compatible Chat Completions ----------------------------------------------

#: A Gemini thought signature: base64 holding a run with the shape of a Google API key.
THOUGHT = "CiQB0e2Kb/" + "AIza" + "Sy" + "Q" * 33 + "Ej8KPQHR7YpvXw=="


def gemini_chat(final: bool, stream: bool = False) -> Reply:
    """A Chat Completions turn of Gemini's OpenAI endpoint: a signed tool call, or the text."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "send_email", "arguments": json.dumps(TOOL_ARGS)},
        "extra_content": {"google": {"thought_signature": THOUGHT}},
    }
    message: dict[str, Any] = (
        {"role": "assistant", "content": FINAL}
        if final
        else {"role": "assistant", "content": None, "tool_calls": [call]}
    )
    check = gemini_check if final else None

    def body(choice: dict[str, Any], kind: str) -> dict[str, Any]:
        return {
            "id": "g-1",
            "object": kind,
            "created": 1,
            "model": "gemini-3-pro-preview",
            "choices": [choice],
        }

    if not stream:
        done = {"index": 0, "message": message, "finish_reason": "stop" if final else "tool_calls"}
        return Reply(body=body(done, "chat.completion"), check=check)
    if final:
        deltas = [{"role": "assistant", "content": FINAL}]
    else:
        deltas = [{"role": "assistant", "content": None, "tool_calls": [{**call, "index": 0}]}]
    chunks = [
        _sse(body({"index": 0, "delta": d, "finish_reason": None}, "chat.completion.chunk"))
        for d in deltas
    ]
    last = {"index": 0, "delta": {}, "finish_reason": "stop" if final else "tool_calls"}
    chunks += [_sse(body(last, "chat.completion.chunk")), "data: [DONE]\n\n"]
    return Reply(chunks=chunks, check=check)


def gemini_check(body: bytes) -> Reply | None:
    """Gemini's check: every function call sent back carries its thought signature, unchanged."""
    for m, message in enumerate(json.loads(body).get("messages", [])):
        for call in message.get("tool_calls") or []:
            sent = ((call.get("extra_content") or {}).get("google") or {}).get("thought_signature")
            if sent != THOUGHT:
                name = call.get("function", {}).get("name")
                return Reply(
                    status=400,
                    body=[
                        {
                            "error": {
                                "code": 400,
                                "message": "Function call is missing a thought_signature in "
                                "functionCall parts. This is required for tools to work "
                                f"correctly. Additional data, function call `default_api:{name}`"
                                f", position {m + 1}. (sent {sent!r})",
                                "status": "INVALID_ARGUMENT",
                            }
                        }
                    ],
                )
    return None
