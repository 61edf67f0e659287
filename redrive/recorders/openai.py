"""OpenAI: the semantic view of Chat Completions, Responses and other OpenAI exchanges.

The recording itself is :mod:`redrive.recorders.http`; :func:`redrive.wrap`
picks this view for ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients.
"""

from __future__ import annotations

from typing import Any

from .._jsontext import NOT_JSON, dict_at, list_at, loads, text_at
from ._provider import error_object
from ._sse import sse_data

__all__ = ["openai_view", "sse_data"]


def _body(payload: dict[str, Any]) -> Any:
    body = payload.get("body")
    if isinstance(body, str | bytes):
        data = loads(body)
        return None if data is NOT_JSON else data
    return None


def _index(value: Any) -> int | str:
    """A streamed tool call's ``index`` as given (an int), else its text as a slot of its own."""
    return value if isinstance(value, int) and not isinstance(value, bool) else repr(value)


def _chat_stream(chunks: list[Any]) -> tuple[list[dict[str, Any]], Any, str]:
    calls: dict[int | str, dict[str, Any]] = {}
    usage: Any = None
    text = []
    for _, data in sse_data(chunks):
        if not isinstance(data, dict):
            continue
        if data.get("usage"):
            usage = data["usage"]
        for choice in list_at(data, "choices"):
            delta = dict_at(choice, "delta")
            content = text_at(delta, "content")
            if content is not None:
                text.append(content)
            for call in list_at(delta, "tool_calls"):
                if not isinstance(call, dict):
                    continue
                slot = calls.setdefault(
                    _index(call.get("index", 0)), {"id": None, "name": "", "arguments": ""}
                )
                slot["id"] = call.get("id") or slot["id"]
                fn = dict_at(call, "function")
                slot["name"] += text_at(fn, "name") or ""
                slot["arguments"] += text_at(fn, "arguments") or ""
    ordered = sorted(
        calls, key=lambda k: (isinstance(k, str), k if isinstance(k, int) else 0, str(k))
    )
    return [calls[i] for i in ordered], usage, "".join(text)


def _responses_calls(output: Any) -> list[dict[str, Any]]:
    calls = []
    for item in output if isinstance(output, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            calls.append(
                {
                    "id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": item.get("arguments"),
                }
            )
    return calls


def _chat_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for call in list_at(message, "tool_calls"):
        fn = dict_at(call, "function")
        calls.append(
            {
                "id": call.get("id") if isinstance(call, dict) else None,
                "name": fn.get("name"),
                "arguments": fn.get("arguments"),
            }
        )
    return calls


def openai_view(request: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Return the semantic view of one OpenAI exchange.

    Reads the Chat Completions and Responses shapes (streamed or not) where
    it finds them; a part of another shape (any JSON the API accepts) is
    left out of the derived fields (``tool_calls``, ``text``), never an error.

    Args:
        request: the stored request (``method``, ``path``, ``query``, ``body``).
        payload: the stored response (:func:`redrive.recorders.http.response_payload`).

    Returns:
        ``{"model", "messages" | "input", "instructions", "tools", "tool_calls",
        "text", "usage", "error"}`` (keys without a value are left out).
    """
    body = dict_at(request, "body")
    view: dict[str, Any] = {"endpoint": request.get("path"), "model": body.get("model")}
    for key in ("messages", "input", "instructions", "tools", "stream"):
        if key in body:
            view[key] = body[key]
    calls: list[dict[str, Any]] = []
    usage: Any = None
    text: str | None = None
    if payload.get("stream"):
        chunks = payload.get("chunks")
        chunks = chunks if isinstance(chunks, list) else []
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
                    response = dict_at(data, "response")
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
            for choice in list_at(data, "choices"):
                message = dict_at(choice, "message")
                content = text_at(message, "content")
                if content is not None:
                    text = content
                calls.extend(_chat_calls(message))
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
