"""A local OpenAI-compatible model server with a scripted support-desk conversation.

:class:`ScriptedModelServer` answers ``POST /v1/chat/completions`` on
127.0.0.1 (an ephemeral port) with responses in the exact shape of real
chat-completions traffic (``id: chatcmpl-...``, ``object``, ``created``,
``model``, ``choices[].message.tool_calls``, ``finish_reason``, ``usage``
with its token details, ``service_tier``, ``system_fingerprint``), as in
the recorded cassettes of crewAI and simonw/llm.

The answer depends only on the conversation so far (like a model at
temperature 0), never on how many calls came before: a call that is asked
again after a crash gets the same kind of answer. Tool-call ids and
completion ids are freshly minted on every call, as a real model does.

The script (the support desk):

1. no tool result yet: call ``lookup_customer(email)`` for the address in the user message;
2. customer found: call ``open_ticket(customer_id, subject, priority, summary)``;
3. ticket opened: call ``send_email(to, subject, body)`` naming the ticket number
   read from the ``open_ticket`` result;
4. email sent: answer in plain text (``finish_reason: "stop"``).
"""

from __future__ import annotations

import json
import re
import secrets
import string
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ScriptedModelServer", "script_reply"]

_ALNUM = string.ascii_letters + string.digits
_FINGERPRINT = "fp_0392822090"
_MODEL_VERSIONS = {"gpt-4o-mini": "gpt-4o-mini-2024-07-18", "gpt-4o": "gpt-4o-2024-08-06"}


def _mint(prefix: str, length: int) -> str:
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(length))


def _tokens(value: Any) -> int:
    """A rough token count (4 characters a token), stable for the same input."""
    return max(1, len(json.dumps(value, sort_keys=True)) // 4)


def _tool_results(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Map tool name -> decoded result of the tool messages in the conversation."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            names[call.get("id", "")] = call.get("function", {}).get("name", "")
    found: dict[str, Any] = {}
    for message in messages:
        if message.get("role") != "tool":
            continue
        name = message.get("name") or names.get(message.get("tool_call_id", ""), "")
        content = message.get("content")
        try:
            found[name] = json.loads(content) if isinstance(content, str) else content
        except json.JSONDecodeError:
            found[name] = content
    return found


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": _mint("call_", 24),
        "type": "function",
        # real responses carry compact JSON arguments (see the llm cassette)
        "function": {"name": name, "arguments": json.dumps(arguments, separators=(",", ":"))},
    }


def script_reply(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Decide the assistant's next message for a support-desk conversation.

    Args:
        messages: the request's ``messages`` (chat-completions dicts).

    Returns:
        ``(content, tool_calls)``: text and no calls for the final answer,
        or None and one tool call.
    """
    user = next((m for m in messages if m.get("role") == "user"), {})
    text = str(user.get("content") or "")
    email_match = re.search(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", text)
    email = email_match.group(0) if email_match else "unknown@example.com"
    order_match = re.search(r"#(\d+)", text)
    order = order_match.group(1) if order_match else "unknown"
    done = _tool_results(messages)

    customer = done.get("lookup_customer")
    ticket = done.get("open_ticket")
    sent = done.get("send_email")
    if customer is None:
        return None, [_call("lookup_customer", {"email": email})]
    if not isinstance(customer, dict) or "customer_id" not in customer:
        return (
            f"I could not find a customer with the address {email}. Please check the address "
            "and try again.",
            [],
        )
    if ticket is None:
        plan = str(customer.get("plan", ""))
        return None, [
            _call(
                "open_ticket",
                {
                    "customer_id": customer["customer_id"],
                    "subject": f"Order #{order} arrived damaged",
                    "priority": "high" if plan == "business" else "normal",
                    "summary": (
                        f"{customer.get('name', 'The customer')} reports that order #{order} "
                        "arrived damaged and asks for a replacement."
                    ),
                },
            )
        ]
    ticket_id = ticket.get("ticket_id", "?") if isinstance(ticket, dict) else "?"
    if sent is None:
        first = str(customer.get("name", "")).split(" ")[0] or "there"
        return None, [
            _call(
                "send_email",
                {
                    "to": customer.get("email", email),
                    "subject": f"[{ticket_id}] We are on it: order #{order}",
                    "body": (
                        f"Hi {first},\n\nSorry that order #{order} arrived damaged. We opened "
                        f"ticket {ticket_id} and a replacement is being arranged; you will hear "
                        "from us within one business day.\n\nThe Support Team"
                    ),
                },
            )
        ]
    return (
        f"Done. I opened ticket {ticket_id} for {customer.get('name')} "
        f"({customer.get('customer_id')}) about the damaged order #{order} and emailed "
        f"{customer.get('email', email)} the ticket number.",
        [],
    )


def _completion(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    content, calls = script_reply(messages)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    message["refusal"] = None
    message["annotations"] = []
    prompt = _tokens(messages)
    completion = _tokens(content if content is not None else calls)
    return {
        "id": _mint("chatcmpl-", 29),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": _MODEL_VERSIONS.get(model, model),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": _FINGERPRINT,
    }


def _error(message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the demo prints its own account

    def _send(self, status: int, body: dict[str, Any]) -> None:
        # pretty-printed with a trailing newline, as the real API sends it
        data = (json.dumps(body, indent=2) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("openai-version", "2020-10-01")
        self.send_header("openai-processing-ms", "12")
        self.send_header("x-request-id", _mint("req_", 32).lower())
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, _error(f"Invalid URL (POST {self.path})", code="unknown_url"))
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._send(400, _error(f"We could not parse the JSON body of your request. ({exc})"))
            return
        messages = body.get("messages") if isinstance(body, dict) else None
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            self._send(400, _error("'messages' must be a non-empty array.", param="messages"))
            return
        if not isinstance(model, str):
            self._send(400, _error("you must provide a model parameter", param="model"))
            return
        if body.get("stream"):
            self._send(400, _error("this scripted server answers stream=false only", "stream"))
            return
        self.server.count(body)
        self._send(200, _completion(model, messages))

    def do_GET(self) -> None:
        self._send(404, _error(f"Invalid URL (GET {self.path})", code="unknown_url"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.calls = 0
        self.requests: list[dict[str, Any]] = []

    def count(self, body: dict[str, Any]) -> None:
        with self.lock:
            self.calls += 1
            self.requests.append(body)


class ScriptedModelServer:
    """The scripted chat-completions server, run in a background thread.

    Use as a context manager (or call :meth:`start` and :meth:`stop`)::

        with ScriptedModelServer() as server:
            client = OpenAI(base_url=server.base_url, api_key="sk-demo")

    Attributes:
        base_url: ``http://127.0.0.1:{port}/v1`` once started.
    """

    def __init__(self) -> None:
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The API base URL for an OpenAI client (raises RuntimeError before start)."""
        server = self._running()
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    @property
    def calls(self) -> int:
        """How many chat-completions requests were answered so far."""
        server = self._running()
        with server.lock:
            return server.calls

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The decoded bodies of the answered requests, in arrival order (a copy)."""
        server = self._running()
        with server.lock:
            return list(server.requests)

    def _running(self) -> _Server:
        if self._server is None:
            raise RuntimeError("the scripted model server is not running; call start() first")
        return self._server

    def start(self) -> ScriptedModelServer:
        """Bind 127.0.0.1 on a free port and serve in a daemon thread; return self."""
        if self._server is None:
            self._server = _Server()
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="redrive-demo-model",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join()
            self._server = None
            self._thread = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
