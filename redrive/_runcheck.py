"""The whole-run check every reader's verdict rests on, and the import that runs it first.

``verify`` passes a run exactly when every read of it succeeds: ``show``, a
replay, an export and an import read a run through the same checks, so
:func:`check_run` runs them all over the run's frames, in one streamed pass:

- each frame's fields (:func:`~redrive.storage._validate.frame_problem`),
- seq density and the hash chain, each payload's schema, model requests'
  prefix references and outcomes of steps that were opened (the
  :class:`~redrive.replay.StepReader` every replay and ``show`` use),
- the run row (:func:`~redrive.storage._validate.run_problem`) and its
  agreement with the frames (count and last chain).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from .errors import JournalCorruptError
from .frames import Frame
from .replay import StepReader
from .storage import Journal, RunRecord, check_row, frame_problem
from .storage.rdj import RdjJournal, is_text_path, read_text
from .storage.rdj import import_run as _import_run

__all__ = ["check_run", "import_run"]


def check_run(
    record: RunRecord,
    frames: Iterable[Frame],
    *,
    source: str = "",
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Check a whole run as every reader would read it; return its frame count.

    Args:
        record: the run's row.
        frames: its frames in seq order, from seq 0 (streamed: read once).
        source: the journal or file, for messages.
        progress: called as ``progress(frames_done, frames_total)`` every 1,000 frames.

    Returns:
        The number of frames, all good.

    Raises:
        JournalCorruptError: the first problem found (``reason``: ``"row"``,
            ``"frame"``, ``"seq"``, ``"chain"``, ``"payload"``, ``"prefix reference"``,
            ``"dangling outcome"`` or ``"count"``), with ``run_id``, ``seq`` and
            ``last_good_seq``.
    """
    where = f"{source}: " if source else ""
    check_row(record, source or None)
    reader = StepReader(record.run_id)
    for frame in frames:
        problem = frame_problem(frame)
        if problem is not None:
            raise reader.corrupt(frame, "frame", f"has a malformed field: {problem}")
        reader.feed(frame)
        if progress is not None and reader.frames_read % 1000 == 0:
            progress(reader.frames_read, record.next_seq)
    count = reader.frames_read
    last_chain = reader.last_chain
    if count != record.next_seq or last_chain != record.last_chain:
        last_good = count - 1 if count else None
        raise JournalCorruptError(
            f"{where}run {record.run_id!r} has {count} readable frames where its row says "
            f"{record.next_seq} (or its last chain differs); last good seq {last_good}",
            run_id=record.run_id,
            last_good_seq=last_good,
            source=source or None,
            reason="count",
        )
    return count


def import_run(
    path: str | os.PathLike[str],
    journal: Journal,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> RunRecord:
    """Copy the run in the ``.rdj`` (or ``.jsonl``) file ``path`` into ``journal``, checked first.

    The file is checked as ``verify`` checks it (:func:`check_run`) before
    anything is written, so an import never brings in a run that a reader
    would refuse; then :func:`redrive.storage.rdj.import_run` copies it.

    Args:
        path: the file.
        journal: a writable journal.
        progress: as :func:`redrive.storage.rdj.import_run`.

    Returns:
        The run's row as imported.

    Raises:
        JournalCorruptError: the file fails a check (nothing was written).
        JournalFormatError, AppendConflictError: as
            :func:`redrive.storage.rdj.import_run`.
    """
    name = os.fspath(path)
    if is_text_path(name):
        record, frames = read_text(name)
        check_run(record, frames, source=name)
    else:
        source = RdjJournal(name, verify=False)  # frames() checks every record
        check_run(source.header.run, source.frames(source.run_id), source=name)
    return _import_run(path, journal, progress=progress)
