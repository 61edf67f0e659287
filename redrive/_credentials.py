"""The one table of credential names, and the wire forms each name is a credential in.

Every rule of :mod:`redrive._scrub` that hides a value by its name reads this
table: query strings and form bodies (``?name=value``, ``name=value&...``),
HTTP headers in both directions (a stored response's headers, ``[name,
value]`` header pairs, ``Name: value`` header lines inside text), and fields
(JSON or dict fields, ``"name": "value"`` inside text). A value under a
credential name is masked whatever it looks like.

Names are compared folded: without case, ``-`` and ``_`` (``X-Amz-Signature``,
``x_amz_signature`` and ``xAmzSignature`` are one name). A name is also a
credential when it ends, at a word boundary, in a name of the table for that
form: ``db_password``, ``openaiApiKey``, ``X-Auth-Token`` (words are cut at
``-``, ``_``, ``.`` and lower-to-upper case changes). Nothing else is matched
by suffix: ``token``, ``tokens``, ``max_tokens``, ``completion_tokens`` or a
logprob's ``token`` field are not credential *fields* (``token`` is a
credential as a query parameter and a header, per RFC 7009/7662).

Public through :mod:`redrive._scrub` (and :mod:`redrive.recorders._secrets`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

#: What a redacted value is replaced with in every journal.
REDACTED = "[REDACTED]"

#: A query string or form body parameter (and ``name=value`` in text).
QUERY = "query"
#: An HTTP header name (and a ``Name: value`` line in text, ``[name, value]`` pairs).
HEADER = "header"
#: A JSON or dict field (and ``"name": "value"`` in text).
FIELD = "field"
_ALL = frozenset({QUERY, HEADER, FIELD})
_QH = frozenset({QUERY, HEADER})
_Q = frozenset({QUERY})

#: The table: ``(name, forms, source)``. ``forms`` says where the name holds a
#: credential; a generic word (``code``, ``key``, ``sig``, ``signature``,
#: ``token``) is one only where its source makes it one (``code`` is source
#: code in a JSON field, ``signature`` is Anthropic's thinking signature).
CREDENTIALS: tuple[tuple[str, frozenset[str], str], ...] = (
    # HTTP semantics, RFC 9110 §11.6.2 and §11.7.2
    ("authorization", _ALL, "RFC 9110 §11.6.2"),
    ("proxy-authorization", _ALL, "RFC 9110 §11.7.2"),
    # HTTP state management: RFC 6265 §4.1, §4.2 and the obsolete RFC 2965 §3.2.2, §3.3.4
    ("cookie", _ALL, "RFC 6265 §4.2"),
    ("set-cookie", _ALL, "RFC 6265 §4.1"),
    ("cookie2", _ALL, "RFC 2965 §3.3.4"),
    ("set-cookie2", _ALL, "RFC 2965 §3.2.2"),
    # OAuth 2.0, RFC 6749 (and its extensions), bearer tokens RFC 6750, OpenID Connect
    ("access_token", _ALL, "RFC 6749 §5.1, RFC 6750 §2.2-2.3"),
    ("refresh_token", _ALL, "RFC 6749 §6"),
    ("client_secret", _ALL, "RFC 6749 §2.3.1"),
    ("password", _ALL, "RFC 6749 §4.3.2"),
    ("code", _Q, "RFC 6749 §4.1.2 (authorization code)"),
    ("code_verifier", _ALL, "RFC 7636 §4.5"),
    ("assertion", _Q, "RFC 7521 §4.1"),
    ("client_assertion", _ALL, "RFC 7521 §4.2"),
    ("device_code", _ALL, "RFC 8628 §3.2"),
    ("subject_token", _ALL, "RFC 8693 §2.1"),
    ("actor_token", _ALL, "RFC 8693 §2.1"),
    ("token", _QH, "RFC 7009 §2.1, RFC 7662 §2.1"),
    ("id_token", _ALL, "OpenID Connect Core 1.0 §3.1.3.3"),
    ("bearer", _ALL, "RFC 6750 §2.1 (common parameter name)"),
    ("jwt", _ALL, "RFC 7519 (common parameter name)"),
    # AWS Signature Version 4 query authentication (and v2's Signature, AWSAccessKeyId)
    ("x-amz-signature", _ALL, "AWS SigV4, authenticating requests: query parameters"),
    ("x-amz-credential", _ALL, "AWS SigV4, authenticating requests: query parameters"),
    ("x-amz-security-token", _ALL, "AWS SigV4, temporary security credentials"),
    ("awsaccesskeyid", _ALL, "AWS signature version 2"),
    ("signature", _Q, "AWS signature version 2, GCS V2 signed URLs"),
    ("secret_access_key", _ALL, "AWS SDK credentials"),
    ("session_token", _ALL, "AWS SDK credentials"),
    ("access_key", _ALL, "common API credential name"),
    # Google Cloud Storage V4 signed URLs; Google API keys
    ("x-goog-signature", _ALL, "GCS V4 signed URLs"),
    ("x-goog-credential", _ALL, "GCS V4 signed URLs"),
    ("x-goog-api-key", _ALL, "Google API keys (Gemini)"),
    ("key", _Q, "Google API keys (?key=)"),
    # Azure: Shared Access Signatures (sig; se and sp are expiry and permissions,
    # not secrets), API Management subscription keys, Azure OpenAI api-key
    ("sig", _Q, "Azure Storage SAS (sig)"),
    ("ocp-apim-subscription-key", _ALL, "Azure API Management"),
    ("subscription-key", _ALL, "Azure API Management"),
    ("api-key", _ALL, "Azure OpenAI"),
    # Common API key and secret names (Anthropic x-api-key, OpenAI/Anthropic MCP servers)
    ("x-api-key", _ALL, "Anthropic API"),
    ("apikey", _ALL, "common API key name"),
    ("api_token", _ALL, "common API key name"),
    ("auth", _QH, "common API key name"),
    ("auth_token", _ALL, "common API key name"),
    ("bearer_token", _ALL, "common API key name"),
    ("authorization_token", _ALL, "Anthropic mcp_servers[].authorization_token"),
    ("secret", _ALL, "common secret name"),
    ("secret_key", _ALL, "common secret name"),
    ("private_key", _ALL, "common secret name"),
    ("passwd", _ALL, "common secret name"),
    ("passphrase", _ALL, "common secret name"),
    ("credentials", _ALL, "common secret name"),
)

#: Token-like names that are not credentials in any form (pagination cursors,
#: tokenizer tokens), though they end in a credential name.
NOT_CREDENTIALS = frozenset(
    {
        "page_token",
        "next_page_token",
        "prev_page_token",
        "previous_page_token",
        "next_token",
        "continuation_token",
        "sync_token",
        "bos_token",
        "eos_token",
        "pad_token",
        "unk_token",
        "sep_token",
        "cls_token",
        "mask_token",
        "stop_token",
        "idempotency_key",
        "cache_key",
        "prompt_cache_key",
    }
)


def _fold(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


def _names(form: str) -> frozenset[str]:
    return frozenset(_fold(name) for name, forms, _ in CREDENTIALS if form in forms)


_BY_FORM = {form: _names(form) for form in (QUERY, HEADER, FIELD)}
_NOT = frozenset(_fold(n) for n in NOT_CREDENTIALS)

#: Field names (compared without case, ``-`` and ``_``) whose value is a credential.
CREDENTIAL_FIELDS = frozenset(n for n, forms, _ in CREDENTIALS if FIELD in forms)
#: Header names whose value is a credential.
CREDENTIAL_HEADERS = frozenset(n for n, forms, _ in CREDENTIALS if HEADER in forms)
#: Query (and form) parameters whose value is a secret.
SECRET_QUERY_PARAMS = frozenset(n for n, forms, _ in CREDENTIALS if QUERY in forms)

_WORD_CUT = re.compile(r"[-_.\s]+|(?<=[a-z0-9])(?=[A-Z])")


@functools.lru_cache(maxsize=8192)
def credential_name(name: str, form: str) -> bool:
    """Whether a value under ``name`` in wire form ``form`` is a credential.

    Args:
        name: the name as written (``Authorization``, ``x-auth-token``, ``apiKey``).
        form: :data:`QUERY`, :data:`HEADER` or :data:`FIELD`.

    Returns:
        True when ``name`` (folded) is a name of :data:`CREDENTIALS` for
        ``form``, or ends at a word boundary in one (``db_password``), and is
        not in :data:`NOT_CREDENTIALS`.
    """
    table = _BY_FORM[form]
    folded = _fold(name)
    if folded in table:
        return True
    if folded in _NOT or not folded:
        return False
    words = [w.lower() for w in _WORD_CUT.split(name.strip()) if w]
    return any("".join(words[i:]) in table for i in range(1, len(words)))


def credential_field(name: str) -> bool:
    """Whether a JSON or dict field named ``name`` holds a credential (``FIELD`` form)."""
    return credential_name(name, FIELD)


def hides_something(value: Any) -> bool:
    """Whether a credential field's ``value`` is one the default rules replace by ``[REDACTED]``.

    Not None, a number or a bool (no credential is one), not ``[REDACTED]``
    itself, and not an empty array or object: none holds anything to hide, and
    masking it would only alter what a replay hands back (DESIGN invariant 16).
    Any other value is (a string, an array or object holding anything).
    """
    if value is None or isinstance(value, int | float) or value == REDACTED:
        return False
    return not (type(value) in _CONTAINERS and not value)


_CONTAINERS = (list, tuple, dict)


def credential_header(name: str) -> bool:
    """Whether an HTTP header named ``name`` holds a credential (``HEADER`` form)."""
    return credential_name(name, HEADER)


def secret_query_param(name: str) -> bool:
    """Whether a query or form parameter named ``name`` holds a credential (``QUERY`` form)."""
    return credential_name(name, QUERY)


def _credential_name(name: str) -> bool:
    """:func:`credential_field` (the name the scrubber's hot loop imports)."""
    return credential_name(name, FIELD)
