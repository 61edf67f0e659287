"""A recorded run as spans, after the fact: :func:`redrive.otel.export_run` and OTLP/JSON.

Public through :mod:`redrive.otel`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import xxhash

from ._otel_spans import (
    _SCHEMA,
    _SCOPE,
    _CallIds,
    _clean,
    _fingerprint,
    _need_otel,
    _ns,
    _run_status,
    _step_span,
)
from ._scrub import mask_text
from .replay import StepReader

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import TracerProvider

    from .storage import Journal


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
