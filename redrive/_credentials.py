"""Which field, header and parameter names hold credentials (:mod:`redrive._scrub`, points 2, 3).

Public through :mod:`redrive._scrub` (and :mod:`redrive.recorders._secrets`).
"""

from __future__ import annotations

import functools

#: What a redacted value is replaced with in every journal.
REDACTED = "[REDACTED]"

#: Field names (compared without case, ``-`` and ``_``) whose value is a credential.
CREDENTIAL_FIELDS = frozenset(
    {
        "authorization",
        "authorization_token",
        "proxy_authorization",
        "api_key",
        "apikey",
        "x_api_key",
        "api_token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "x_auth_token",
        "session_token",
        "bearer_token",
        "token",
        "client_secret",
        "secret",
        "secret_key",
        "secret_access_key",
        "private_key",
        "password",
        "passwd",
        "passphrase",
        "credentials",
        "cookie",
        "set_cookie",
        "x_goog_api_key",
        "subscription_key",
        "ocp_apim_subscription_key",
        "x_amz_security_token",
    }
)
#: Token-like names that are not credentials (pagination cursors, tokenizer tokens).
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
    }
)
_CREDENTIAL_SUFFIXES = ("token", "secret", "password", "apikey")

#: Query (and form) parameters whose value is a secret, on top of every
#: :func:`credential_field` name: keys (``key``, Azure APIM ``subscription-key``),
#: ``auth``, ``code`` and signed-URL parts (Azure SAS ``sig``, AWS ``X-Amz-Signature``).
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


def _fold(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


_FIELDS = frozenset(_fold(n) for n in CREDENTIAL_FIELDS)
_NOT_FIELDS = frozenset(_fold(n) for n in NOT_CREDENTIALS)
_QUERY = frozenset(_fold(n) for n in SECRET_QUERY_PARAMS)


def credential_field(name: str) -> bool:
    """Whether a field (or header) named ``name`` holds a credential.

    Args:
        name: the field's name as written (``Authorization``, ``x-auth-token``, ``apiKey``).

    Returns:
        True when ``name``, without case, ``-`` and ``_``, is in
        :data:`CREDENTIAL_FIELDS`, or ends in ``token``, ``secret``,
        ``password`` or ``apikey`` and is not in :data:`NOT_CREDENTIALS`.
    """
    return _credential_name(name)


@functools.lru_cache(maxsize=4096)
def _credential_name(name: str) -> bool:
    """:func:`credential_field`, cached: the same few field names come in every payload."""
    folded = _fold(name)
    if folded in _FIELDS:
        return True
    return folded.endswith(_CREDENTIAL_SUFFIXES) and folded not in _NOT_FIELDS


def secret_query_param(name: str) -> bool:
    """Whether a query or form parameter's value must never be journaled.

    Args:
        name: the parameter name, as sent.

    Returns:
        True for the names of :data:`SECRET_QUERY_PARAMS` and every
        :func:`credential_field` name (case, ``-`` and ``_`` folded).
    """
    return _fold(name) in _QUERY or credential_field(name)
