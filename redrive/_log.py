"""Run lifecycle events on the standard :mod:`logging` module, under the ``redrive`` logger.

Services see redrive's events where they see everything else. Each record
carries structured fields in ``extra=`` (read them as attributes of the
``LogRecord``): ``redrive_event`` (``"start"``, ``"resume"``, ``"finish"``,
``"interrupted"``, ``"blocked"``, ``"divergence"``, ``"lease_lost"``,
``"reasked"``, ``"recover"``...), ``run_id``, and the event's own fields, each
prefixed ``redrive_`` (``redrive_replayed``, ``redrive_live``, ``redrive_seq``,
``redrive_status``...). The message and every text field pass the default
scrubber (:mod:`redrive._scrub`): a secret in an error text is masked.

Nothing is configured here beyond a :class:`logging.NullHandler` (the logging
HOWTO's advice for libraries: an application that configures no logging gets no
output from redrive, not Python's last-resort handler on stderr); records
propagate to the handlers an application attaches to ``logging.getLogger("redrive")``
or to the root logger (``logging.basicConfig(level=logging.INFO)`` shows them all).
"""

from __future__ import annotations

import logging
from typing import Any

from ._scrub import Scrubber

__all__ = ["LOGGER_NAME", "log_event", "logger"]

#: The logger redrive's lifecycle events go to.
LOGGER_NAME = "redrive"
logger = logging.getLogger(LOGGER_NAME)
logger.addHandler(logging.NullHandler())
_SCRUB = Scrubber()


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _SCRUB.text(value)
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in _SCRUB.value(dict(value)).items()}
    return value


def log_event(
    event: str, run_id: str | None, message: str, *, level: int = logging.INFO, **fields: Any
) -> None:
    """Log one lifecycle event of a run (no cost when the level is disabled).

    Args:
        event: the event's name (``redrive_event`` on the record).
        run_id: the run it is about, or None (a recoverer's summary).
        message: one human line (scrubbed).
        level: a :mod:`logging` level (INFO by default; WARNING for blocked,
            divergence and lease lost; ERROR for a failed run).
        **fields: structured fields, each set on the record as ``redrive_<name>``
            (text scrubbed).
    """
    if not logger.isEnabledFor(level):
        return
    extra: dict[str, Any] = {"redrive_event": event, "run_id": run_id}
    for name, value in fields.items():
        extra[f"redrive_{name}"] = _clean(value)
    logger.log(level, _SCRUB.text(message) or "", extra=extra)
