"""Provider knowledge: which model API errors are transient, and how the engine learns it.

The engine (``redrive.replay``) knows no SDK: it reads an exception's
``retryable`` attribute to decide whether a run it ends stays resumable.
The recorders set that attribute on what they let through:

* the wrapped SDK clients (:func:`redrive.wrap`): a live transient error
  response (408, 409, 429, 5xx, or ``x-should-retry: true``) is never
  journaled and its SDK exception carries ``retryable = True``; a recorded
  error (live or replayed) carries ``retryable = False``; a transport error
  (connection refused, timeout, a stream cut) carries ``retryable = True``,
  and so does the SDK exception raised from it (``APIConnectionError``);
* model callables (:func:`redrive.model`) through :func:`marks_retryable`.

An exception that already carries a boolean ``retryable`` keeps it.

A server-sent-event stream can fail after its ``200`` status, in-band
(:func:`stream_error`): the error event is mapped to the HTTP status the same
error has as a response, and :func:`is_transient` decides from that status,
so an overload mid-stream and an overload as HTTP 529 are one case.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ParamSpec, TypeVar

import attrs

from ..errors import ReplayError
from ._sse import SseEvent

__all__ = [
    "ERROR_STATUSES",
    "MODEL_ID_KEYS",
    "MODEL_ID_PATHS",
    "MODEL_ID_TYPES",
    "RETRYABLE_EXTENSION",
    "STREAM_GRAMMARS",
    "TRANSIENT_CLASSES",
    "TRANSIENT_STATUSES",
    "default_should_retry",
    "error_object",
    "is_transient",
    "mark_retryable",
    "marking_retryable",
    "marks_retryable",
    "set_retryable",
    "StreamError",
    "stream_error",
]

#: HTTP statuses a model API answers when trying again later may succeed (and any 5xx).
TRANSIENT_STATUSES = frozenset({408, 409, 429})
#: Exception class names (OpenAI's and Anthropic's SDKs) of a connection or timeout
#: error, matched by name so that no SDK is imported.
TRANSIENT_CLASSES = frozenset({"APIConnectionError", "APITimeoutError"})
#: The httpx response extension the transport sets: True on a live transient
#: error response (not recorded), False on a recorded error response (live or
#: replayed). The wrapped SDK client copies it onto the exception it raises.
RETRYABLE_EXTENSION = "redrive.retryable"

#: Request keys whose values a model or a transport mints (tool call ids): a
#: resumed conversation may carry other ids for the same calls, so they are no
#: part of a match. (``replay._policy.VOLATILE_KEYS`` holds the same names: the engine
#: keeps them as its generic fallback, so the match keys of existing journals stay.)
MODEL_ID_KEYS = frozenset({"tool_call_id", "tool_use_id", "call_id"})
#: Object ``type`` values whose ``id`` field the model mints (OpenAI tool calls
#: and Responses function calls; Anthropic tool use blocks).
MODEL_ID_TYPES = frozenset(
    {"function", "tool_use", "function_call", "server_tool_use", "tool_call"}
)
#: Where each provider's stored request (``{method, path, query, body}``)
#: carries model-minted ids, as ``ignore`` path patterns: the data the engine
#: needs to leave them out of a match, in place of knowing key names itself.
MODEL_ID_PATHS: dict[str, tuple[str, ...]] = {
    "openai": (
        "$.body.messages[*].tool_call_id",  # chat: a tool result names its call
        "$.body.messages[*].tool_calls[*].id",  # chat: the assistant's calls
        "$.body.input[*].call_id",  # responses: function_call and its output
        # not "$.body.input[*].id": the ids of message and reasoning items were always
        # matched, and a journal's match keys must not change (the generic rule in
        # replay._policy still drops the ids of function_call items)
    ),
    "anthropic": (
        "$.body.messages[*].content[*].id",  # tool_use / server_tool_use blocks
        "$.body.messages[*].content[*].tool_use_id",  # tool_result blocks
    ),
}


#: The HTTP status of each error ``type`` / ``code`` a model API sends in-band,
#: as the same error has when it is the response's status. Anthropic:
#: https://docs.anthropic.com/en/api/errors ("HTTP errors"); OpenAI:
#: https://platform.openai.com/docs/guides/error-codes and the Responses
#: ``ResponseError.code`` values. A type not listed is a permanent error (400).
ERROR_STATUSES: dict[str, int] = {
    # Anthropic error types
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
    # OpenAI error types and codes (chat completions and Responses)
    "server_error": 500,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "requests": 429,
    "tokens": 429,
    "vector_store_timeout": 504,
}


#: Providers whose stream grammar ends every complete stream with a final event
#: (``[DONE]``, ``message_stop``, ``response.completed``...): a stream of theirs
#: that the server ends without one is not a finished step.
STREAM_GRAMMARS = frozenset({"openai", "anthropic"})


@attrs.frozen
class StreamError:
    """An error a model API sent inside a stream whose HTTP status was a success.

    Attributes:
        kind: the error's ``type`` (Anthropic, OpenAI chat) or ``code`` (OpenAI
            Responses), or ``""`` when it names none.
        status: the HTTP status of the same error as a response (:data:`ERROR_STATUSES`).
        transient: :func:`is_transient` of ``status``: the step is not finished,
            a resume asks again; False: the error is the step's recorded outcome.
    """

    kind: str
    status: int
    transient: bool


def error_object(data: Any) -> dict[str, Any] | None:
    """The error object of an in-band error event's JSON data, or None when it is none.

    Args:
        data: one event's parsed JSON data (see :func:`stream_error` for the grammars).

    Returns:
        ``{"type" | "code", "message", ...}``; for OpenAI Responses' ``error``
        event its fields without ``type``; for ``response.failed`` its
        ``response.error`` (``{"code": "server_error"}`` when it has none).
    """
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    if kind == "error":  # Anthropic {"error": {...}}; OpenAI Responses: the fields inline
        error = data.get("error")
        return error if isinstance(error, dict) else {k: v for k, v in data.items() if k != "type"}
    if kind == "response.failed":  # OpenAI Responses: the failed response carries it
        response = data.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        return error if isinstance(error, dict) else {"code": "server_error"}
    error = data.get("error")  # OpenAI chat completions: {"error": {...}}
    return error if isinstance(error, dict) and error else None


def stream_error(event: SseEvent) -> StreamError | None:
    """Classify an in-band stream error event as the equivalent HTTP error.

    The stream grammars read here:

    * Anthropic Messages streaming ("Error events",
      https://docs.anthropic.com/en/docs/build-with-claude/streaming): ``event:
      error`` with ``{"type": "error", "error": {"type": "overloaded_error",
      "message": ...}}``, the error types of the HTTP errors;
    * OpenAI chat completions streaming
      (https://platform.openai.com/docs/api-reference/chat-streaming: data-only
      ``chat.completion.chunk`` events ended by ``data: [DONE]``): a ``data:
      {"error": {"type": ..., "code": ..., "message": ...}}`` chunk (the SDK
      raises ``APIError`` on it);
    * OpenAI Responses streaming events
      (https://platform.openai.com/docs/api-reference/responses-streaming):
      ``error`` (``{"type": "error", "code", "message", "param"}``) and
      ``response.failed`` (its ``response.error`` is ``{"code", "message"}``;
      a failed response without one counts as ``server_error``).

    The error's type (or code) is mapped to its HTTP status by
    :data:`ERROR_STATUSES`; a numeric ``status`` or ``code`` from 400 to 599
    (OpenAI-compatible proxies) is taken as the status itself.

    Args:
        event: one parsed server-sent event (:func:`redrive.recorders._sse.parse_event`).

    Returns:
        The error, or None when the event is not an in-band error.
    """
    data = event.json()
    error = error_object(data)
    if error is None:
        if event.name != "error":
            return None
        error = {}  # "event: error" whose data is not JSON: an error all the same
    kind = error.get("type") or error.get("code")
    kind = kind if isinstance(kind, str) else ""
    status = ERROR_STATUSES.get(kind, 400)
    for key in ("status", "code"):
        value = error.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value < 600:
            status = value
            break
    return StreamError(kind, status, is_transient(status, {}))


def is_transient(status: int, headers: Any) -> bool:
    """Whether an error response is transient: never the step's recorded outcome.

    Args:
        status: the HTTP status.
        headers: the response headers (anything with ``.get(name)``).

    Returns:
        True for 408, 409, 429, any status >= 500, and any status >= 400 whose
        ``x-should-retry`` header is ``true``.
    """
    if status < 400:
        return False
    if status in TRANSIENT_STATUSES or status >= 500:
        return True
    return str(headers.get("x-should-retry", "")).lower() == "true"


def default_should_retry(status: int, headers: Mapping[str, str]) -> bool:
    """Whether an SDK retries a response, by the rule both SDKs share.

    Args:
        status: the HTTP status.
        headers: the response headers (lower-case names).

    Returns:
        The ``x-should-retry`` header when it says ``true``/``false``, else
        True for 408, 409, 429 and 5xx.
    """
    flag = headers.get("x-should-retry")
    if flag == "true":
        return True
    if flag == "false":
        return False
    return status in TRANSIENT_STATUSES or status >= 500


def set_retryable(exc: BaseException, flag: bool) -> None:
    """Set ``exc.retryable = flag`` unless it already carries a boolean one.

    Exceptions that refuse attributes (``__slots__``) are left as they are.
    """
    if isinstance(getattr(exc, "retryable", None), bool):
        return
    with contextlib.suppress(AttributeError, TypeError):
        exc.retryable = flag  # type: ignore[attr-defined]


def _verdict(exc: BaseException) -> bool | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        return is_transient(status, headers)
    if any(cls.__name__ in TRANSIENT_CLASSES for cls in type(exc).__mro__):
        return True
    if getattr(exc.__cause__, "retryable", None) is True:
        return True  # an SDK error raised from a transport error the transport marked
    return None


def mark_retryable(exc: BaseException) -> BaseException:
    """Mark a model call's exception ``retryable`` as the provider knowledge here decides.

    An exception with an HTTP ``status_code`` >= 400 (the SDKs' status errors,
    litellm's...) gets ``retryable = is_transient(status, headers)``; a
    connection or timeout error (:data:`TRANSIENT_CLASSES`), or an exception
    raised from one this module marked, gets ``retryable = True``; anything
    else, the run's own errors (``ReplayError``) and an exception that
    already carries a boolean ``retryable`` are left as they are.

    Args:
        exc: the exception a model call raised.

    Returns:
        ``exc`` (so ``raise mark_retryable(exc)`` reads well).
    """
    if isinstance(exc, ReplayError):
        return exc
    verdict = _verdict(exc)
    if verdict is not None:
        set_retryable(exc, verdict)
    return exc


@contextlib.contextmanager
def marking_retryable() -> Iterator[None]:
    """Mark (:func:`mark_retryable`) any exception that leaves the block, then let it go.

    Works around a sync call and around an ``await`` alike::

        with marking_retryable():
            return await call()
    """
    try:
        yield
    except Exception as exc:
        mark_retryable(exc)
        raise


P = ParamSpec("P")
R = TypeVar("R")


def marks_retryable(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a model callable (sync or ``async def``) so that what it raises is marked.

    For :func:`redrive.model`: ``call = marks_retryable(func)``, then the step
    calls ``call(*args, **kwargs)``; an exception it raises carries
    ``retryable`` as :func:`mark_retryable` decides, so the run learns from
    the exception alone whether it stays resumable.

    Args:
        fn: the model callable.

    Returns:
        A function of the same signature (a coroutine function when ``fn`` is one).
    """
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def amarked(*args: P.args, **kwargs: P.kwargs) -> Any:
            with marking_retryable():
                return await fn(*args, **kwargs)

        return amarked  # type: ignore[return-value]

    @functools.wraps(fn)
    def marked(*args: P.args, **kwargs: P.kwargs) -> R:
        with marking_retryable():
            return fn(*args, **kwargs)

    return marked
