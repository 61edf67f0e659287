"""JSON text read as data, whatever it holds (pure): the one parser of bodies and events.

Request and response bodies, event-stream ``data:`` lines and tool-call
arguments are JSON a provider accepts, of any shape and depth. Everything
that reads one (the stored request, the provider views, the scrubber, span
attributes) reads it here, so none fails on what it did not expect: text that
is not JSON (RFC 8259), and JSON nested deeper than the canonical encoding
stores (``MAX_DEPTH``, less the room a frame's payload takes around a body),
are :data:`NOT_JSON`, and the caller keeps the text as opaque text.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from ._canonical_types import MAX_DEPTH

__all__ = [
    "MAX_BODY_DEPTH",
    "NOT_JSON",
    "depth",
    "dict_at",
    "dumps",
    "list_at",
    "loads",
    "text_at",
    "token_counts",
]

#: How deeply a parsed body may nest: what a frame payload can hold around it
#: (``{"args": {"body": ...}}``, a view's copy of its fields) within ``MAX_DEPTH``.
MAX_BODY_DEPTH: Final = MAX_DEPTH - 16


class _NotJson:
    def __repr__(self) -> str:
        return "NOT_JSON"


#: What :func:`loads` returns for text it does not hand back as data.
NOT_JSON: Final[Any] = _NotJson()


def depth(value: Any, limit: int = MAX_BODY_DEPTH) -> int:
    """Return how deeply lists and dicts nest in ``value`` (a scalar: 0), at most ``limit + 1``.

    Iterative: a value of any depth is measured without recursion, and the
    walk stops once it is past ``limit``.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        level += 1
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        stack.extend((child, level) for child in children)
    return deepest


def loads(text: str | bytes | bytearray, *, max_depth: int = MAX_BODY_DEPTH) -> Any:
    """Parse JSON text, or return :data:`NOT_JSON`.

    Args:
        text: the JSON text (bytes as UTF-8, -16 or -32, as :func:`json.loads` reads them).
        max_depth: the deepest nesting handed back as data.

    Returns:
        The value (``None`` for ``null``), or :data:`NOT_JSON` when the text is
        not JSON (a parse error, bytes that are no Unicode text, nesting past
        the parser's recursion limit) or nests deeper than ``max_depth``.
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return NOT_JSON
    if isinstance(value, dict | list) and depth(value, max_depth) > max_depth:
        return NOT_JSON
    return value


def dumps(value: Any) -> str:
    """Write ``value`` (parsed JSON, maybe changed) back as compact JSON text; always UTF-8.

    Non-ASCII characters are written as they are, but a lone UTF-16 surrogate
    (JSON escapes one, ``"\\ud83d"``, and :func:`loads` hands it back as is)
    stays escaped: a text holding one has no UTF-8 form, and could not be
    stored or sent. The text parses back to ``value``.

    Raises:
        TypeError, ValueError: ``value`` is not JSON data (as :func:`json.dumps`).
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if not text.isascii() and _SURROGATE.search(text):
        # outside strings JSON text is ASCII: each surrogate sits in a string, where
        # its escape is the same code point
        return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    return text


#: A UTF-16 surrogate code point (only ever lone in a Python str).
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def dict_at(value: Any, key: str) -> dict[str, Any]:
    """``value[key]`` when ``value`` is a dict and that is a dict, else ``{}``."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def list_at(value: Any, key: str) -> list[Any]:
    """``value[key]`` when ``value`` is a dict and that is a list, else ``[]``."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, list) else []


def text_at(value: Any, key: str) -> str | None:
    """``value[key]`` when ``value`` is a dict and that is a string, else None."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def _count(value: Any) -> int | None:
    """A token count: an int from 0 to 2**63 - 1 (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    return None


def token_counts(usage: Any) -> tuple[int | None, int | None]:
    """Return ``(input, output)`` token counts of a response's ``usage``, each or None.

    Anthropic and OpenAI Responses name them ``input_tokens`` / ``output_tokens``,
    OpenAI chat completions ``prompt_tokens`` / ``completion_tokens``; the first
    name present counts. A count that is not a non-negative 64-bit int (any other
    JSON), and a ``usage`` that is not an object, give None.
    """
    if not isinstance(usage, dict):
        return None, None
    i = usage.get("input_tokens", usage.get("prompt_tokens"))
    o = usage.get("output_tokens", usage.get("completion_tokens"))
    return _count(i), _count(o)
