"""Opening the journals a command names, and closing them when it ends."""

from __future__ import annotations

import os
from typing import Any

from ..errors import UnknownRunError
from ..storage import Journal, parse_journal_url
from ._common import EXIT_USAGE, CliError, is_database_error, unreadable

__all__ = [
    "close_opened",
    "is_rdj_file",
    "open_url",
    "opened",
    "source",
]

#: Journals opened by the running command, by journal key (one object per file: a DuckDB
#: file cannot be opened for writing twice in one process); closed when the command ends.
_opened: dict[str, Journal] = {}


def is_rdj_file(target: str) -> bool:
    """Return True when a command's ``RUN`` argument names an existing ``.rdj`` file."""
    return parse_journal_url(target).scheme == "rdj" and os.path.exists(target)


def open_url(url: str, **options: Any) -> Journal:
    """Open the journal at ``url`` with :func:`redrive.open_journal` and ``options``.

    Args:
        url: a journal URL (a DuckDB file, ``postgresql://...``, an ``.rdj`` file...).
        **options: passed to the backend (e.g. ``read_only=True`` for DuckDB).

    Returns:
        The journal (the caller closes it).

    Raises:
        JournalCorruptError: the database driver refused to open it (not a journal).
        CliError: the backend's optional dependency is not installed (exit 2; the
            message names the extra to install).
        JournalLockedError, JournalFormatError: as :func:`redrive.open_journal`.
    """
    from ..storage import open_journal

    try:
        return open_journal(url, **options)
    except ImportError as exc:
        raise CliError("ImportError", str(exc), EXIT_USAGE) from None
    except Exception as exc:
        if is_database_error(exc):
            raise unreadable(url, exc) from None
        raise


def opened(url: str, *, must_exist: bool = True) -> Journal:
    """Return the command's journal for ``url``, opening it on first use.

    Args:
        url: the ``--journal`` URL.
        must_exist: refuse a journal file that does not exist yet (True), rather
            than creating it.

    Returns:
        The journal, closed by :func:`close_opened` when the command ends.

    Raises:
        FileNotFoundError: ``must_exist`` and there is no file at the URL's path.
        JournalCorruptError, CliError, JournalLockedError, JournalFormatError: as
            :func:`open_url`.
    """
    parsed = parse_journal_url(url)
    if must_exist and parsed.path is not None and not os.path.exists(parsed.path):
        raise FileNotFoundError(
            f"no journal at {parsed.path}; pass --journal URL (or set REDRIVE_JOURNAL)"
        )
    journal = _opened.get(parsed.key)
    if journal is None or getattr(journal, "closed", False):
        journal = _opened[parsed.key] = open_url(url)
    return journal


def close_opened() -> None:
    """Close every journal the command opened through :func:`opened` or :func:`source`."""
    while _opened:
        _key, journal = _opened.popitem()
        if not getattr(journal, "closed", False):
            journal.close()


def source(target: str, url: str) -> tuple[Journal, str]:
    """Resolve a ``RUN`` argument to ``(journal, run_id)``.

    Args:
        target: an ``.rdj`` file (its run), a run in text form (``.jsonl``), or a
            run id in the journal at ``url``.
        url: the ``--journal`` URL.

    Returns:
        The journal holding the run (closed by :func:`close_opened`) and the run's id.

    Raises:
        UnknownRunError: ``target`` is neither a file nor a run of the journal.
        FileNotFoundError, JournalCorruptError, CliError: as :func:`opened`.
    """
    if is_rdj_file(target):
        exported = opened(target)
        return exported, exported.runs()[0].run_id  # an .rdj file holds one run
    if target.endswith(".jsonl") and os.path.exists(target):  # a run in text form
        from ..storage import MemoryJournal
        from ..storage.rdj import import_text

        text = MemoryJournal(target)
        return text, import_text(target, text).run_id
    journal = opened(url)
    if journal.get_run(target) is None:
        raise UnknownRunError(
            f"no run {target!r} in journal {url} (and no file {target!r}); list runs with "
            "`redrive runs`",
            run_id=target,
        )
    return journal, target
