"""Which cassette interactions are model calls; each as the model step a live recording stores.

Part of :mod:`redrive.recorders.cassettes` (see its docstring), which
re-exports these names.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Literal

from ..frames import encode
from ._cassette_file import CassetteError, CassetteLimits, Interaction, _over
from ._endpoints import endpoint_start
from ._exchange import (
    ContentEncodingError,
    describe_request,
    parse_query,
    response_payload,
)
from ._provider import STREAM_GRAMMARS
from ._reencode import stored_codings
from ._sse import is_terminal_event, split_events

Provider = Literal["openai", "anthropic"]

#: host -> (provider, base path the SDK's default base URL has).
PROVIDERS: dict[str, tuple[Provider, str]] = {
    "api.openai.com": ("openai", "/v1"),
    "api.anthropic.com": ("anthropic", ""),
}
#: The final event each provider's stream grammar ends a complete stream with, as
#: their API references document them: OpenAI chat completions end with ``data: [DONE]``
#: and Responses with ``response.completed`` (or ``response.failed`` /
#: ``response.incomplete``); Anthropic Messages with ``event: message_stop``.
_FINAL_EVENTS: dict[str, str] = {
    "openai": "the final event (data: [DONE] for chat completions, response.completed for "
    "Responses)",
    "anthropic": "the final event (event: message_stop)",
}


def model_call_of(
    interaction: Interaction, provider: Provider | None = None
) -> tuple[Provider, str] | None:
    """Say whether an interaction is a model API call, and of which provider.

    Args:
        interaction: the interaction.
        provider: ``"openai"`` or ``"anthropic"``: on hosts other than
            ``api.openai.com`` / ``api.anthropic.com``, only that provider's
            path shapes (:data:`ENDPOINTS`) are model calls; None: either's.

    Returns:
        ``(provider, base path of the client's base URL)``, or None for an
        interaction that is no model call (another host and no endpoint shape).

    Raises:
        CassetteError: the URI is malformed.
    """
    try:
        url = urllib.parse.urlsplit(interaction.uri)
        host = url.hostname or ""
    except ValueError as exc:
        raise CassetteError(f"the URI {interaction.uri!r} is malformed: {exc}") from None
    if host in PROVIDERS:
        return PROVIDERS[host]
    segments = [part for part in url.path.split("/") if part]
    families: tuple[Provider, ...] = (provider,) if provider else ("anthropic", "openai")
    found = [
        (start, rank, family)
        for rank, family in enumerate(families)
        if (start := endpoint_start(family, segments)) is not None
    ]
    if not found:
        return None
    start, _, family = min(found)
    return family, "/" + "/".join(segments[:start])


def step_of(
    interaction: Interaction,
    where: str = "",
    provider: Provider | None = None,
    *,
    limits: CassetteLimits | None = None,
    used: list[int] | None = None,
) -> tuple[str, dict[str, Any], Any]:
    """Return ``(step name, request, response payload)`` as a live recording would store them.

    Args:
        interaction: the interaction.
        where: how messages name it (``"c.yaml interaction 3"``).
        provider: see :func:`model_call_of`.
        limits: the bounds on decoded bodies (default :class:`CassetteLimits`).
        used: ``[decoded body bytes so far]`` of the cassette, updated (default: this
            interaction alone).

    Raises:
        CassetteError: the URI is malformed, the interaction is no model API
            call, the response body cannot be decoded (an unknown or
            uninstalled ``Content-Encoding``, or a body that is not what its
            encoding says: the message names the interaction, method and URL),
            or the request or response holds data a journal cannot store; its
            body decodes past ``max_body_bytes`` or the cassette's past
            ``max_total_body_bytes``; or it is a stream of a provider whose
            streams end with a final event and that event is missing.
    """
    limits = limits or CassetteLimits()
    used = [0] if used is None else used
    try:
        call = model_call_of(interaction, provider)
    except CassetteError as exc:
        raise CassetteError(f"{where}: {exc}") from None
    if call is None:
        raise CassetteError(
            f"{where}: {interaction.label()} is not an OpenAI or Anthropic API host "
            f"(known: {', '.join(sorted(PROVIDERS))}) and its path has no OpenAI or "
            "Anthropic endpoint shape (.../chat/completions, .../v1/messages...)"
        )
    family, base_path = call
    url = urllib.parse.urlsplit(interaction.uri)
    content_type = next(
        (v for k, v in interaction.request_headers if k.lower() == "content-type"),
        "application/json",
    )
    name, request = describe_request(
        family,
        base_path,
        interaction.method,
        url.path,
        parse_query(interaction.uri),
        interaction.request_body,
        content_type,
    )
    room = min(limits.max_body_bytes, limits.max_total_body_bytes - used[0])
    try:
        body = interaction.decoded_body(limit=max(room, 0))
    except ContentEncodingError as exc:
        if "over" in str(exc) or "more than" in str(exc):
            name = "max_body_bytes" if room == limits.max_body_bytes else "max_total_body_bytes"
            raise _over(
                limits, name, f"{where} ({interaction.label()})", "its response body decodes"
            ) from None
        raise CassetteError(
            f"{where} ({interaction.label()}): the response body cannot be decoded: {exc}"
        ) from None
    used[0] += len(body)
    response_type = next((v for k, v in interaction.headers if k.lower() == "content-type"), "")
    if "text/event-stream" in response_type:
        events, rest = split_events(body)
        if (
            family in STREAM_GRAMMARS
            and 200 <= interaction.status < 300
            and not any(is_terminal_event(event) for event in events + ([rest] if rest else []))
        ):
            raise CassetteError(
                f"{where} ({interaction.label()}): the response stream has no final event "
                f"(it was cut off while recording): {_FINAL_EVENTS[family]} is missing after "
                f"its {len(events)} events. A stream without it is not a finished model "
                "call; record this call again, or remove the interaction from the cassette"
            )
        payload = response_payload(
            interaction.status, interaction.headers, chunks=events + ([rest] if rest else [])
        )
    else:
        codings = stored_codings(interaction.honest_headers())
        payload = response_payload(
            interaction.status, interaction.headers, body=body, content_encoding=codings
        )
    try:
        encode(request)
        encode(payload)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CassetteError(f"{where}: the interaction cannot be stored: {exc}") from None
    return name, request, payload
