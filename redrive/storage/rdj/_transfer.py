"""Export a run from a journal to an ``.rdj`` file, and import one into a journal."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from ...errors import JournalCorruptError, JournalWriteError, UnknownRunError
from ...frames import ChainCheck, Kind
from .._base import Journal, RunRecord
from .._copy import copy_run
from ._format import (
    BATCH,
    MAX_RECORD,
    RDJ_VERSION,
    TAG_END,
    TAG_FRAME,
    TAG_HEADER,
    header_bytes,
    pack,
    preamble_bytes,
    record_bytes,
)
from ._journal import RdjJournal
from ._temp import export_temp
from ._text import export_text, import_text, is_text_path

__all__ = ["export_run", "import_run"]


def export_run(
    journal: Journal,
    run_id: str,
    path: str | os.PathLike[str],
    *,
    progress: Callable[[int, int], None] | None = None,
    exported_at: float | None = None,
) -> RunRecord:
    """Write run ``run_id`` of ``journal`` to the ``.rdj`` file ``path`` (atomically).

    The frames are streamed (never all in memory) and their chain checked on
    the way; the file appears only once complete (written to a temporary file,
    fsynced, renamed). A run still being written is exported as of the moment
    its row was read.

    Args:
        journal: any :class:`~redrive.storage.Journal`.
        run_id: the run to export.
        path: the file to write (replaced if it exists); a name ending ``.jsonl``
            (``run.rdj.jsonl``) gets the readable text form (:mod:`._text`).
        progress: called as ``progress(frames_done, frames_total)`` now and then.
        exported_at: the header's export time (seconds since the epoch; default
            now): the pytest plugin writes a fixed one, so that exporting the
            same run twice gives the same bytes. The text form has no export time.

    Returns:
        The exported run row.

    Raises:
        UnknownRunError: no such run in ``journal``.
        JournalCorruptError: the run's frames fail their seq or chain check.
    """
    if is_text_path(path):  # the readable JSON Lines form (see ._text)
        return export_text(journal, run_id, path)
    record = journal.get_run(run_id)
    if record is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {journal.url}; list runs with `redrive runs`",
            run_id=run_id,
        )
    target = os.fspath(path)
    total = record.next_seq
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = export_temp(target)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(preamble_bytes(RDJ_VERSION))
            frames = journal.frames(run_id)
            check = ChainCheck(run_id, source=journal.url, advice="The run was not exported.")
            header_written = False
            for frame in frames:
                if frame.seq >= total:
                    break
                check.check(frame)
                if not header_written:
                    flags: dict[str, Any] = {}
                    if frame.kind == Kind.RUN_START.value:
                        start = frame.data()
                        if isinstance(start, dict) and isinstance(start.get("flags"), dict):
                            flags = start["flags"]
                    lease_free = RunRecord(
                        run_id=record.run_id,
                        status=record.status,
                        next_seq=total,
                        last_chain=record.last_chain,
                        input_fp=record.input_fp,
                        entrypoint=record.entrypoint,
                        created_at=record.created_at,
                        updated_at=record.updated_at,
                        output=record.output,
                        error=record.error,
                    )
                    out.write(
                        _record(
                            TAG_HEADER,
                            header_bytes(lease_free, flags, exported_at),
                            run_id,
                            0,
                            "header",
                        )
                    )
                    header_written = True
                out.write(
                    _record(
                        TAG_FRAME,
                        pack(
                            [
                                frame.seq,
                                frame.kind,
                                frame.name,
                                frame.key,
                                frame.payload,
                                frame.chain,
                                float(frame.at),
                                frame.epoch,
                            ]
                        ),
                        run_id,
                        frame.seq,
                        f"frame seq {frame.seq}",
                    )
                )
                count = check.next_seq
                if progress is not None and count % BATCH == 0:
                    progress(count, total)
            count, prev, last_good = check.next_seq, check.prev_chain, check.last_good_seq
            if count != total or prev != record.last_chain:
                raise JournalCorruptError(
                    f"{journal.url}: run {run_id!r} has {count} readable frames where its row "
                    f"says {total}; last good seq {last_good}. The run was not exported.",
                    run_id=run_id,
                    seq=count,
                    last_good_seq=last_good,
                    source=journal.url,
                    reason="truncated",
                )
            out.write(record_bytes(TAG_END, pack({"frames": count, "last_chain": prev})))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if progress is not None:
        progress(total, total)
    return record


def _record(tag: bytes, body: bytes, run_id: str, seq: int, what: str) -> bytes:
    """Return one ``.rdj`` record, refusing a body its reader would refuse.

    Raises:
        JournalWriteError: ``body`` is over :data:`MAX_RECORD` (a value
            journaled before the one size limit existed); no file is written.
    """
    if len(body) > MAX_RECORD:
        raise JournalWriteError(
            f"run {run_id!r} seq {seq}: the {what} is {len(body):,} bytes, over the "
            f"{MAX_RECORD:,}-byte limit of an .rdj record, so no reader would accept the "
            "file; nothing was written. The value was journaled before redrive limited "
            "values (redrive.storage.MAX_VALUE): replay or copy the run from this journal "
            "instead (redrive.storage.copy_run), or re-record it with a smaller value.",
            run_id=run_id,
            seq=seq,
        )
    return record_bytes(tag, body)


def import_run(
    path: str | os.PathLike[str],
    journal: Journal,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> RunRecord:
    """Copy the run in the ``.rdj`` file ``path`` into ``journal``.

    The file is checked completely before anything is written, then copied
    in batches of 1,000 frames (streamed). The run keeps its id, status,
    output and timestamps, so it can be replayed (``live=False``) or, when it
    was exported while ``running``, resumed. Importing the same file twice is
    a no-op. The import is all-or-nothing: until its last frame is written
    the run is held under a lease of
    :data:`~redrive.storage._copy.IMPORT_OWNER` (no worker can resume or
    write it, ``interrupted_runs()`` and the sweeps skip it), and importing
    the file again after a killed import deletes the partial copy and starts
    over.

    Args:
        path: the ``.rdj`` file, or a run in text form (``.jsonl``).
        journal: a writable :class:`~redrive.storage.Journal`.
        progress: called as ``progress(frames_done, frames_total)`` now and then.

    Returns:
        The run's row as imported.

    Raises:
        JournalCorruptError / JournalFormatError: as :class:`RdjJournal`.
        AppendConflictError: ``journal`` already holds a different run with this id.
    """
    if is_text_path(path):  # the readable JSON Lines form (see ._text)
        return import_text(path, journal)
    source = RdjJournal(path)
    return copy_run(source, source.run_id, journal, progress=progress, all_or_nothing=True)
