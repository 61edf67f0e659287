"""The spans' names and attributes (GenAI semantic conventions), and one recorded step's span.

What :mod:`redrive._otel_export` (after the fact) and :mod:`redrive._otel_live`
(live) share. Public through :mod:`redrive.otel`.
"""

from __future__ import annotations

import json
from typing import Any

import xxhash

from ._jsontext import list_at, loads, text_at
from ._otel_fields import ToolCall, tool_calls, usage
from ._scrub import mask_text
from .frames import Kind
from .replay import RecordedStep

#: The version of the OpenTelemetry semantic conventions these spans follow: the newest
#: schema ``opentelemetry-semantic-conventions`` 0.66b2 publishes (``Schemas.V1_44_0``),
#: whose GenAI attributes count cached tokens in ``gen_ai.usage.input_tokens``.
SEMCONV_VERSION = "1.44.0"
_SCOPE = "redrive"
_SCHEMA = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"


def _need_otel() -> None:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:  # exercised by test_otel.py::test_without_the_otel_extra
        raise ImportError(
            "redrive.otel needs the OpenTelemetry SDK: pip install 'redrive[otel]'"
        ) from None


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    """Drop None values; mask secret-looking text in every string (and list of strings)."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, str):
            value = mask_text(value)
        elif isinstance(value, list | tuple):
            value = [mask_text(v) if isinstance(v, str) else v for v in value if v is not None]
        out[key] = value
    return out


def _response_body(response: Any) -> dict[str, Any]:
    """The JSON of a recorded HTTP response (the last event carrying ``model`` for a stream).

    Returns:
        ``{"id", "model", "finish"}`` as far as the body has them as strings (a
        part of any other shape is left out): span attributes are strings.
    """
    if not isinstance(response, dict):
        return {}
    found: dict[str, Any] = {}
    texts: list[Any] = [response.get("body")] if not response.get("stream") else []
    chunks = response.get("chunks")
    for chunk in chunks if isinstance(chunks, list) else []:
        if isinstance(chunk, str):
            texts += [line[5:].strip() for line in chunk.splitlines() if line.startswith("data:")]
    for text in texts:
        data = loads(text) if isinstance(text, str) else None
        if isinstance(data, dict) and data.get("type"):  # a stream event
            # OpenAI Responses wraps the response; Anthropic's message_start the message
            inner = data.get("response") or data.get("message")
            stop = text_at(data.get("delta"), "stop_reason")
            if stop:
                found.setdefault("finish", []).append(stop)
            data = inner if isinstance(inner, dict) else data
        if not isinstance(data, dict):
            continue
        for key in ("id", "model"):
            if isinstance(data.get(key), str):
                found[key] = data[key]
        for choice in list_at(data, "choices"):
            reason = text_at(choice, "finish_reason")
            if reason:
                found.setdefault("finish", []).append(reason)
        stop = text_at(data, "stop_reason")
        if stop:
            found.setdefault("finish", []).append(stop)
    return found


def model_attributes(
    name: str, request: dict[str, Any], outcome: dict[str, Any] | None
) -> tuple[str, dict[str, Any], str | None]:
    """Return ``(span name, attributes, error type or None)`` of one model step.

    Args:
        name: the step name (``openai:POST /chat/completions``, or a callable's).
        request: the ``model_request`` payload (``args``, ``view``).
        outcome: the ``model_response`` payload, or None while in flight.
    """
    view: dict[str, Any] = {}
    for holder in (request, outcome or {}):
        if isinstance(holder.get("view"), dict):
            view.update(holder["view"])
    endpoint = str(view.get("endpoint") or name)
    operation = "chat"
    if "embeddings" in endpoint:
        operation = "embeddings"
    elif endpoint.rstrip("/").endswith("/completions") and "chat/" not in endpoint:
        operation = "text_completion"
    provider = text_at(view, "provider") or (name.split(":", 1)[0] if ":" in name else None)
    body = _response_body((outcome or {}).get("response"))
    error = view.get("error")
    error_type = None
    if error is not None or (isinstance(view.get("status"), int) and view["status"] >= 400):
        kind = error.get("type") if isinstance(error, dict) else None
        error_type = str(kind or view.get("status") or "error")
    model = view.get("model") if isinstance(view.get("model"), str) else None
    attributes = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "gen_ai.request.model": model,
        "gen_ai.response.model": body.get("model"),
        "gen_ai.response.id": body.get("id"),
        "gen_ai.response.finish_reasons": body.get("finish"),
        "gen_ai.request.stream": bool(view.get("stream")) or None,
        **usage(view.get("usage")).attributes(),
        "error.type": error_type,
    }
    return f"{operation} {model}" if model else operation, attributes, error_type


def tool_attributes(
    name: str, call_id: str | None, end_kind: str | None, outcome: dict[str, Any] | None
) -> tuple[str, dict[str, Any], str | None]:
    """Return ``(span name, attributes, error type or None)`` of one tool step.

    Args:
        name: the tool's step name.
        call_id: the model's id for this call (``gen_ai.tool.call.id``), when known.
        end_kind: the outcome frame's kind (``tool_done``, ``tool_error``), or None.
        outcome: the outcome payload, or None while in flight.
    """
    error_type = None
    if end_kind == Kind.TOOL_ERROR.value:
        error = (outcome or {}).get("error") or {}
        error_type = str(error.get("type") or "error")
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": call_id,
        "error.type": error_type,
    }
    return f"execute_tool {name}", attributes, error_type


class _CallIds:
    """Pairs tool steps with the tool-call ids of the model response before them.

    A tool step takes the call of its name whose arguments equal its own (so
    parallel calls of one tool keep their own ids, whatever order they ran
    in); a step whose arguments match no call (a framework rewrote them)
    takes the first call of its name still unpaired. A model step that asks
    for no tool (a guardrail or moderation call, a summary between the
    response and its tools) leaves the calls before it to the tool steps
    that follow, paired by their arguments only: a tool the loop calls on
    its own after such a step never takes a call's id by position.
    """

    def __init__(self) -> None:
        self.pending: list[ToolCall] = []
        self.latest = False  # the last model step asked for the pending calls

    def model(self, request: dict[str, Any], outcome: dict[str, Any] | None) -> None:
        view = (outcome or {}).get("view") or request.get("view") or {}
        calls = tool_calls(view)
        if calls:
            self.pending = calls
        self.latest = bool(calls)

    def take(self, name: str, args: Any) -> str | None:
        named = [call for call in self.pending if call.name == name]
        best = next((call for call in named if call.arguments == args), None)
        if best is None and named and self.latest:
            best = named[0]
        if best is None:
            return None
        self.pending.remove(best)
        return best.id


def _step_common(step_seq: int, kind: str, replayed: bool, **more: Any) -> dict[str, Any]:
    return {
        "redrive.step.seq": step_seq,
        "redrive.step.kind": kind,
        "redrive.step.replayed": replayed,
        **more,
    }


def _fingerprint(data: dict[str, Any] | None) -> str | None:
    fp = (data or {}).get("fingerprint")
    if fp is None:
        return None
    return xxhash.xxh3_64_hexdigest(json.dumps(fp, sort_keys=True, default=repr).encode())


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _status(error_type: str | None) -> Any:
    from opentelemetry.trace import Status, StatusCode

    return Status(StatusCode.ERROR, error_type) if error_type else Status(StatusCode.UNSET)


def _run_status(status: str | None) -> Any:
    from opentelemetry.trace import Status, StatusCode

    if status == "succeeded":
        return Status(StatusCode.OK)
    if status in ("failed", "cancelled"):
        return Status(StatusCode.ERROR, status)
    return Status(StatusCode.UNSET)


def _step_span(
    tracer: Any,
    parent: Any,
    step: RecordedStep,
    ids: _CallIds,
    *,
    replayed: bool,
    end_at: float | None = None,
) -> None:
    """Emit the span of one recorded step (model or tool; values are skipped)."""
    from opentelemetry.trace import SpanKind, set_span_in_context

    outcome = step.outcome
    if step.kind == "model":
        ids.model(step.data, outcome)
        name, attrs, err = model_attributes(step.name, step.data, outcome)
        kind = SpanKind.CLIENT
        started = step.data.get("started_at")
        begin = float(started) if isinstance(started, int | float) else step.start.at
    elif step.kind == "tool":
        call_id = ids.take(step.name, step.args)
        name, attrs, err = tool_attributes(
            step.name, call_id, step.end.kind if step.end else None, outcome
        )
        kind = SpanKind.INTERNAL
        begin = step.start.at
        attrs["redrive.step.idempotency_key"] = step.idempotency_key
    else:
        return
    if step.status == "blocked" and err is None:
        err = "redrive.SideEffectRetryBlocked"
        attrs["error.type"] = err
    attrs.update(
        _step_common(
            step.seq,
            step.kind,
            replayed,
            **{
                "redrive.step.status": step.status,
                "redrive.step.attempts": step.attempts,
            },
        )
    )
    span = tracer.start_span(
        mask_text(name),
        context=set_span_in_context(parent),
        kind=kind,
        attributes=_clean(attrs),
        start_time=_ns(begin) if not replayed else None,
    )
    span.set_status(_status(err))
    end = end_at if end_at is not None else (step.end.at if step.end is not None else None)
    span.end(end_time=_ns(end) if end is not None and not replayed else None)
