"""Scripted OpenAI- and Anthropic-compatible replies for the framework tests.

Each builder returns a :class:`tests.sdkserver.Reply` for one model turn: a
call of the tool ``send_email`` or a final text, as JSON or as a stream in
that API's server-sent events. :data:`HOLD` in a script makes the server keep
the request open without answering (a model call in flight when the test
kills the process).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from tests.sdkserver import Received, Reply, ScriptServer, _Handler

TOOL_ARGS = {"to": "ada@example.com", "body": "Sorry about the damaged order."}
FINAL = "Emailed Ada about the damaged order."
HOLD = Reply(status=0)


@attrs.define
class HoldAfter(Reply):
    """A streamed reply whose first ``sent`` chunks go out, then the stream hangs open."""

    sent: int = 2


def held(reply: Reply) -> Reply:
    """Hang ``reply`` open: mid-stream for a stream, before any byte otherwise."""
    if reply.chunks is None:
        return HOLD
    return HoldAfter(chunks=reply.chunks)


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


# --- Chat Completions -------------------------------------------------------------------------


def chat(final: bool, stream: bool = False) -> Reply:
    """One Chat Completions turn: the tool call (``final=False``) or the final text."""
    usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "send_email", "arguments": json.dumps(TOOL_ARGS)},
    }
    if not stream:
        message: dict[str, Any] = (
            {"role": "assistant", "content": FINAL}
            if final
            else {"role": "assistant", "content": None, "tool_calls": [call]}
        )
        return Reply(
            body={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "stop" if final else "tool_calls",
                    }
                ],
                "usage": usage,
            }
        )

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return _sse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "gpt-4o",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    if final:
        body = [chunk({"role": "assistant", "content": ""})]
        body += [chunk({"content": part}) for part in (FINAL[:10], FINAL[10:])]
        body.append(chunk({}, "stop"))
    else:
        streamed = {**call, "index": 0, "function": {"name": "send_email", "arguments": ""}}
        args = json.dumps(TOOL_ARGS)
        body = [
            chunk({"role": "assistant", "content": None, "tool_calls": [streamed]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:12]}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[12:]}}]}),
            chunk({}, "tool_calls"),
        ]
    usage_chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [],
        "usage": usage,
    }
    return Reply(chunks=[*body, _sse(usage_chunk), "data: [DONE]\n\n"])


# --- Responses API ----------------------------------------------------------------------------


def _response(output: list[dict[str, Any]], status: str = "completed") -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": "gpt-4o",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 11,
            "output_tokens": 5,
            "total_tokens": 16,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def responses(final: bool, stream: bool = False) -> Reply:
    """One Responses API turn: the function call (``final=False``) or the final message."""
    item: dict[str, Any] = (
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": FINAL, "annotations": []}],
        }
        if final
        else {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "send_email",
            "arguments": json.dumps(TOOL_ARGS),
            "status": "completed",
        }
    )
    done = _response([item])
    if not stream:
        return Reply(body=done)
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": _response([], "in_progress")}),
        ("response.output_item.added", {"output_index": 0, "item": item}),
    ]
    if final:
        events.append(
            (
                "response.output_text.delta",
                {
                    "item_id": "msg_1",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": FINAL,
                    "logprobs": [],
                },
            )
        )
    events += [
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": done}),
    ]
    return Reply(
        chunks=[
            _sse({"type": kind, "sequence_number": i, **data}, kind)
            for i, (kind, data) in enumerate(events)
        ]
    )


# --- Anthropic Messages -----------------------------------------------------------------------


def anthropic(final: bool, stream: bool = False) -> Reply:
    """One Anthropic Messages turn: the tool use (``final=False``) or the final text."""
    block: dict[str, Any] = (
        {"type": "text", "text": FINAL}
        if final
        else {"type": "tool_use", "id": "toolu_1", "name": "send_email", "input": TOOL_ARGS}
    )
    stop = "end_turn" if final else "tool_use"
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [block],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 5},
    }
    if not stream:
        return Reply(body=message)
    start = {**message, "content": [], "stop_reason": None}
    if final:
        opened: dict[str, Any] = {"type": "text", "text": ""}
        delta: dict[str, Any] = {"type": "text_delta", "text": FINAL}
    else:
        opened = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(TOOL_ARGS)}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": start}),
        ("content_block_start", {"index": 0, "content_block": opened}),
        ("content_block_delta", {"index": 0, "delta": delta}),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}},
        ),
        ("message_stop", {}),
    ]
    return Reply(chunks=[_sse({"type": kind, **data}, kind) for kind, data in events])


# --- the server -------------------------------------------------------------------------------


class _HoldingHandler(_Handler):
    def _serve(self) -> None:
        server = self.server
        assert isinstance(server, HoldingServer)
        with server.lock:
            held = bool(server.script) and server.script[0] is HOLD
            if held:
                server.script.pop(0)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests.append(
                    Received(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
        reply = server.script[0] if server.script and not held else None
        if isinstance(reply, HoldAfter):
            self._send_part(server, reply)
            return
        if not held:
            super()._serve()
            return
        server.holding.set()
        server.released.wait()  # until the server shuts down: the caller is killed meanwhile
        self.close_connection = True

    def _send_part(self, server: HoldingServer, reply: HoldAfter) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        with server.lock:
            server.script.pop(0)
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.requests.append(Received(self.command, self.path, headers, body))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in (reply.chunks or [])[: reply.sent]:
            data = chunk.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        server.holding.set()
        server.released.wait()
        self.close_connection = True


class HoldingServer(ScriptServer):
    """A :class:`ScriptServer` on which a :data:`HOLD` entry keeps its request unanswered."""

    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = _HoldingHandler
        self.released = threading.Event()
        #: set once a held request has been received (and a held stream's first chunks sent)
        self.holding = threading.Event()

    def count(self) -> int:
        """How many requests have arrived so far."""
        with self.lock:
            return len(self.requests)


@contextmanager
def serve() -> Iterator[HoldingServer]:
    """Run a :class:`HoldingServer` in a thread for the duration of the block."""
    server = HoldingServer()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()
        thread.join()


#: scenario -> (reply builder, streamed?)
REPLIES = {
    "agents-chat": (chat, False),
    "agents-default-client": (responses, False),
    "agents-chat-stream": (chat, True),
    "agents-responses": (responses, False),
    "agents-responses-stream": (responses, True),
    "pydantic-openai-stream": (chat, True),
    "pydantic-responses": (responses, False),
    "pydantic-anthropic": (anthropic, True),  # pydantic-ai streams Anthropic requests itself
    "pydantic-anthropic-stream": (anthropic, True),
    "langchain-openai": (chat, False),
    "langchain-openai-stream": (chat, True),
    "litellm-stream": (chat, True),
}


def script(scenario: str) -> tuple[Reply, Reply]:
    """The two model turns of ``scenario``: the tool call, then the final text."""
    build, stream = REPLIES[scenario]
    return build(False, stream), build(True, stream)
