"""Content a provider signs or encrypts: kept byte for byte by the default secret rules.

A model's signed or encrypted output is handed back to the loop on replay and
sent back to the provider by the loop; the provider checks it (Anthropic
answers ``400 Invalid signature in thinking block`` when a thinking block's
text was altered). So the default rules of :mod:`redrive._scrub` (credential
names, secret-looking text) never change a JSON object that is:

* an Anthropic ``thinking`` block (``thinking`` and ``signature``), a
  ``redacted_thinking`` block (``data``), and their stream deltas
  (``thinking_delta``, ``signature_delta``): Anthropic Messages API,
  "Extended thinking" (thinking blocks must be passed back unmodified);
* an OpenAI Responses ``reasoning`` item (``encrypted_content``, ``summary``)
  and its stream events (``response.reasoning_*``); any object with an
  ``encrypted_content`` field;
* a Gemini part carrying ``thoughtSignature`` (``thought_signature`` in the
  Python SDK's snake case): Gemini API, "Thought signatures";
* an OpenRouter ``reasoning_details`` entry (``reasoning.text`` with its
  ``signature``, ``reasoning.encrypted`` with its ``data``,
  ``reasoning.summary``), in a Chat Completions message or stream delta:
  OpenRouter, "Reasoning tokens" (passed back unmodified, whatever model is
  upstream);
* an Amazon Bedrock Converse content block or delta carrying
  ``reasoningContent`` (``reasoningText`` with its ``signature``,
  ``redactedContent``): Bedrock API, ``ReasoningContentBlock`` (text and
  signature sent back unmodified).

A secret-looking value inside such content is kept as the provider sent it
(altering it would break the signature and the resume). A ``redact=`` path
that names a field inside it is still applied: that is the user's explicit
choice, and a resume that sends the altered content back may be refused.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SIGNED_TYPES", "holds_signed", "signed"]

#: ``type`` values of signed or encrypted objects (and their stream events).
SIGNED_TYPES = frozenset(
    {
        "thinking",
        "redacted_thinking",
        "thinking_delta",
        "signature_delta",
        "reasoning",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "reasoning.text",
        "reasoning.encrypted",
        "reasoning.summary",
    }
)
#: Field names that make their object signed or encrypted content.
SIGNED_FIELDS = ("encrypted_content", "thoughtSignature", "thought_signature", "reasoningContent")
#: Substrings without which a JSON text holds no signed or encrypted object.
_SIGNS = ("thinking", "reasoning", "encrypted_content", "houghtSignature", "hought_signature")


def signed(node: dict[Any, Any]) -> bool:
    """Whether a JSON object is signed or encrypted content (see the module docstring)."""
    kind = node.get("type")
    if type(kind) is str and kind in SIGNED_TYPES:
        return True
    # SIGNED_FIELDS spelled out: the scrubber asks this of every object it walks
    return (
        "encrypted_content" in node
        or "thoughtSignature" in node
        or "thought_signature" in node
        or "reasoningContent" in node
    )


def holds_signed(text: str) -> bool:
    """Whether a JSON text may hold signed content (a cheap test: False means it holds none)."""
    return any(sign in text for sign in _SIGNS)
