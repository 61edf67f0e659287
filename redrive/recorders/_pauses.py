"""Provider rows of the pause table: a rate limit or an exhausted quota pauses a run.

The engine's table (:func:`redrive.replay.pause_rules`) knows no SDK; these
rows, added when ``redrive.recorders`` is imported, read an exception as data
(its HTTP status, headers, error code and class names), so no SDK or
framework is imported:

* ``quota``: HTTP 429 whose error code or type names a quota
  (``insufficient_quota``: OpenAI's "You exceeded your current quota";
  ``RESOURCE_EXHAUSTED``-style codes), or a class named ``*QuotaExceeded*``.
  Waiting does not clear it: a person raises the quota, then resumes the run.
* ``rate_limit``: HTTP 429, or a class (or base) named ``RateLimitError`` /
  ``ModelRateLimitError`` (OpenAI and Anthropic SDKs, LiteLLM, pydantic-ai).
  Waiting clears it: the ``retry-after-ms`` / ``retry-after`` response header
  (seconds) says how long, when the provider sent one.

An exception a recorder marked ``retryable = False`` (a recorded error,
replayed the same every time) matches neither.

Sources: OpenAI error codes (https://platform.openai.com/docs/guides/error-codes:
429 "You exceeded your current quota", code ``insufficient_quota``); Anthropic
errors (https://docs.anthropic.com/en/api/errors: 429 ``rate_limit_error``,
``retry-after`` header); RFC 9110 section 10.2.3 (``Retry-After``).
"""

from __future__ import annotations

from typing import Any

from ..replay import PauseRule
from ._failures import http_status

__all__ = ["PROVIDER_PAUSE_RULES", "quota_exhausted", "rate_limited", "retry_after"]

_RATE_LIMIT_CLASSES = frozenset({"RateLimitError", "ModelRateLimitError"})


def _replayed(exc: BaseException) -> bool:
    return getattr(exc, "retryable", None) is False


def _codes(exc: BaseException) -> list[str]:
    """The error code and type an exception carries (SDK ``code``/``type``, a JSON body)."""
    found: list[Any] = [getattr(exc, "code", None), getattr(exc, "type", None)]
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            found += [inner.get("code"), inner.get("type"), inner.get("status")]
    return [str(c).lower() for c in found if isinstance(c, str)]


def quota_exhausted(exc: BaseException) -> bool:
    """True for a provider's exhausted-quota refusal (see the module doc)."""
    if _replayed(exc):
        return False
    if any("quota" in c.lower() for c in (cls.__name__ for cls in type(exc).__mro__)):
        return True
    status = http_status(exc)
    if status is None or status[0] != 429:
        return False
    return any("quota" in c or c == "resource_exhausted" for c in _codes(exc))


def rate_limited(exc: BaseException) -> bool:
    """True for a provider's rate-limit refusal (HTTP 429, or a rate-limit class)."""
    if _replayed(exc):
        return False
    status = http_status(exc)
    if status is not None:
        return status[0] == 429
    return any(cls.__name__ in _RATE_LIMIT_CLASSES for cls in type(exc).__mro__)


def retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms``, else ``retry-after``), or None.

    Only a number of seconds is read (an HTTP date is not: None).
    """
    status = http_status(exc)
    if status is None:
        return None
    headers = status[1]
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        try:
            value = float(raw) if isinstance(raw, str | int | float) else -1.0
        except ValueError:
            continue
        if value >= 0:
            return value * scale
    return None


#: The rows ``redrive.recorders`` adds to the pause table (quota before rate limit).
PROVIDER_PAUSE_RULES = (
    PauseRule(kind="quota", matches=quota_exhausted, retry=False, source="redrive.recorders"),
    PauseRule(
        kind="rate_limit",
        matches=rate_limited,
        retry=True,
        retry_after=retry_after,
        source="redrive.recorders",
    ),
)
