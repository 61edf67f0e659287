"""Which exceptions of the model SDKs and agent frameworks mean a transient provider error.

The table the engine reads (through :func:`classify_error`, installed with
``redrive.replay.set_error_classifier`` when ``redrive.recorders`` is imported)
for exceptions no recorder marked: what a framework raises around an SDK error
(pydantic-ai's ``ModelUnavailableError`` from the SDK's ``InternalServerError``,
litellm's ``RateLimitError`` while handling the SDK's), and SDK errors from a
client redrive did not wrap. Exceptions are matched by the module their class
(or a base class) is defined in and by class name, so no framework is imported.

The rule, the same for every library as for the wrapped SDK clients
(:func:`~redrive.recorders._provider.is_transient`):

* an exception of a listed library carrying an HTTP status (``status_code``, or
  its ``response.status_code``) is transient for 408, 409, 429, any 5xx (529
  overloaded included) and a 4xx whose ``x-should-retry`` header says ``true``;
  permanent for any other 4xx (400, 401, 403, 404, 422...);
* without a status, it is transient when its class (or a base class) is one of
  the library's connection, timeout, rate-limit or availability errors below;
* anything else: not known here (the engine reads the exceptions under it).

One store error is transient too, whatever wraps it: SQLite's lock timeout,
``sqlite3.OperationalError`` with the code ``SQLITE_BUSY`` or ``SQLITE_LOCKED``
(message ``database is locked``), raised by a session store or a checkpointer
on SQLite (the Agents SDK's ``SQLiteSession``, LangGraph's ``SqliteSaver``,
``aiosqlite``) while another connection holds the lock. Waiting clears it, so
the run stays resumable (``paused``, ``retries_exhausted``). Any other
``OperationalError`` (no such table, disk I/O, read-only file) is not read here.

Sources: OpenAI and Anthropic Python SDKs, "Handling errors" (``APIConnectionError``,
``APITimeoutError``, ``APIStatusError.status_code``,
https://github.com/openai/openai-python#handling-errors); httpx exceptions
(https://www.python-httpx.org/exceptions/); pydantic-ai ``pydantic_ai.exceptions``
(``ModelAPIError`` and its categories, https://ai.pydantic.dev/api/exceptions/);
LiteLLM exception mapping (https://docs.litellm.ai/docs/exception_mapping). The
OpenAI Agents SDK and langchain-openai raise the OpenAI SDK's own errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._provider import is_transient

__all__ = ["ERROR_FAMILIES", "ErrorFamily", "classify_error", "http_status"]


@attrs.frozen
class ErrorFamily:
    """One library's exceptions, as data.

    Attributes:
        library: its name, for people.
        modules: the top-level modules its exception classes are defined in.
        transient: class names of its errors that are transient without a status
            (a class or any of its bases, defined in one of ``modules``).
    """

    library: str
    modules: frozenset[str]
    transient: frozenset[str]


#: The libraries whose errors redrive classifies (see the module doc for the rule).
ERROR_FAMILIES: tuple[ErrorFamily, ...] = (
    ErrorFamily(
        "OpenAI and Anthropic SDKs",
        frozenset({"openai", "anthropic"}),
        frozenset({"APIConnectionError", "APITimeoutError"}),
    ),
    ErrorFamily(
        "httpx",
        frozenset({"httpx", "httpx2", "httpcore", "httpcore2"}),
        frozenset({"TimeoutException", "NetworkError", "RemoteProtocolError", "ProxyError"}),
    ),
    ErrorFamily(
        "pydantic-ai",
        frozenset({"pydantic_ai"}),
        frozenset(
            {
                "ModelConnectionError",  # and ModelTimeoutError
                "ModelRateLimitError",
                "ModelUnavailableError",  # and ModelOverloadedError
                "ModelServerError",
                "ModelRequestTimeout",
            }
        ),
    ),
    ErrorFamily(
        "LiteLLM",
        frozenset({"litellm"}),
        frozenset(
            {
                "APIConnectionError",
                "Timeout",
                "RateLimitError",
                "ServiceUnavailableError",  # and MidStreamFallbackError
                "InternalServerError",
                "BadGatewayError",
            }
        ),
    ),
)

_MODULES: frozenset[str] = frozenset().union(*(f.modules for f in ERROR_FAMILIES))


def _top(cls: type) -> str:
    return str(getattr(cls, "__module__", "")).split(".", 1)[0]


def http_status(exc: BaseException) -> tuple[int, Mapping[str, Any]] | None:
    """The HTTP status an exception carries and its response headers, or None.

    Reads ``exc.status_code`` (the SDKs, litellm, pydantic-ai's
    ``ModelHTTPError``), else ``exc.response.status_code`` (httpx's
    ``HTTPStatusError``); headers from ``exc.response.headers`` or ``exc.headers``.

    Returns:
        ``(status, headers)`` for a status of 400 to 599, else None.
    """
    try:
        response = getattr(exc, "response", None)
        status = getattr(exc, "status_code", None)
        if not isinstance(status, int) or isinstance(status, bool):
            status = getattr(response, "status_code", None)
        headers = getattr(response, "headers", None) or getattr(exc, "headers", None) or {}
    except Exception:  # a property that raises: no status to read
        return None
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status < 600:
        return None
    return status, headers if hasattr(headers, "get") else {}


#: SQLite result codes of a lock another connection holds (extended codes start the same)
_SQLITE_LOCK_CODES = ("SQLITE_BUSY", "SQLITE_LOCKED")
#: the messages of those codes (an error raised without its code, e.g. by a wrapper library)
_SQLITE_LOCK_TEXTS = ("database is locked", "database table is locked", "database schema is locked")


def _sqlite_lock(exc: BaseException) -> bool:
    """True for SQLite's lock timeout (``sqlite3.OperationalError``, busy or locked)."""
    if not any(
        _top(c) == "sqlite3" and c.__name__ == "OperationalError" for c in type(exc).__mro__
    ):
        return False
    code = getattr(exc, "sqlite_errorname", None)
    if isinstance(code, str):
        return code.startswith(_SQLITE_LOCK_CODES)
    return str(exc).strip().lower().startswith(_SQLITE_LOCK_TEXTS)


def classify_error(exc: BaseException) -> bool | None:
    """Whether ``exc`` is a transient provider error, by :data:`ERROR_FAMILIES`.

    Args:
        exc: any exception (one of the tree under what ended a run's block).

    Returns:
        True (transient, SQLite's lock timeout included), False (a listed
        library's permanent HTTP error), or None (not a listed library's, or no
        status and not a transient class).
    """
    if _sqlite_lock(exc):
        return True
    classes = [cls for cls in type(exc).__mro__ if _top(cls) in _MODULES]
    if not classes:
        return None
    status = http_status(exc)
    if status is not None:
        return is_transient(*status)
    for family in ERROR_FAMILIES:
        if any(_top(c) in family.modules and c.__name__ in family.transient for c in classes):
            return True
    return None
