"""Anthropic: the semantic view of Messages exchanges (streamed or not).

The recording itself is :mod:`redrive.recorders.http`; :func:`redrive.wrap`
picks this view for ``anthropic.Anthropic`` / ``anthropic.AsyncAnthropic`` clients.
"""

from __future__ import annotations

from typing import Any

from .._jsontext import NOT_JSON, dict_at, loads, text_at
from ._provider import error_object
from ._sse import sse_data

__all__ = ["anthropic_view"]


def _content_calls(content: Any) -> tuple[list[dict[str, Any]], str]:
    calls = []
    text = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("tool_use", "server_tool_use"):
            calls.append(
                {"id": block.get("id"), "name": block.get("name"), "input": block.get("input")}
            )
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
    return calls, "".join(text)


def _slot(data: dict[str, Any]) -> int | str:
    """A stream event's block ``index`` (an int), else its text as a slot of its own."""
    index = data.get("index", 0)
    return index if isinstance(index, int) and not isinstance(index, bool) else repr(index)


def _order(slot: int | str) -> tuple[bool, int, str]:
    return (isinstance(slot, str), slot if isinstance(slot, int) else 0, str(slot))


def _stream(chunks: list[Any]) -> tuple[list[dict[str, Any]], str, dict[str, Any], Any, Any]:
    blocks: dict[int | str, dict[str, Any]] = {}
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
            usage.update(dict_at(dict_at(data, "message"), "usage"))
        elif kind == "content_block_start":
            block = dict(dict_at(data, "content_block"))
            block["_json"] = ""
            blocks[_slot(data)] = block
        elif kind == "content_block_delta":
            block = blocks.setdefault(_slot(data), {"type": "text", "_json": ""})
            delta = dict_at(data, "delta")
            if delta.get("type") == "text_delta":
                before = block.get("text")
                block["text"] = (before if isinstance(before, str) else "") + (
                    text_at(delta, "text") or ""
                )
            elif delta.get("type") == "input_json_delta":
                block["_json"] += text_at(delta, "partial_json") or ""
        elif kind == "message_delta":
            usage.update(dict_at(data, "usage"))
            stop = dict_at(data, "delta").get("stop_reason")
    content = []
    for index in sorted(blocks, key=_order):
        block = blocks[index]
        raw = block.pop("_json", "")
        if raw:
            parsed = loads(raw)
            block["input"] = raw if parsed is NOT_JSON else parsed
        content.append(block)
    calls, text = _content_calls(content)
    return calls, text, usage, stop, error


def anthropic_view(request: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Return the semantic view of one Anthropic exchange.

    Reads the Messages shapes (streamed or not) where it finds them; a part
    of another shape (any JSON the API accepts) is left out of the derived
    fields (``tool_calls``, ``text``, ``usage``), never an error.

    Args:
        request: the stored request (``method``, ``path``, ``query``, ``body``).
        payload: the stored response (:func:`redrive.recorders.http.response_payload`).

    Returns:
        ``{"model", "system", "messages", "tools", "tool_calls", "text", "usage",
        "stop_reason", "error"}`` (keys without a value are left out).
    """
    body = dict_at(request, "body")
    view: dict[str, Any] = {"endpoint": request.get("path"), "model": body.get("model")}
    for key in ("system", "messages", "tools", "stream"):
        if key in body:
            view[key] = body[key]
    if payload.get("stream"):
        chunks = payload.get("chunks")
        calls, text, usage, stop, error = _stream(chunks if isinstance(chunks, list) else [])
        if error is not None:
            view["error"] = error
    else:
        raw = payload.get("body")
        data = loads(raw) if isinstance(raw, str | bytes) else None
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
