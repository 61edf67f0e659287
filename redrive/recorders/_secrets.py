"""The secrets policy of recorded HTTP exchanges: what never reaches a journal.

Requests are stored without headers at all; a stored request's query keeps
its parameters but replaces the value of a secret one
(:func:`secret_query_param`) by ``[REDACTED]``. A stored response keeps its
headers except credentials (:data:`SECRET_HEADERS` and every
:func:`credential_header` name, e.g. ``x-auth-token``, ``Cookie2``) and cookies (and the
body framing the decoded body makes wrong). A JSON response body goes
through the run's ``redact`` path patterns as ``{"body": ...}``.

Past this recorder-level policy, every payload of every frame (HTTP or not:
tool arguments, results and errors, model requests and responses, event
streams, values, notes, the run's input, output and error) passes one
scrubber before it is written: :mod:`redrive._scrub`, which holds the lists
(:data:`CREDENTIAL_FIELDS`, :data:`SECRET_QUERY_PARAMS`) and the rules
(``redact=`` paths everywhere, credential fields by name, secret-looking
text masked), documented there. They live below the rooms because the
journal writer (replay) applies them and recorders use them too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .._jsontext import NOT_JSON, dumps, loads
from .._scrub import (
    CREDENTIAL_FIELDS,
    SECRET_QUERY_PARAMS,
    credential_field,
    credential_header,
    secret_query_param,
)

__all__ = [
    "BODY_HEADERS",
    "CREDENTIAL_FIELDS",
    "SECRET_HEADERS",
    "SECRET_QUERY_PARAMS",
    "credential_field",
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
        "cookie2",
        "set-cookie2",
        "openai-organization",
        "openai-project",
        "anthropic-organization-id",
        "x-goog-api-key",
    }
)
#: Headers dropped from a stored (and a decoded live) response: the decoded body makes them wrong.
BODY_HEADERS = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
)


def scrub_headers(headers: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Return ``[[name, value], ...]`` (lower-case names) without secrets, cookies and body framing.

    Drops every header in :data:`SECRET_HEADERS` and :data:`BODY_HEADERS`
    (the stored body is decoded and its length is recomputed on replay), and
    every header named like a credential (:func:`credential_header`, the
    table of :mod:`redrive._credentials`: ``x-auth-token``, ``Cookie2``,
    ``X-Amz-Security-Token``...).
    """
    out = []
    for name, value in headers:
        low = name.lower()
        if low in SECRET_HEADERS or low in BODY_HEADERS or credential_header(low):
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
    parsed = loads(body)
    if parsed is NOT_JSON:
        return payload
    redacted = redact({"body": parsed})["body"]
    if redacted == parsed:
        return payload
    return {**payload, "body": dumps(redacted)}
