"""What a provider's response says, in the GenAI conventions' terms: usage and tool-call ids.

Pure reading of a step's semantic view (pure: no I/O, no OpenTelemetry import).
Two things live here because each provider spells them its own way:

- **Usage.** The OpenTelemetry GenAI conventions define
  ``gen_ai.usage.input_tokens`` as *all* input tokens, cached ones included
  ("This value SHOULD include all types of input tokens, including cached
  tokens", https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/,
  since semantic conventions 1.38), and beside it
  ``gen_ai.usage.cache_read.input_tokens``,
  ``gen_ai.usage.cache_creation.input_tokens`` and
  ``gen_ai.usage.reasoning.output_tokens`` (the names are
  ``GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS``, ``..._CACHE_CREATION_INPUT_TOKENS``
  and ``..._REASONING_OUTPUT_TOKENS`` in ``opentelemetry-semantic-conventions``
  0.66b2, ``opentelemetry.semconv._incubating.attributes.gen_ai_attributes``).
  Anthropic's ``input_tokens`` counts only the tokens after the last cache
  breakpoint, with ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` beside it
  (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#tracking-cache-performance):
  the conventions' input is their sum. OpenAI's ``prompt_tokens`` (chat) and
  ``input_tokens`` (Responses) already include the cached tokens, which
  ``prompt_tokens_details.cached_tokens`` / ``input_tokens_details.cached_tokens``
  break out; reasoning tokens are ``completion_tokens_details.reasoning_tokens``
  / ``output_tokens_details.reasoning_tokens``.
- **Tool calls.** A model response's calls, each as ``(id, name, arguments)``
  read by the provider's own field names: Anthropic ``tool_use`` blocks
  (``id``, ``name``, ``input``: an object), OpenAI chat ``tool_calls``
  (``id``, ``function.name``, ``function.arguments``: JSON text), OpenAI
  Responses ``function_call`` items (``call_id``, ``name``, ``arguments``:
  JSON text), and redrive's own views of them (``id``, ``name``, and
  ``arguments`` or ``input``).
"""

from __future__ import annotations

from typing import Any

import attrs

from ._jsontext import NOT_JSON, dict_at, loads, text_at

__all__ = ["ToolCall", "Usage", "tool_calls", "usage"]


def _count(value: Any) -> int | None:
    """A token count: an int from 0 to 2**63 - 1 (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    return None


@attrs.frozen
class Usage:
    """One model call's token counts, as the GenAI conventions count them (None: not reported).

    Attributes:
        input: every input token, cached ones included (``gen_ai.usage.input_tokens``).
        output: output tokens, reasoning included (``gen_ai.usage.output_tokens``).
        cache_read: input tokens read from the provider's prompt cache.
        cache_creation: input tokens written to the provider's prompt cache.
        reasoning: output tokens spent on reasoning.
    """

    input: int | None = None
    output: int | None = None
    cache_read: int | None = None
    cache_creation: int | None = None
    reasoning: int | None = None

    def attributes(self) -> dict[str, int | None]:
        """The ``gen_ai.usage.*`` span attributes (None values are left out by the caller)."""
        return {
            "gen_ai.usage.input_tokens": self.input,
            "gen_ai.usage.output_tokens": self.output,
            "gen_ai.usage.cache_read.input_tokens": self.cache_read,
            "gen_ai.usage.cache_creation.input_tokens": self.cache_creation,
            "gen_ai.usage.reasoning.output_tokens": self.reasoning,
        }


def usage(value: Any) -> Usage:
    """Read a response's ``usage`` object (Anthropic, OpenAI chat or Responses) as :class:`Usage`.

    The provider is told by its field names: Anthropic's top-level
    ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` are added to
    its ``input_tokens``; OpenAI's ``*_tokens_details`` are parts of a total
    that already holds them. A count that is not a non-negative 64-bit int, and
    a ``usage`` that is not an object, read as None (never an error).
    """
    if not isinstance(value, dict):
        return Usage()
    base = _count(value.get("input_tokens", value.get("prompt_tokens")))
    output = _count(value.get("output_tokens", value.get("completion_tokens")))
    anthropic_read = _count(value.get("cache_read_input_tokens"))
    anthropic_write = _count(value.get("cache_creation_input_tokens"))
    if anthropic_read is not None or anthropic_write is not None:
        total = None if base is None else base + (anthropic_read or 0) + (anthropic_write or 0)
        return Usage(
            input=total, output=output, cache_read=anthropic_read, cache_creation=anthropic_write
        )
    details_in = dict_at(value, "input_tokens_details") or dict_at(value, "prompt_tokens_details")
    details_out = dict_at(value, "output_tokens_details") or dict_at(
        value, "completion_tokens_details"
    )
    return Usage(
        input=base,
        output=output,
        cache_read=_count(details_in.get("cached_tokens")),
        reasoning=_count(details_out.get("reasoning_tokens")),
    )


@attrs.frozen
class ToolCall:
    """One tool call a model response asked for.

    Attributes:
        id: the provider's id of the call (``gen_ai.tool.call.id``), or None.
        name: the tool's name, or None.
        arguments: the arguments as data (JSON text parsed), or :data:`NOT_JSON`
            when they are not readable as such.
    """

    id: str | None
    name: str | None
    arguments: Any


def _call(item: dict[str, Any]) -> ToolCall:
    function = dict_at(item, "function")
    if function:  # OpenAI chat, as the API sends it
        name, raw = text_at(function, "name"), function.get("arguments")
    else:
        name, raw = text_at(item, "name"), item.get("arguments")
    # Responses names the id the tool result refers to ``call_id`` (its ``id`` is the item's)
    ident = text_at(item, "call_id") or text_at(item, "id")
    if "input" in item and raw is None:  # Anthropic tool_use: arguments are an object
        return ToolCall(id=ident, name=name, arguments=item["input"])
    if isinstance(raw, str):
        return ToolCall(id=ident, name=name, arguments=loads(raw))
    return ToolCall(id=ident, name=name, arguments=NOT_JSON if raw is None else raw)


def tool_calls(view: Any) -> list[ToolCall]:
    """The tool calls of a model step's view (``view["tool_calls"]``), in the response's order."""
    calls = view.get("tool_calls") if isinstance(view, dict) else None
    return [_call(c) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
