"""The stored form of an HTTP exchange: the model step's request and response payload.

A request is stored as ``{method, path, query, body}`` (no headers; the path
relative to the client's base URL; the JSON body parsed; secret query values
``[REDACTED]``). A response is stored as::

    {"status": 200, "headers": [[name, value], ...], "stream": False,
     "body": "<decoded text>" | b"<bytes>" | None, "chunks": ["event: ...\\n\\n", ...] | None}

plus ``"partial": True`` for a stream the caller closed early. The live
recorder and the cassette importer both build it here, so an imported
cassette replays exactly as a live recording does.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from typing import Any

from ._secrets import scrub_headers, secret_query_param

__all__ = [
    "as_bytes",
    "describe_request",
    "parse_query",
    "replay_headers",
    "response_payload",
    "text_or_bytes",
]


def text_or_bytes(data: bytes) -> str | bytes:
    """Return ``data`` as text when it is UTF-8, else the bytes themselves."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def as_bytes(data: Any) -> bytes:
    """Return stored text or bytes as bytes (UTF-8); anything else (None) as ``b""``."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    return b""


def _parse_body(content: bytes, content_type: str) -> Any:
    if not content:
        return None
    if "multipart/" in content_type:
        boundary = content_type.partition("boundary=")[2].strip('"').encode()
        if boundary:
            content = content.replace(boundary, b"redrive-boundary")
        return {"content_type": "multipart/form-data", "data": content}
    try:
        return json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return {"content_type": content_type, "data": text_or_bytes(content)}


def describe_request(
    provider: str,
    base_path: str,
    method: str,
    path: str,
    query: Iterable[tuple[str, str]],
    content: bytes,
    content_type: str,
) -> tuple[str, dict[str, Any]]:
    """Build a model step's ``(name, request)`` from the parts of an HTTP request.

    Args:
        provider: ``"openai"``, ``"anthropic"``...
        base_path: the path of the client's base URL (``"/v1"``); stripped from ``path``.
        method: the HTTP method.
        path: the request path (with ``base_path``).
        query: the query parameters, in order.
        content: the request body.
        content_type: the body's ``content-type`` header.

    Returns:
        ``("openai:POST /chat/completions", {"method", "path", "query", "body"})``;
        the body is the parsed JSON (or ``{"content_type", "data"}`` for other
        bodies); secret query parameters are ``[REDACTED]``.
    """
    base = base_path.rstrip("/")
    if base and (path == base or path.startswith(base + "/")):
        path = path[len(base) :] or "/"
    params: dict[str, Any] = {}
    for key, value in query:
        value = "[REDACTED]" if secret_query_param(key) else value
        if key in params:
            prior = params[key]
            params[key] = [*prior, value] if isinstance(prior, list) else [prior, value]
        else:
            params[key] = value
    method = method.upper()
    request = {
        "method": method,
        "path": path,
        "query": params,
        "body": _parse_body(content, content_type),
    }
    return f"{provider}:{method} {path}", request


def response_payload(
    status: int,
    headers: Iterable[tuple[str, str]],
    *,
    body: bytes | None = None,
    chunks: list[bytes] | None = None,
    partial: bool = False,
) -> dict[str, Any]:
    """Build the stored form of a response (see the module docstring).

    Args:
        status: the HTTP status.
        headers: the response headers as received (scrubbed here).
        body: the decoded body (no content-encoding) of a response that is not a stream.
        chunks: the events of a server-sent-event stream, as received.
        partial: a stream the caller closed early (adds ``"partial": True``).

    Returns:
        The payload dict of a ``model_response`` frame's ``response``.
    """
    stream = chunks is not None
    payload: dict[str, Any] = {
        "status": int(status),
        "headers": scrub_headers(headers),
        "stream": stream,
        "body": None if stream or body is None else text_or_bytes(body),
        "chunks": [text_or_bytes(c) for c in chunks] if chunks is not None else None,
    }
    if partial:
        payload["partial"] = True
    return payload


def replay_headers(payload: dict[str, Any]) -> list[tuple[str, str]]:
    """Return the headers a replayed response carries.

    The stored ones, and for an error ``x-should-retry: false`` (the SDK
    raises a recorded error at once, without retrying).
    """
    headers = [(str(k), str(v)) for k, v in payload.get("headers") or []]
    if int(payload["status"]) >= 400:
        headers = [(k, v) for k, v in headers if k != "x-should-retry"]
        headers.append(("x-should-retry", "false"))
    return headers


def parse_query(url: str) -> list[tuple[str, str]]:
    """Return the query pairs of a URL string (used by cassette import), blanks kept."""
    return urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query, keep_blank_values=True)
