"""Journal URLs: the one parser of the names journals are opened by (pure)."""

from __future__ import annotations

import os
from typing import Literal

import attrs

__all__ = ["JournalURL", "Scheme", "parse_journal_url"]

#: The kinds of journal a URL can name.
Scheme = Literal["memory", "duckdb", "postgres", "rdj"]

_POSTGRES = ("postgresql://", "postgres://")


@attrs.frozen(kw_only=True)
class JournalURL:
    """A parsed journal URL.

    Attributes:
        url: the URL as given.
        scheme: ``"memory"`` (``":memory:"``), ``"postgres"`` (``postgresql://``
            or ``postgres://``), ``"rdj"`` (a path ending in ``.rdj``) or
            ``"duckdb"`` (``duckdb://path`` or any other path).
        path: the file path for ``duckdb`` and ``rdj``; None for ``memory``
            and ``postgres``.
    """

    url: str
    scheme: Scheme
    path: str | None

    @property
    def is_file(self) -> bool:
        """True when the journal is a file on this machine (``duckdb``, ``rdj``)."""
        return self.path is not None

    @property
    def key(self) -> str:
        """The identity of the journal: the real path for files, else the URL.

        Two spellings of one file (relative, absolute, through a symlink,
        with ``duckdb://``) have the same key.
        """
        return self.url if self.path is None else os.path.realpath(self.path)


def parse_journal_url(url: str) -> JournalURL:
    """Parse a journal URL (as :func:`~redrive.storage.open_journal` takes it).

    Args:
        url: ``":memory:"``, ``"postgresql://..."`` / ``"postgres://..."``, a
            path ending in ``.rdj``, ``"duckdb://path"``, or any other path (a
            DuckDB file).

    Returns:
        The :class:`JournalURL`; every string is some journal's URL (a path
        by default), so this never raises.
    """
    if url == ":memory:":
        return JournalURL(url=url, scheme="memory", path=None)
    if url.startswith(_POSTGRES):
        return JournalURL(url=url, scheme="postgres", path=None)
    if url.endswith(".rdj"):
        return JournalURL(url=url, scheme="rdj", path=url)
    return JournalURL(url=url, scheme="duckdb", path=url.removeprefix("duckdb://"))
