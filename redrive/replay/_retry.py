"""Retry signals: a tool body that raises to ask to be called again (DESIGN C7).

Agent frameworks let a tool tell the model "call me again" by raising
(pydantic-ai's ``ModelRetry``). redrive treats such an exception as a
documented tool outcome, not as a side effect that may have happened: the
step's ``tool_error`` is recorded with ``retry_requested: true``, and the next
call of that tool with the same arguments is a retry of the same logical
operation (the same idempotency key): its body runs, live and on resume,
instead of being blocked as a repeat of a failed side effect.

The mark is a plain attribute on the exception, so the engine reads data and
knows no framework: :class:`RetryRequested` carries it (raise it from a tool
body, or subclass it), :func:`mark_retry_requested` sets it on any exception
(what :mod:`redrive.integrations` does for a framework's own signal), and
:func:`retry_requested` reads it.
"""

from __future__ import annotations

import contextlib
from typing import TypeVar

__all__ = ["RetryRequested", "mark_retry_requested", "retry_requested"]

_MARK = "__redrive_retry_requested__"

E = TypeVar("E", bound=BaseException)


class RetryRequested(Exception):
    """Raise from a tool body to ask to be called again with the same arguments.

    The call's ``tool_error`` is recorded with ``retry_requested: true``; the
    next call of the tool with the same arguments runs its body again under
    the same idempotency key (a retry of the same logical operation), even for
    a tool that is not restart safe. Raise it only when the body knows its
    side effect did not happen (the service refused the request, a validation
    failed before anything was sent): redrive takes the body's word for it.

    Args:
        message: what went wrong, for the caller (a framework tells the model).
    """

    __redrive_retry_requested__ = True


def mark_retry_requested(exc: E) -> E:
    """Mark ``exc`` as a retry signal (see :class:`RetryRequested`) and return it.

    An exception that refuses attributes is returned unmarked.
    """
    with contextlib.suppress(AttributeError, TypeError):
        setattr(exc, _MARK, True)
    return exc


def retry_requested(exc: BaseException) -> bool:
    """Return True when ``exc`` is a retry signal (marked, or a :class:`RetryRequested`)."""
    return getattr(exc, _MARK, False) is True
