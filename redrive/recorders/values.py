"""Recorded values: ``redrive.now()``, ``uuid4()``, ``random()``.

Inside a run, the first execution records the value and every replay returns
it. Values are matched by name and *label* (default: the calling function's
qualified name) within the current turn, in call order. So:

* removing or adding a ``now()`` call in another function does not shift the
  values other call sites get;
* in strict replay, a call site that asks for more values than were recorded
  (or fewer) at a point where the journal has another step raises
  ``DivergenceError``; with ``ReplayPolicy(value="lenient")`` an extra call
  gets a fresh value (recorded) and a missing one is simply not consumed.

Outside a run they are the plain stdlib calls.
"""

from __future__ import annotations

import datetime as _dt
import random as _random
import sys
import uuid as _uuid
from typing import Any

from ..replay import join_run

__all__ = ["now", "random", "uuid4"]


def _label(label: str | None) -> str:
    if label is not None:
        return label
    frame = sys._getframe(2)
    return frame.f_code.co_qualname


def _value(name: str, label: str, make: Any) -> Any:
    run = join_run("value", name)
    if run is None:
        return make()
    return run.value_step(name, label, make)


def now(label: str | None = None) -> _dt.datetime:
    """Return the current time as an aware UTC datetime, recorded inside a run.

    Args:
        label: names the call site for matching (default: the caller's qualname).
    """
    return _value("now", _label(label), lambda: _dt.datetime.now(_dt.UTC))  # type: ignore[no-any-return]


def uuid4(label: str | None = None) -> _uuid.UUID:
    """Return a random UUID (version 4), recorded inside a run."""
    return _value("uuid4", _label(label), _uuid.uuid4)  # type: ignore[no-any-return]


def random(label: str | None = None) -> float:
    """Return a random float in [0.0, 1.0), recorded inside a run."""
    return _value("random", _label(label), _random.random)  # type: ignore[no-any-return]
