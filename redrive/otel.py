"""Runs as OpenTelemetry spans, after the fact and live (extra ``redrive[otel]``).

A run becomes one trace: a root ``invoke_agent`` span for the run (its
status, output status and fingerprint), and under it a ``chat`` (or
``embeddings``...) span per model step and an ``execute_tool`` span per tool
step, named and attributed after the OpenTelemetry Semantic Conventions for
Generative AI, version 1.37.0 (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/
and .../gen-ai-agent-spans/; attribute names as published in
``opentelemetry-semantic-conventions``' ``gen_ai_attributes``): ``gen_ai.operation.name``,
``gen_ai.provider.name`` (and the older ``gen_ai.system`` beside it, for
back ends that still read it), ``gen_ai.request.model``, ``gen_ai.response.model``,
``gen_ai.response.id``, ``gen_ai.response.finish_reasons``,
``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``,
``gen_ai.agent.name`` and ``error.type``. What only redrive knows goes under
``redrive.*``: ``redrive.run.id``, ``redrive.run.status``,
``redrive.run.fingerprint``, ``redrive.step.seq``, ``redrive.step.kind``,
``redrive.step.status`` (done, error, blocked, in_flight),
``redrive.step.attempts``, ``redrive.step.replayed`` (True: handed back from
the journal, no call made) and ``redrive.step.idempotency_key``.

Message contents, tool arguments and tool results are not attributes (the
conventions make them opt-in, and they are where secrets live); every string
attribute still goes through :func:`redrive._scrub.mask_text`, the secrets
rule of every journal.

Two ways in:

- :func:`export_run` / :func:`write_otlp_json` (``redrive export RUN --otlp-json FILE``):
  a recorded run, read from a journal, as spans with the recorded times.
- :func:`instrument`: from then on, every run in this process emits its spans
  as its steps finish, through the tracer provider given (or the global one):
  live steps when their outcome is journaled, replayed steps as they are handed
  back (``redrive.step.replayed`` True), the root span when the execution ends.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import xxhash

from ._scrub import mask_text
from .frames import Frame, Kind
from .replay import RecordedStep, StepReader, set_step_observer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import TracerProvider

    from .storage import Journal

__all__ = [
    "SEMCONV_VERSION",
    "export_run",
    "instrument",
    "model_attributes",
    "otlp_json",
    "tool_attributes",
    "uninstrument",
    "write_otlp_json",
]

#: The version of the OpenTelemetry GenAI semantic conventions these spans follow.
SEMCONV_VERSION = "1.37.0"
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
    """The JSON of a recorded HTTP response (the last event carrying ``model`` for a stream)."""
    if not isinstance(response, dict):
        return {}
    found: dict[str, Any] = {}
    texts: list[Any] = [response.get("body")] if not response.get("stream") else []
    for chunk in response.get("chunks") or []:
        if isinstance(chunk, str):
            texts += [line[5:].strip() for line in chunk.splitlines() if line.startswith("data:")]
    for text in texts:
        try:
            data = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type"):  # a stream event
            # OpenAI Responses wraps the response; Anthropic's message_start the message
            inner = data.get("response") or data.get("message")
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                found.setdefault("finish", []).append(delta["stop_reason"])
            data = inner if isinstance(inner, dict) else data
        if not isinstance(data, dict):
            continue
        for key in ("id", "model"):
            if data.get(key) is not None:
                found[key] = data[key]
        for choice in data.get("choices") or []:
            if isinstance(choice, dict) and choice.get("finish_reason"):
                found.setdefault("finish", []).append(choice["finish_reason"])
        if data.get("stop_reason"):
            found.setdefault("finish", []).append(data["stop_reason"])
    return found


def _usage(view: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = view.get("usage")
    if not isinstance(usage, dict):
        return None, None
    i = usage.get("input_tokens", usage.get("prompt_tokens"))
    o = usage.get("output_tokens", usage.get("completion_tokens"))
    return (i if isinstance(i, int) else None, o if isinstance(o, int) else None)


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
    provider = view.get("provider") or (name.split(":", 1)[0] if ":" in name else None)
    body = _response_body((outcome or {}).get("response"))
    error = view.get("error")
    error_type = None
    if error is not None or (isinstance(view.get("status"), int) and view["status"] >= 400):
        kind = error.get("type") if isinstance(error, dict) else None
        error_type = str(kind or view.get("status") or "error")
    inp, out = _usage(view)
    model = view.get("model")
    attributes = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "gen_ai.request.model": model,
        "gen_ai.response.model": body.get("model"),
        "gen_ai.response.id": body.get("id"),
        "gen_ai.response.finish_reasons": body.get("finish"),
        "gen_ai.request.stream": bool(view.get("stream")) or None,
        "gen_ai.usage.input_tokens": inp,
        "gen_ai.usage.output_tokens": out,
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
    """Matches tool steps to the tool-call ids of the model response before them."""

    def __init__(self) -> None:
        self.pending: list[dict[str, Any]] = []

    def model(self, request: dict[str, Any], outcome: dict[str, Any] | None) -> None:
        view = (outcome or {}).get("view") or request.get("view") or {}
        calls = view.get("tool_calls") if isinstance(view, dict) else None
        self.pending = [c for c in calls or [] if isinstance(c, dict)]

    def take(self, name: str, args: Any) -> str | None:
        best = None
        for call in self.pending:
            if call.get("name") != name:
                continue
            try:
                same = json.loads(call.get("arguments") or "null") == args
            except (TypeError, ValueError):
                same = False
            if same or best is None:
                best = call
            if same:
                break
        if best is None:
            return None
        self.pending.remove(best)
        ident = best.get("id")
        return ident if isinstance(ident, str) else None


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


def export_run(journal: Journal, run_id: str, tracer_provider: TracerProvider) -> None:
    """Emit one recorded run as spans through ``tracer_provider``, with its recorded times.

    Args:
        journal: the journal holding the run.
        run_id: the run.
        tracer_provider: an OpenTelemetry SDK tracer provider (its processors export).

    Raises:
        UnknownRunError: the journal has no run ``run_id``.
        JournalCorruptError: the run's frames fail their seq or chain check.
        ImportError: the OpenTelemetry SDK is not installed (``pip install 'redrive[otel]'``).
    """
    _need_otel()
    from opentelemetry.trace import SpanKind

    from .errors import UnknownRunError

    record = journal.get_run(run_id)
    if record is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {journal.url}: list the runs with `redrive runs`",
            run_id=run_id,
        )
    tracer = tracer_provider.get_tracer(_SCOPE, schema_url=_SCHEMA)
    frames = list(journal.frames(run_id))
    reader = StepReader(run_id)
    steps = list(reader.read(frames))
    start = reader.run_start or {}
    began = reader.run_start_frame.at if reader.run_start_frame else frames[0].at
    ended = reader.run_end_frame.at if reader.run_end_frame else frames[-1].at
    agent = start.get("entrypoint") or run_id
    root = tracer.start_span(
        mask_text(f"invoke_agent {agent}"),
        kind=SpanKind.INTERNAL,
        start_time=_ns(began),
        attributes=_clean(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "redrive.run.id": run_id,
                "redrive.run.status": record.status,
                "redrive.run.fingerprint": _fingerprint(start),
                "error.type": (reader.run_end or {}).get("error") and "redrive.RunFailed",
            }
        ),
    )
    ids = _CallIds()
    for step in steps:
        _step_span(tracer, root, step, ids, replayed=False)
    root.set_status(_run_status(record.status))
    root.end(end_time=_ns(ended))


def _spans(journal: Journal, run_id: str) -> list[ReadableSpan]:
    _need_otel()
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=_RunIds(run_id))  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    export_run(journal, run_id, provider)
    provider.shutdown()
    return list(exporter.get_finished_spans())


class _RunIds:
    """Trace and span ids derived from the run id: the same run exports the same ids."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.n = 0

    def generate_trace_id(self) -> int:
        return xxhash.xxh3_128_intdigest(f"trace:{self.run_id}".encode()) or 1

    def generate_span_id(self) -> int:
        self.n += 1
        return xxhash.xxh3_64_intdigest(f"span:{self.run_id}:{self.n}".encode()) or 1

    def is_trace_id_random(self) -> bool:
        return False


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def otlp_json(spans: Iterable[ReadableSpan]) -> dict[str, Any]:
    """Encode finished SDK spans as one OTLP/JSON ``ExportTraceServiceRequest`` document.

    Follows the OTLP/HTTP JSON encoding (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding):
    trace and span ids as hex strings, enum values as integers, 64-bit
    integers (times in nanoseconds, int attributes) as decimal strings.

    Returns:
        ``{"resourceSpans": [...]}``, ready for ``json.dump``.
    """
    out: list[dict[str, Any]] = []
    for span in spans:
        ctx = span.context
        assert ctx is not None
        item: dict[str, Any] = {
            "traceId": f"{ctx.trace_id:032x}",
            "spanId": f"{ctx.span_id:016x}",
            "name": span.name,
            "kind": span.kind.value + 1,  # OTLP numbers SPAN_KIND_INTERNAL as 1
            "startTimeUnixNano": str(span.start_time),
            "endTimeUnixNano": str(span.end_time),
            "attributes": [
                {"key": k, "value": _value(v)} for k, v in (span.attributes or {}).items()
            ],
            "status": {"code": span.status.status_code.value},
        }
        if span.parent is not None:
            item["parentSpanId"] = f"{span.parent.span_id:016x}"
        if span.status.description:
            item["status"]["message"] = span.status.description
        out.append(item)
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "redrive"}}]
                },
                "scopeSpans": [{"scope": {"name": _SCOPE}, "schemaUrl": _SCHEMA, "spans": out}],
                "schemaUrl": _SCHEMA,
            }
        ]
    }


