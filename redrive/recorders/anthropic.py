"""Anthropic: the semantic view of Messages exchanges (streamed or not).

The recording itself is :mod:`redrive.recorders.http`; :func:`redrive.wrap`
picks this view for ``anthropic.Anthropic`` / ``anthropic.AsyncAnthropic`` clients.
"""

from __future__ import annotations

import json
from typing import Any

from ._provider import error_object
from ._sse import sse_data

__all__ = ["anthropic_view"]


def _content_calls(content: Any) -> tuple[list[dict[str, Any]], str]:
    calls = []
    text = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("tool_use", "server_tool_use"):
            calls.append(
                {"id": block.get("id"), "name": block.get("name"), "input": block.get("input")}
            )
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
    return calls, "".join(text)


def _stream(chunks: list[Any]) -> tuple[list[dict[str, Any]], str, dict[str, Any], Any, Any]:
    blocks: dict[int, dict[str, Any]] = {}
    usage: dict[str, Any] = {}
    stop: Any = None
    error: Any = None
    for _, data in sse_data(chunks):
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if kind == "error":  # an in-band error event (recorded when it is permanent)
            error = error_object(data)
        elif kind == "message_start":
            usage.update((data.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start":
            block = dict(data.get("content_block") or {})
            block["_json"] = ""
            blocks[int(data.get("index", 0))] = block
        elif kind == "content_block_delta":
            block = blocks.setdefault(int(data.get("index", 0)), {"type": "text", "_json": ""})
            delta = data.get("delta") or {}
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                block["_json"] += delta.get("partial_json", "")
        elif kind == "message_delta":
            usage.update(data.get("usage") or {})
            stop = (data.get("delta") or {}).get("stop_reason")
    content = []
    for index in sorted(blocks):
        block = blocks[index]
        raw = block.pop("_json", "")
        if raw:
            try:
                block["input"] = json.loads(raw)
            except ValueError:
                block["input"] = raw
        content.append(block)
    calls, text = _content_calls(content)
    return calls, text, usage, stop, error


def anthropic_view(request: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Return the semantic view of one Anthropic exchange.

    Args:
        request: the stored request (``method``, ``path``, ``query``, ``body``).
        payload: the stored response (:func:`redrive.recorders.http.response_payload`).

    Returns:
        ``{"model", "system", "messages", "tools", "tool_calls", "text", "usage",
        "stop_reason", "error"}`` (keys without a value are left out).
    """
    body = request.get("body") if isinstance(request.get("body"), dict) else {}
    assert isinstance(body, dict)
    view: dict[str, Any] = {"endpoint": request.get("path"), "model": body.get("model")}
    for key in ("system", "messages", "tools", "stream"):
        if key in body:
            view[key] = body[key]
    if payload.get("stream"):
        calls, text, usage, stop, error = _stream(payload.get("chunks") or [])
        if error is not None:
            view["error"] = error
    else:
        raw = payload.get("body")
        try:
            data = json.loads(raw) if isinstance(raw, str | bytes) else None
        except ValueError:
            data = None
        calls, text, usage, stop = [], "", {}, None
        if isinstance(data, dict):
            if data.get("type") == "error":
                view["error"] = data.get("error")
            calls, text = _content_calls(data.get("content"))
            usage = data.get("usage") or {}
            stop = data.get("stop_reason")
    view["tool_calls"] = calls
    if text:
        view["text"] = text
    if usage:
        view["usage"] = usage
    if stop is not None:
        view["stop_reason"] = stop
    return view
