"""The secrets policy of recorded HTTP exchanges: what never reaches a journal.

Requests are stored without headers at all; a stored request's query keeps
its parameters but replaces the value of a secret one by ``[REDACTED]``. A
stored response keeps its headers except credentials and cookies (and the
body framing the decoded body makes wrong). A JSON response body goes
through the run's ``redact`` path patterns as ``{"body": ...}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "BODY_HEADERS",
    "SECRET_HEADERS",
    "SECRET_QUERY_PARAMS",
    "redact_body",
    "scrub_headers",
    "secret_query_param",
]

#: Headers never written to a journal (requests are not stored with headers at all).
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "api-key",
        "x-api-key",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
        "anthropic-organization-id",
        "x-goog-api-key",
    }
)
#: Query parameters whose value is replaced by ``[REDACTED]`` in a stored request.
#: Matched case-insensitively, with ``_`` and ``-`` alike (``API_KEY``, ``Api-Key``).
#: Keys (``key``, ``api-key``, Azure APIM ``subscription-key``), OAuth tokens and
#: secrets, and signed-URL signatures (Azure SAS ``sig``, AWS ``X-Amz-Signature``).
SECRET_QUERY_PARAMS = frozenset(
    {
        "key",
        "api-key",
        "api_key",
        "apikey",
        "x-api-key",
        "x-goog-api-key",
        "subscription-key",
        "ocp-apim-subscription-key",
        "access_token",
        "access-token",
        "refresh_token",
        "id_token",
        "token",
        "auth",
        "authorization",
        "client_secret",
        "secret",
        "password",
        "sig",
        "signature",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)
_SECRET_QUERY_NAMES = frozenset(name.replace("_", "-") for name in SECRET_QUERY_PARAMS)

#: Headers dropped from a stored (and a decoded live) response: the decoded body makes them wrong.
BODY_HEADERS = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
)


def secret_query_param(name: str) -> bool:
    """Whether a query parameter's value must never be journaled.

    Args:
        name: the parameter name, as sent.

    Returns:
        True when ``name`` (case and ``_``/``-`` folded) is in :data:`SECRET_QUERY_PARAMS`.
    """
    return name.strip().lower().replace("_", "-") in _SECRET_QUERY_NAMES


def scrub_headers(headers: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Return ``[[name, value], ...]`` (lower-case names) without secrets, cookies and body framing.

    Drops every header in :data:`SECRET_HEADERS` and :data:`BODY_HEADERS`
    (the stored body is decoded and its length is recomputed on replay).
    """
    out = []
    for name, value in headers:
        low = name.lower()
        if low in SECRET_HEADERS or low in BODY_HEADERS:
            continue
        out.append([low, value])
    return out


def redact_body(payload: dict[str, Any], redact: Callable[[Any], Any] | None) -> dict[str, Any]:
    """Apply a run's ``redact`` patterns to a stored response's JSON body (``$.body...``).

    Args:
        payload: the stored response (:func:`redrive.recorders.http.response_payload`).
        redact: the run's redaction (``value -> value``), or None when it has no patterns.

    Returns:
        ``payload`` itself when nothing changes (no patterns, no JSON text
        body, nothing matched), else a copy whose body is the redacted JSON.
    """
    body = payload.get("body")
    if redact is None or not isinstance(body, str):
        return payload
    try:
        parsed = json.loads(body)
    except ValueError:
        return payload
    redacted = redact({"body": parsed})["body"]
    if redacted == parsed:
        return payload
    return {**payload, "body": json.dumps(redacted, ensure_ascii=False, separators=(",", ":"))}