def write_otlp_json(journal: Journal, run_id: str, path: str) -> int:
    """Write run ``run_id`` as an OTLP/JSON trace file at ``path``; return the span count.

    The ids are derived from the run id (the same run writes the same file),
    the times are the recorded ones. Load it with any OTLP/JSON reader (the
    OpenTelemetry Collector's ``otlpjsonfile`` receiver, for one).

    Raises:
        UnknownRunError, JournalCorruptError, ImportError: as :func:`export_run`.
        OSError: ``path`` cannot be written.
    """
    spans = _spans(journal, run_id)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(otlp_json(spans), fh, indent=1)
        fh.write("\n")
    return len(spans)


class _Live:
    """The step observer :func:`instrument` installs: spans as a run's steps finish."""

    def __init__(self, tracer: Any, *, replayed_spans: bool) -> None:
        self.tracer = tracer
        self.replayed_spans = replayed_spans
        self.lock = threading.Lock()
        self.roots: dict[str, Any] = {}
        self.readers: dict[str, StepReader] = {}
        self.ids: dict[str, _CallIds] = {}

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "opened":
            self._opened(info["run"], info.get("known_seq", 0))
        elif event == "closed":
            self._closed(info["run"], info.get("error"))
        elif event == "frames":
            self._frames(info["run_id"], info["frames"])
        elif event == "replayed":
            self._replayed(info["run_id"], info["step"])

    def _opened(self, run: Any, known_seq: int) -> None:
        from opentelemetry.trace import SpanKind

        agent = run.entrypoint or run.run_id
        span = self.tracer.start_span(
            mask_text(f"invoke_agent {agent}"),
            kind=SpanKind.INTERNAL,
            attributes=_clean(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent,
                    "redrive.run.id": run.run_id,
                    "redrive.run.resumed": bool(run.resumed),
                }
            ),
        )
        reader = StepReader(run.run_id, verify=False)
        if run.resumed:
            _read_before(reader, run, known_seq)
        with self.lock:
            self.roots[run.run_id] = span
            self.readers[run.run_id] = reader
            self.ids[run.run_id] = _CallIds()

    def _closed(self, run: Any, error: BaseException | None) -> None:
        with self.lock:
            span = self.roots.pop(run.run_id, None)
            self.readers.pop(run.run_id, None)
            self.ids.pop(run.run_id, None)
        if span is None:
            return
        span.set_attribute("redrive.run.status", str(run.status))
        span.set_attribute("redrive.run.replayed_steps", int(run.replayed_steps))
        span.set_attribute("redrive.run.live_steps", int(run.live_steps))
        if error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(_status(type(error).__qualname__))
        else:
            span.set_status(_run_status(str(run.status)))
        span.end()

    def _frames(self, run_id: str, frames: list[Frame]) -> None:
        with self.lock:
            root, reader, ids = (
                self.roots.get(run_id),
                self.readers.get(run_id),
                self.ids.get(run_id),
            )
            if root is None or reader is None or ids is None:
                return
            done: list[RecordedStep] = []
            for frame in frames:
                if frame.kind == Kind.RUN_START.value:
                    root.set_attribute("redrive.run.fingerprint", _fingerprint(frame.data()) or "")
                try:
                    reader.feed(frame)
                except Exception:
                    _unresolved(reader, frame)
                    continue
                ref = frame.data().get("step") if frame.kind in _ENDS else None
                step = reader.steps.pop(ref, None) if isinstance(ref, int) else None
                if step is not None:
                    done.append(step)
        for step in done:
            _step_span(self.tracer, root, step, ids, replayed=False)

    def _replayed(self, run_id: str, step: RecordedStep) -> None:
        with self.lock:
            root, ids = self.roots.get(run_id), self.ids.get(run_id)
        if root is None or ids is None:
            return
        if self.replayed_spans:
            _step_span(self.tracer, root, step, ids, replayed=True)
        elif step.kind == "model":  # no span, but a live tool after it keeps its call id
            ids.model(step.data, step.outcome)
        elif step.kind == "tool":
            ids.take(step.name, step.args)


