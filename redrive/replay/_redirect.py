"""Send every run opened in a context to one journal (the pytest plugin's test journal).

A test of code that opens its own runs (``redrive.run(url, ...)``,
``@redrive.durable``) records them into the test's journal, not into the
journal the code names: :func:`redirect_runs` sets that journal, and the
record/replay options the test's mode implies, for the current context.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from ..storage import Journal

__all__ = ["Redirect", "redirect_runs", "redirected", "sending_live", "sends_live"]


@attrs.frozen
class Redirect:
    """Where runs opened in this context go, and the options forced on them.

    Attributes:
        journal: the journal every run opened in the context uses.
        options: run options that override the caller's (``live``, ``live_tools``...).
    """

    journal: Journal
    options: Mapping[str, Any] = attrs.field(factory=dict)


_REDIRECT: contextvars.ContextVar[Redirect | None] = contextvars.ContextVar(
    "redrive_redirect", default=None
)


@contextlib.contextmanager
def redirect_runs(journal: Journal, **options: Any) -> Iterator[Redirect]:
    """Within the block, runs opened by :func:`redrive.run` or ``@redrive.durable`` use ``journal``.

    Args:
        journal: the journal they use, whatever journal or URL they name.
        **options: run options forced on them (``live=False`` for replay only,
            ``live_tools=[...]``, ``replay=...``).

    Yields:
        The active :class:`Redirect`.
    """
    redirect = Redirect(journal, dict(options))
    token = _REDIRECT.set(redirect)
    try:
        yield redirect
    finally:
        _REDIRECT.reset(token)


def redirected(journal: Any, options: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Return ``(journal, options)`` as the active redirect makes them (unchanged without one)."""
    redirect = _REDIRECT.get()
    if redirect is None:
        return journal, dict(options)
    return redirect.journal, {**options, **redirect.options}


_LIVE_SEND: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "redrive_live_send", default=False
)


@contextlib.contextmanager
def sending_live() -> Iterator[None]:
    """Mark the block as a recorded step's live request (the network guard lets it through)."""
    token = _LIVE_SEND.set(True)
    try:
        yield
    finally:
        _LIVE_SEND.reset(token)


def sends_live() -> bool:
    """True inside :func:`sending_live`: the request is a live step being recorded."""
    return _LIVE_SEND.get()
