"""OpenAI: the semantic view of Chat Completions, Responses and other OpenAI exchanges.

The recording itself is :mod:`redrive.recorders.http`; :func:`redrive.wrap`
picks this view for ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients.
"""

from __future__ import annotations

import json
from typing import Any

from ._provider import error_object
from ._sse import sse_data

__all__ = ["openai_view", "sse_data"]


def _body(payload: dict[str, Any]) -> Any:
    body = payload.get("body")
    if isinstance(body, str | bytes):
        try:
            return json.loads(body)
        except ValueError:
            return None
    return None


def _chat_stream(chunks: list[Any]) -> tuple[list[dict[str, Any]], Any, str]:
    calls: dict[int, dict[str, Any]] = {}
    usage: Any = None
    text = []
    for _, data in sse_data(chunks):
        if not isinstance(data, dict):
            continue
        if data.get("usage"):
            usage = data["usage"]
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    int(call.get("index", 0)), {"id": None, "name": "", "arguments": ""}
                )
                slot["id"] = call.get("id") or slot["id"]
                fn = call.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
    return [calls[i] for i in sorted(calls)], usage, "".join(text)


def _responses_calls(output: Any) -> list[dict[str, Any]]:
    calls = []
    for item in output or []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            calls.append(
                {
                    "id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": item.get("arguments"),
                }
            )
    return calls


def openai_view(request: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Return the semantic view of one OpenAI exchange.

    Args:
        request: the stored request (``method``, ``path``, ``query``, ``body``).
        payload: the stored response (:func:`redrive.recorders.http.response_payload`).

    Returns:
        ``{"model", "messages" | "input", "instructions", "tools", "tool_calls",
        "text", "usage", "error"}`` (keys without a value are left out).
    """
    body = request.get("body") if isinstance(request.get("body"), dict) else {}
    assert isinstance(body, dict)
    view: dict[str, Any] = {"endpoint": request.get("path"), "model": body.get("model")}
    for key in ("messages", "input", "instructions", "tools", "stream"):
        if key in body:
            view[key] = body[key]
    calls: list[dict[str, Any]] = []
    usage: Any = None
    text: str | None = None
    if payload.get("stream"):
        chunks = payload.get("chunks") or []
        for _, data in sse_data(chunks):  # an in-band error (recorded when it is permanent)
            error = error_object(data)
            if error is not None:
                view["error"] = error
        if str(request.get("path", "")).startswith("/responses"):
            for _, data in sse_data(chunks):
                if isinstance(data, dict) and data.get("type") in (
                    "response.completed",
                    "response.incomplete",
                    "response.failed",
                ):
                    response = data.get("response") or {}
                    calls = _responses_calls(response.get("output"))
                    usage = response.get("usage")
        else:
            calls, usage, text = _chat_stream(chunks)
    else:
        data = _body(payload)
        if isinstance(data, dict):
            usage = data.get("usage")
            if "error" in data:
                view["error"] = data["error"]
            for choice in data.get("choices") or []:
                message = choice.get("message") or {}
                if isinstance(message.get("content"), str):
                    text = message["content"]
                for call in message.get("tool_calls") or []:
                    fn = call.get("function") or {}
                    calls.append(
                        {
                            "id": call.get("id"),
                            "name": fn.get("name"),
                            "arguments": fn.get("arguments"),
                        }
                    )
            if data.get("object") == "response":
                calls = _responses_calls(data.get("output"))
            if "model" in data and view.get("model") is None:
                view["model"] = data["model"]
    view["tool_calls"] = calls
    if text:
        view["text"] = text
    if usage is not None:
        view["usage"] = usage
    return view