def _read_before(reader: StepReader, run: Any, known_seq: int) -> None:
    """Feed ``reader`` the frames a resumed run holds from before this execution.

    ``known_seq`` is the first seq this execution may write.

    A step in flight at the crash (opened then, finished now) then gets its
    live span when its outcome is written; the observer runs where the run's
    journal I/O runs (off the event loop on the async face). A journal that
    cannot be read leaves the reader empty: telemetry never fails a run.
    """
    try:
        for frame in run.journal.frames(run.run_id):
            if frame.seq >= known_seq:
                break
            reader.feed(frame)
    except Exception:  # pragma: no cover - a damaged journal: the run itself reports it
        logging.getLogger("redrive").debug("otel: cannot read run %r before resume", run.run_id)


def _unresolved(reader: StepReader, frame: Frame) -> None:
    """Keep a model request the reader could not resolve, as it is stored.

    A resumed execution's reader starts at the frames it writes, so a request
    stored as a prefix delta of one from before the crash cannot be expanded:
    its span only needs the scalar fields of its view, which a delta keeps.
    (A resumed run's reader is fed the frames from before it, so an outcome
    of a step opened before this execution resolves.)
    """
    if frame.kind != Kind.MODEL_REQUEST.value:
        return
    data = frame.data()
    reader.steps[frame.seq] = RecordedStep(
        seq=frame.seq,
        kind="model",
        name=frame.name,
        key=frame.key,
        start=frame,
        end=None,
        turn=int(data.get("turn", 0)),
        data=data,
    )


