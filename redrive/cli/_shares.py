"""What ``export`` and ``view`` share: refuse to write a run that holds a secret.

Thin over :mod:`redrive._sharecheck` (the journal writer's detector).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import JournalCorruptError
from ..frames import Frame
from ..storage import Journal, frame_problem
from ._common import EXIT_DATA, CliError
from ._damaged import _intact

__all__ = ["ALLOW_HELP", "add_allow_secrets", "refuse_secrets"]

#: The ``--allow-secrets`` help text (what it does, and when it is safe).
ALLOW_HELP = (
    "write the run even when the journal writer's secret detector finds credential fields or "
    "secret-looking text in it (by default the command refuses and names the run, seq and "
    "path); only for a reader who may see those values"
)


def add_allow_secrets(parser: argparse.ArgumentParser) -> None:
    """Add ``--allow-secrets`` to a command that writes runs for someone else to read."""
    parser.add_argument("--allow-secrets", action="store_true", help=ALLOW_HELP)


def _readable(frames: Iterator[Frame]) -> Iterator[Frame]:
    """``frames`` up to the first that fails its checks.

    What ``export --intact`` writes of a damaged run; a plain export of one
    fails with its own error after this scan.
    """
    while True:
        try:
            frame = next(frames)
        except (StopIteration, JournalCorruptError):
            return
        if frame_problem(frame) is not None:
            return
        yield frame


def refuse_secrets(journal: Journal, run_id: str, what: str, *, allowed: bool) -> None:
    """Raise unless run ``run_id`` holds no secret (or ``allowed``: the user said so).

    Args:
        journal: holds the run.
        run_id: the run.
        what: the action, for the message (``"export"``, ``"write the page of"``).
        allowed: ``--allow-secrets`` was given: nothing is checked.

    Raises:
        CliError: ``SecretsFound`` (exit 65) naming the run, each finding's seq and path.
    """
    if allowed:
        return
    import msgpack

    from .._sharecheck import find_secrets, refusal

    try:
        record, frames = _intact(journal, run_id)
    except JournalCorruptError:  # the command itself says what is damaged
        return
    data: dict[str, Any] = {}
    if record is not None:
        if isinstance(record.output, bytes):
            with contextlib.suppress(Exception):  # a damaged row: verify reports it
                data["output"] = msgpack.unpackb(record.output, raw=False, strict_map_key=False)
        data["error"] = record.error
    found = find_secrets(run_id, _readable(iter(frames)), data)
    if found:
        raise CliError("SecretsFound", refusal(found, what), EXIT_DATA)
