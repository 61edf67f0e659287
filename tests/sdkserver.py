"""A scripted HTTP server on 127.0.0.1 for driving the real model SDKs in tests.

Each request pops the next :class:`Reply` of the script (or the reply for
its path); every request received is kept in ``server.requests``.
"""

from __future__ import annotations

import gzip
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs


@attrs.define
class Reply:
    """One scripted response.

    Attributes:
        status: HTTP status.
        body: the response body (bytes, or a JSON value that is dumped).
        chunks: SSE events sent one by one with chunked transfer encoding (instead of ``body``).
        headers: extra response headers.
        gzip: send the body gzip-compressed with ``Content-Encoding: gzip``.
        cut_after: send only this many chunks, then drop the connection mid-stream.
        check: called with the request body; a Reply it returns is sent instead
            (a server that validates what the client sends back, e.g. a signature).
    """

    status: int = 200
    body: Any = None
    chunks: list[str] | None = None
    headers: dict[str, str] = attrs.Factory(dict)
    gzip: bool = False
    cut_after: int | None = None
    check: Callable[[bytes], Reply | None] | None = None


@attrs.define
class Received:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class ScriptServer(http.server.ThreadingHTTPServer):
    """The server: ``script`` is consumed in order; ``requests`` lists what arrived.

    ``respond``, when set, answers each request instead of the script (a function of the
    :class:`Received` request, called under the server's lock).
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[Reply] = []
        self.requests: list[Received] = []
        self.respond: Callable[[Received], Reply] | None = None
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self.lock:
            self.script.extend(replies)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ScriptServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.server.lock:
            received = Received(
                self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
            )
            self.server.requests.append(received)
            if self.server.respond is not None:
                reply = self.server.respond(received)
            else:
                reply = (
                    self.server.script.pop(0)
                    if self.server.script
                    else Reply(500, {"error": {"message": "script exhausted"}})
                )
        if reply.check is not None:
            reply = reply.check(body) or reply
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.chunks is not None:
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for i, chunk in enumerate(reply.chunks):
                if reply.cut_after is not None and i >= reply.cut_after:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.close()
                    return
                data = chunk.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        if reply.gzip:
            data = gzip.compress(data)
            self.send_header("content-encoding", "gzip")
        if "content-type" not in {k.lower() for k in reply.headers}:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve() -> Iterator[ScriptServer]:
    """Run a :class:`ScriptServer` in a thread for the duration of the block."""
    server = ScriptServer()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def chat_completion(content: str = "hello", *, id: str = "chatcmpl-1") -> dict[str, Any]:
    """An OpenAI chat completion body (https://platform.openai.com/docs/api-reference/chat/object)
    answering ``content``, for scripted replies."""
    return {
        "id": id,
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
