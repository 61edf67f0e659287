"""The errors of a journal itself: damaged, of another format, locked, failing to write.

Part of :mod:`redrive.errors` (import them from there); kept apart because they
speak of the store, not of a run's steps.
"""

from __future__ import annotations

from ._errorbase import ReplayError, _fields

__all__ = ["JournalCorruptError", "JournalFormatError", "JournalLockedError", "JournalWriteError"]


@_fields
class JournalCorruptError(ReplayError):
    """A journal failed an integrity check: bad bytes, chain or order.

    ``run_id`` and ``seq`` name the bad frame, when known.

    Attributes:
        last_good_seq: the last frame that passed its checks (None when not
            even the first frame could be read).
        source: the file or table read.
        reason: a short word naming the failed check (``"chain"``, ``"seq"``,
            ``"checksum"``, ``"truncated"``, ``"magic"``, ``"decode"``...).
        offset: the byte offset of the bad record in ``source``.
        record_index: the 0-based index of the bad record in a journal log.
        next_record_offset: the byte offset of the record after it.

    What to do: ``redrive verify``; save what is intact (``export RUN --intact``), then
    ``redrive drop RUN``.
    """

    last_good_seq: int | None = None
    source: str | None = None
    reason: str | None = None
    offset: int | None = None
    record_index: int | None = None
    next_record_offset: int | None = None


@_fields
class JournalFormatError(ReplayError):
    """A journal was written by a format version this redrive cannot read.

    Attributes:
        found: the journal's format version (as stored, when not a number).
        expected: the version this redrive writes.
        supported: the newest version this redrive reads.
        too: ``"new"`` or ``"old"``: which side of ``expected`` ``found`` is.
        source: the file read.
        path: a file that is not a journal of this format at all.

    What to do: a newer file: upgrade redrive; ``path`` set: the file is no journal.
    """

    found: int | str | None = None
    expected: int | None = None
    supported: int | None = None
    too: str | None = None
    source: str | None = None
    path: str | None = None


@_fields
class JournalLockedError(ReplayError):
    """A DuckDB journal file is open for writing in another process.

    Attributes:
        path: the journal file.

    What to do: stop the other process or work from inside it; several processes need Postgres.
    """

    path: str | None = None


@_fields
class JournalWriteError(ReplayError):
    """A journal write failed for a reason outside redrive.

    Disk full, I/O error, lost database connection: the underlying error is
    its ``__cause__``.

    The run stays resumable: nothing from ``seq`` (the first seq of the write)
    on was acknowledged, so a tool whose claim failed did not run. (With a
    lost connection the write may still have committed; a resume then finds
    that claim in flight and applies the in-flight rules, which fail closed.)

    Attributes:
        journal: the journal's URL.
        frames: how many frames the write held.

    What to do: fix the cause (disk space, connection), then resume the run.
    """

    journal: str | None = None
    frames: int | None = None
