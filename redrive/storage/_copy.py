"""Copying a run between journals: the one run copy (fork, import, check, the pytest plugin)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._runid import check_run_id
from ..errors import AppendConflictError, UnknownRunError
from ..frames import GENESIS, ChainCheck, Frame, Kind, make_frame
from ._base import IMPORT_OWNER, Journal, RunRecord, RunStatus, RunUpdate

if TYPE_CHECKING:
    from .memory import MemoryJournal

__all__ = ["IMPORT_OWNER", "copy_run", "load_checked"]

#: Frames per append while copying.
BATCH = 1000
#: How long an import's lease lasts: until the import ends (it is released then).
_IMPORT_LEASE = 100 * 365 * 24 * 3600.0


def copy_run(
    src: Journal,
    run_id: str,
    dst: Journal,
    *,
    upto: int | None = None,
    new_id: str | None = None,
    reopen: bool = False,
    start_extra: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    all_or_nothing: bool = False,
) -> RunRecord:
    """Copy run ``run_id``'s frames and run row from ``src`` into ``dst``.

    The source frames are checked (seq and chain) as they are read, and
    copied in appends of 1,000 frames, streamed. A whole copy keeps the run's
    status, output and error; a prefix, or a copy with ``reopen``, is left
    ``running`` (resumable). Payload bytes are copied as they are (prefix
    deltas of model requests included). A lease is never copied.

    Args:
        src: holds the run.
        run_id: the run to copy.
        dst: receives the copy (may be ``src`` itself with ``new_id``).
        upto: copy only the frames before this seq (``1`` copies only
            ``run_start``); None copies them all.
        new_id: the copy's run id; its frames are re-chained under it and its
            timestamps are now. None keeps the id and the timestamps.
        reopen: leave out a ``run_end`` frame, so the copy is ``running``.
        start_extra: keys added to the ``run_start`` payload (re-chains the copy).
        progress: called as ``progress(frames_done, frames_total)`` after each append.
        all_or_nothing: hold the copy under a lease of :data:`IMPORT_OWNER`
            until its last frame is written, so a copy killed half-way is
            never resumed, swept or listed as interrupted as if it were a run,
            and the next copy with this flag deletes it and starts over
            (what :func:`~redrive.storage.rdj.import_run` uses).

    Returns:
        The copy's run row in ``dst``.

    Raises:
        UnknownRunError: no run ``run_id`` in ``src``.
        ValueError: ``upto`` below 1, or the copy's run id breaks the run-id rule
            (NUL, a lone surrogate, too long: see :meth:`Journal.create_run`);
            nothing is written.
        JournalCorruptError: a source frame fails its seq or chain check, or
            the source has fewer frames than its run row says.
        AppendConflictError: ``dst`` already holds a different run with the
            copy's id (an identical one is returned as it is).
    """
    record = src.get_run(run_id)
    if record is None:
        raise UnknownRunError(
            f"cannot copy run {run_id!r}: it is not in journal {src.url}; check the run id",
            run_id=run_id,
        )
    if upto is not None and upto < 1:
        raise ValueError(f"cannot copy run {run_id!r} up to seq {upto}: copy at least seq 0")
    total = record.next_seq if upto is None else min(upto, record.next_seq)
    target = check_run_id(run_id if new_id is None else new_id, where="the copy's run id")
    rechain = new_id is not None or bool(start_extra)
    whole = total == record.next_seq and not reopen
    existing = dst.get_run(target)
    if existing is not None and all_or_nothing and existing.lease_owner == IMPORT_OWNER:
        if whole and not rechain and existing.last_chain == record.last_chain:
            dst.release_lease(target, IMPORT_OWNER, existing.lease_epoch)  # killed at the end
            return dst.get_run(target) or existing
        dst.release_lease(target, IMPORT_OWNER, existing.lease_epoch)  # a killed copy:
        dst.delete_run(target, expected_seq=existing.next_seq)  # start over
        existing = dst.get_run(target)
    if existing is not None:
        if whole and not rechain and existing.last_chain == record.last_chain:
            return existing
        raise AppendConflictError(
            f"cannot copy run {run_id!r} into journal {dst.url}: it already holds a run "
            f"{target!r} ({existing.next_seq} frames) that differs from the copy; copy into "
            "another journal or under a new id.",
            run_id=target,
            seq=existing.next_seq,
            found=total,
        )
    frames = _source(src, record, total, reopen)
    if rechain:
        frames = _rechained(frames, target, start_extra or {})
    now = time.time()
    first = next(frames)
    created = RunRecord(
        run_id=target,
        input_fp=record.input_fp,
        entrypoint=record.entrypoint,
        created_at=record.created_at if new_id is None else now,
        updated_at=record.updated_at if new_id is None else now,
    )
    epoch: int | None = None
    if all_or_nothing:
        created = attrs.evolve(
            created, lease_owner=IMPORT_OWNER, lease_epoch=0, lease_expires=now + _IMPORT_LEASE
        )
        epoch = 0
    if not dst.create_run(created, first):
        raise AppendConflictError(
            f"cannot copy run {run_id!r} into journal {dst.url}: a run {target!r} was created "
            "there meanwhile; copy under a new id.",
            run_id=target,
            seq=0,
            found=total,
        )
    final = (
        RunUpdate(status=record.status, output=record.output, error=record.error)
        if whole and record.status != RunStatus.RUNNING.value
        else None
    )
    if whole and new_id is None:  # the run's own time, not the copy's (see RunUpdate)
        final = attrs.evolve(final or RunUpdate(), updated_at=record.updated_at)
    done = 1
    last_at = first.at
    batch: list[Frame] = []
    for frame in frames:
        last_at = frame.at
        batch.append(frame)
        if len(batch) >= BATCH:
            dst.append(target, batch, expected_seq=done, epoch=epoch)
            done += len(batch)
            batch = []
            if progress is not None:
                progress(done, total)
    if final is not None and final.updated_at is not None and final.updated_at <= 0:
        # a settled recording keeps no time (redrive._plugin_settle): its last frame's, or now
        final = attrs.evolve(final, updated_at=last_at if last_at > 0 else None)
    if batch or final is not None:
        dst.append(target, batch, expected_seq=done, update=final, epoch=epoch)
        done += len(batch)
    if epoch is not None:
        dst.release_lease(target, IMPORT_OWNER, epoch)
    if progress is not None:
        progress(done, total)
    copied = dst.get_run(target)
    assert copied is not None
    return copied


def _source(src: Journal, record: RunRecord, total: int, reopen: bool) -> Iterator[Frame]:
    """The run's first ``total`` frames, checked (a ``run_end`` dropped when ``reopen``)."""
    check = ChainCheck(record.run_id, source=src.url, advice="Nothing was copied after it.")
    for frame in src.frames(record.run_id):
        if frame.seq >= total:
            return
        check.check(frame)
        if reopen and frame.kind == Kind.RUN_END.value:
            return
        yield frame
    if check.next_seq < total:
        raise check.error(
            check.next_seq, "truncated", f"is missing: the run row says {record.next_seq} frames"
        )


