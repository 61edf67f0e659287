"""Where a command writes: a rich table in a terminal, plain text when piped, JSON on request."""

from __future__ import annotations

import datetime as _dt
import json
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..storage import RunRecord

__all__ = ["Out", "age", "block", "clip", "escaped", "plain", "run_row", "shown"]

#: Characters a terminal or a line-oriented reader would act on rather than show: C0 and C1
#: controls (newline, carriage return, ESC...), DEL, line/paragraph separators, and the
#: bidirectional overrides and isolates that reorder what is displayed ("Trojan Source",
#: CVE-2021-42574).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_ESCAPABLE = re.compile("\\\\|" + _CONTROLS.pattern)


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escaped(text: str) -> str:
    """Return ``text`` with backslashes and control characters backslash-escaped.

    The "linear TSV" convention (also PostgreSQL's ``COPY ... TEXT`` format): ``\\`` becomes
    ``\\\\``, tab ``\\t``, newline ``\\n``, carriage return ``\\r``, and any other
    control character (C0, DEL, C1, U+2028/U+2029, bidi overrides) ``\\xHH`` or
    ``\\uHHHH``. The result holds no tab, no line break and nothing a terminal
    interprets, so a value prints as one cell of one row; the escaping is reversible.

    Args:
        text: any string (a run id, a tool argument, a database value...).

    Returns:
        The escaped string (``text`` itself when nothing needed escaping).
    """
    return _ESCAPABLE.sub(_escape_one, text) if _ESCAPABLE.search(text) else text


def shown(value: Any) -> str:
    """Return ``value`` as text to put inside a printed line: :func:`escaped` ``str(value)``."""
    return escaped("" if value is None else str(value))


def block(text: str) -> str:
    """Return ``text`` with control characters escaped (:func:`escaped`), line breaks kept."""
    return "\n".join(
        _CONTROLS.sub(_escape_one, line) if _CONTROLS.search(line) else line
        for line in text.split("\n")
    )


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
        """Print one line (or block) of text, in ``style`` on a terminal.

        The text is data, never markup: rich markup (``[/]``, ``[bold]``) prints as
        it is written, and control characters other than line breaks are escaped
        (:func:`escaped`); a caller that puts a value into the text passes it
        through :func:`shown` so that its own line breaks are escaped too.
        """
        text = block(text)
        if self.tty:
            from rich.console import Console
            from rich.text import Text

            Console(highlight=False).print(Text(text, style=style or ""))
        else:
            print(text)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Print a table: rich on a terminal, else a header line and tab-separated rows.

        Every title, header and cell is data, never markup (rich ``Text`` objects),
        and escaped with :func:`escaped`: on a terminal nothing in a value can style
        or break the table, and piped, each row is one line of exactly
        ``len(columns)`` tab-separated fields whatever the values hold (a newline
        or tab in a run id cannot fake a row or a column).
        """
        if self.tty:
            from rich.console import Console
            from rich.table import Table
            from rich.text import Text

            table = Table(title=Text(shown(title)))
            for column in columns:
                table.add_column(Text(shown(column)))
            for row in rows:
                table.add_row(*(Text(shown(v)) for v in row))
            Console(highlight=False).print(table)
            return
        print("\t".join(shown(c) for c in columns))
        for row in rows:
            print("\t".join(shown(v) for v in row))

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
