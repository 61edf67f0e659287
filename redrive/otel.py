"""Runs as OpenTelemetry spans, after the fact and live (extra ``redrive[otel]``).

A run becomes one trace: a root ``invoke_agent`` span for the run (its
status, output status and fingerprint), and under it a ``chat`` (or
``embeddings``...) span per model step and an ``execute_tool`` span per tool
step, named and attributed after the OpenTelemetry Semantic Conventions for
Generative AI as published with semantic conventions 1.44.0
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/ and
.../gen-ai-agent-spans/; attribute names as defined in
``opentelemetry-semantic-conventions`` 0.66b2's ``gen_ai_attributes``, which a
test checks every attribute against): ``gen_ai.operation.name``,
``gen_ai.provider.name`` (and the older ``gen_ai.system`` beside it, for
back ends that still read it), ``gen_ai.request.model``, ``gen_ai.response.model``,
``gen_ai.response.id``, ``gen_ai.response.finish_reasons``,
``gen_ai.usage.input_tokens`` (every input token, cached ones included:
for Anthropic ``input_tokens + cache_read_input_tokens +
cache_creation_input_tokens``), ``gen_ai.usage.output_tokens``,
``gen_ai.usage.cache_read.input_tokens``,
``gen_ai.usage.cache_creation.input_tokens``,
``gen_ai.usage.reasoning.output_tokens`` (see :mod:`redrive._otel_fields`),
``gen_ai.tool.name``, ``gen_ai.tool.call.id`` (paired by the provider's own
field names: Anthropic ``tool_use`` ``id``/``input``, OpenAI chat
``id``/``function.arguments``, Responses ``call_id``/``arguments``),
``gen_ai.tool.type``,
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

from ._otel_export import export_run, otlp_json, write_otlp_json
from ._otel_live import instrument, uninstrument
from ._otel_spans import SEMCONV_VERSION, model_attributes, tool_attributes
from ._otel_spans import _clean as _clean

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
