"""Which API a request path calls: the endpoint, wherever the client's base URL ends.

An OpenAI-compatible or Anthropic-compatible host serves the same endpoints
under a path prefix of its own: Gemini's ``/v1beta/openai/chat/completions``,
Azure's ``/openai/deployments/{deployment}/chat/completions``, OpenRouter's
``/api/v1/...``, Groq's ``/openai/v1/...``, Together's and Ollama's
``/v1/...``, a litellm proxy's ``/chat/completions``. A client is configured
with some of that prefix in its base URL and the SDK adds the rest (the Azure
client adds ``/deployments/{model}``), or it is an httpx client with no base
URL at all (as frameworks hand the SDKs). A model step is named and matched
by the endpoint alone (``/chat/completions``, ``/v1/messages``): the path from
the endpoint's first segment on, so a recording replays through a client
configured another way, and a cassette from one host replays at another.

The endpoints are the model APIs of each SDK family (:data:`ENDPOINTS`); a
path without one (``/models``, a host's own API) keeps the path relative to
the client's base URL.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ENDPOINTS", "endpoint_path", "endpoint_start"]

#: The endpoints of each SDK family's model APIs, as path segments: an OpenAI
#: base URL ends in ``/v1`` or its like; an Anthropic one does not, its paths
#: start ``/v1`` (the OpenAI and Anthropic API references).
ENDPOINTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "openai": (
        ("chat", "completions"),
        ("completions",),
        ("responses",),
        ("embeddings",),
        ("moderations",),
    ),
    "anthropic": (("v1", "messages"), ("v1", "complete")),
}

#: A prefix segment whose next segment is a name, never an endpoint (Azure's deployments).
_NAMING = frozenset({"deployments"})


def endpoint_start(family: str, segments: Sequence[str], first: int = 0) -> int | None:
    """Return the index of the segment where the family's first endpoint starts, or None.

    Args:
        family: ``"openai"`` or ``"anthropic"`` (another family has no endpoints: None).
        segments: the path's non-empty segments (``["v1beta", "openai", "chat", "completions"]``).
        first: the first index an endpoint may start at (the segments of the
            client's base URL come before it).

    Returns:
        The leftmost index where an endpoint of :data:`ENDPOINTS` begins (the
        segment after ``deployments`` is a name, never an endpoint's start),
        or None when the path has none.
    """
    shapes = ENDPOINTS.get(family, ())
    for start in range(first, len(segments)):
        if start and segments[start - 1] in _NAMING:
            continue
        for shape in shapes:
            if tuple(segments[start : start + len(shape)]) == shape:
                return start
    return None


def endpoint_path(family: str, path: str, base: str = "") -> str | None:
    """Return the endpoint a request path calls, from its first segment on, or None.

    Args:
        family: the SDK family (see :func:`endpoint_start`).
        path: the request path (``"/v1beta/openai/chat/completions"``).
        base: the path of the client's base URL; when ``path`` starts with it,
            the endpoint is looked for after it.

    Returns:
        ``"/chat/completions"`` (any segments after the endpoint are kept:
        ``"/responses/resp_1/input_items"``); None when the path calls no
        endpoint of the family.
    """
    segments = [part for part in path.split("/") if part]
    based = [part for part in base.split("/") if part]
    first = len(based) if segments[: len(based)] == based else 0
    start = endpoint_start(family, segments, first)
    if start is None:
        return None
    return "/" + "/".join(segments[start:]) + ("/" if path.endswith("/") else "")
