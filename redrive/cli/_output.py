"""Where a command writes: a rich table in a terminal, plain text when piped, JSON on request."""

from __future__ import annotations

import datetime as _dt
import json
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..storage import RunRecord

__all__ = ["Out", "age", "clip", "plain", "run_row"]


def plain(value: Any) -> Any:
    """Return decoded payload values as JSON-able data.

    Bytes become ``{"$bytes": hex}``, NaN becomes None, dates, times and UUIDs
    their ``str()``, tuples lists, map keys strings; anything else unknown its
    ``str()``.
    """
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, _dt.datetime | _dt.date | _dt.time | uuid.UUID):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def clip(value: Any, width: int = 100) -> str:
    """Return ``value`` on one line of at most ``width`` characters, for a line or a table cell.

    Args:
        value: a string (shown as it is) or decoded payload data (shown as compact
            JSON, through :func:`plain`).
        width: the most characters returned; longer text is cut to end in ``...``.

    Returns:
        The text, its runs of whitespace (newlines included) collapsed to one space.
    """
    text = value if isinstance(value, str) else json.dumps(plain(value), ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


class Out:
    """Where a command writes: rich in a terminal, plain when piped, JSON on request.

    Args:
        as_json: True when the command was given ``--json``: it then writes one
            JSON document with :meth:`emit` and nothing else on stdout.
    """

    def __init__(self, as_json: bool) -> None:
        self.json = as_json
        self.tty = sys.stdout.isatty()

    def emit(self, data: Any) -> None:
        """Print ``data`` as one JSON document (keys sorted, values through :func:`plain`)."""
        print(json.dumps(plain(data), indent=2, sort_keys=True))

    def line(self, text: str, style: str = "") -> None:
        """Print one line (or block) of text, in ``style`` on a terminal."""
        if self.tty:
            from rich.console import Console

            Console(highlight=False).print(text, style=style or None, markup=False)
        else:
            print(text)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Print a table: rich on a terminal, else a header line and tab-separated rows."""
        if self.tty:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=title)
            for column in columns:
                table.add_column(column)
            for row in rows:
                table.add_row(*("" if v is None else str(v) for v in row))
            Console().print(table)
            return
        print("\t".join(columns))
        for row in rows:
            print("\t".join("" if v is None else str(v).replace("\t", " ") for v in row))

    @contextmanager
    def progress(self, what: str, total: int | None) -> Iterator[Callable[[int, int], None]]:
        """Yield ``update(done, total)``; draws a bar on a terminal's stderr only."""
        if self.json or not sys.stderr.isatty():
            yield lambda done, total: None
            return
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(what, total=total)

            def update(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            yield update


def age(seconds: float) -> str:
    """Return a duration in seconds as a short age: ``"42s"``, ``"5m"``, ``"3h"``, ``"2d"``."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def run_row(record: RunRecord) -> dict[str, Any]:
    """Return a run's index row as the dict the ``--json`` output shows (``frames`` = next seq)."""
    return {
        "run_id": record.run_id,
        "status": record.status,
        "frames": record.next_seq,
        "entrypoint": record.entrypoint,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "error": record.error,
        "lease_owner": record.lease_owner,
        "lease_expires": record.lease_expires,
    }