_ENDS = frozenset({Kind.MODEL_RESPONSE.value, Kind.TOOL_DONE.value, Kind.TOOL_ERROR.value})


def instrument(
    tracer_provider: TracerProvider | None = None, *, replayed_spans: bool = True
) -> None:
    """Emit every run's spans live, from now on, through ``tracer_provider``.

    A live step's span is emitted when its outcome is journaled (with the
    step's real start and end times); a replayed step's when the record
    hands it back (``redrive.step.replayed`` True, no call made); the run's
    root span when the execution ends (status ``OK`` when it succeeded,
    ``ERROR`` with ``error.type`` when it raised; it counts the replayed and
    live steps in ``redrive.run.replayed_steps`` / ``redrive.run.live_steps``).
    The root span starts in the caller's current OpenTelemetry context, so a
    run inside a request's or job's span is traced under it; step spans are
    children of the root, never of each other (parallel tool calls are
    siblings). Spans are handed to the provider on the thread that did the
    step (for an async run, a worker thread, never the event loop): give the
    provider a ``BatchSpanProcessor``, so exporting never holds a step up.
    Replaces an earlier :func:`instrument`.

    Args:
        tracer_provider: the provider to use (None: OpenTelemetry's global one,
            ``opentelemetry.trace.get_tracer_provider()``).
        replayed_spans: emit a span for each replayed step (True, the
            default, marked ``redrive.step.replayed``), or none (False): a
            resumed or re-driven run then reports only the work it really
            did, not the record again (the telemetry inflation replay causes
            in peers: pydantic/pydantic-ai#6974, temporalio/sdk-java#952).

    Raises:
        ImportError: the OpenTelemetry SDK is not installed (``pip install 'redrive[otel]'``).
    """
    _need_otel()
    from opentelemetry import trace

    provider = tracer_provider or trace.get_tracer_provider()
    tracer = provider.get_tracer(_SCOPE, schema_url=_SCHEMA)
    set_step_observer(_Live(tracer, replayed_spans=replayed_spans))


def uninstrument() -> None:
    """Stop emitting spans (undo :func:`instrument`); runs open now end without their root span."""
    set_step_observer(None)