def _rechained(frames: Iterator[Frame], run_id: str, extra: Mapping[str, Any]) -> Iterator[Frame]:
    """``frames`` under ``run_id``, chained anew (``extra`` merged into ``run_start``)."""
    prev = GENESIS
    for frame in frames:
        if frame.seq == 0 and extra:
            start = frame.data()
            new = make_frame(
                run_id=run_id,
                seq=0,
                kind=frame.kind,
                name=frame.name,
                key=frame.key,
                payload={**start, **extra} if isinstance(start, dict) else start,
                prev_chain=prev,
                at=frame.at,
            )
        else:  # the payload bytes are kept as they are (prefix deltas included)
            moved = attrs.evolve(frame, run_id=run_id, epoch=0)
            new = attrs.evolve(moved, chain=moved.expected_chain(prev))
        prev = new.chain
        yield new


def load_checked(record: RunRecord, frames: Sequence[Frame], dst: MemoryJournal) -> RunRecord:
    """Put a whole run whose frames were already checked into a memory journal.

    The same row and frames :func:`copy_run` would make, without checking them again.

    What the pytest plugin and ``redrive check`` use for a run read from an
    ``.rdj`` file: :class:`~.rdj.RdjJournal` checks every record, field, seq
    and the chain on open, so a second and third check of the same frames
    (the copy's, then the journal's append) would only cost time.

    Args:
        record: the run's row as read (an ``.rdj`` header's).
        frames: every frame of the run, seq 0 to ``record.next_seq - 1``, checked.
        dst: an empty-for-this-run memory journal.

    Returns:
        The run's row in ``dst``.

    Raises:
        AppendConflictError: ``dst`` already holds a run with this id.
        ValueError: ``frames`` are not the run's whole, dense list (a caller's mistake).
    """
    if len(frames) != record.next_seq or (frames and frames[-1].chain != record.last_chain):
        raise ValueError(
            f"run {record.run_id!r}: load_checked takes the run's {record.next_seq} frames "
            f"ending at its last chain, got {len(frames)}; use copy_run"
        )
    updated = record.updated_at
    if updated <= 0:  # a settled recording keeps no time (as copy_run: its last frame's, or now)
        last_at = frames[-1].at if frames else 0.0
        updated = last_at if last_at > 0 else time.time()
    running = record.status == RunStatus.RUNNING.value
    row = RunRecord(
        run_id=record.run_id,
        input_fp=record.input_fp,
        entrypoint=record.entrypoint,
        created_at=record.created_at,
        updated_at=updated,
        next_seq=record.next_seq,
        last_chain=record.last_chain,
    )
    if not running:
        row = attrs.evolve(row, status=record.status, output=record.output, error=record.error)
    if not dst._adopt(row, frames):
        raise AppendConflictError(
            f"cannot load run {record.run_id!r} into journal {dst.url}: it already holds a run "
            "with this id; load into another journal.",
            run_id=record.run_id,
            seq=0,
            found=record.next_seq,
        )
    return row
