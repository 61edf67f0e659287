"""What the DuckDB journal's log holds: replaying the log, and what a checkpoint keeps or moves.

The records written to the log and not yet checkpointed into the tables are
held in a :class:`~.memory.MemoryState` (the overlay); these functions read
and change it. Part of :mod:`.duckdb` (see its docstring).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

import attrs

from ..errors import JournalCorruptError, JournalWriteError
from ..frames import Frame
from ._base import Decision, RunRecord, RunStatus
from ._duckdb_store import _CHUNK
from ._framelog import ADVICE as _ADVICE
from ._framelog import FrameLog
from ._logrecord import (
    BadRecord,
    after,
    check_frames,
    damaged_record,
    decision_record,
    frames_record,
    parse_record,
    position,
    record_run,
    run_record,
)
from .memory import MemoryState

#: Run statuses of a run that has ended.
_ENDED: Final = frozenset(s.value for s in RunStatus if s.terminal)
#: Ended runs a checkpoint keeps in the log at most (the newest; older ones move).
KEEP_ENDED_RUNS: Final = 32
#: Seconds after its last write past which an ended run moves into the tables.
KEEP_ENDED_AGE: Final = 3600.0
#: Log size (bytes) past which a checkpoint moves every ended run into the tables.
KEEP_LOG_BYTES: Final = 8 * 1024 * 1024


@attrs.frozen
class _Move:
    """What a background checkpoint moves: the held records of some runs, as they were."""

    rows: dict[str, RunRecord]
    #: frames held per run at the snapshot (the overlay may add more meanwhile)
    counts: dict[str, int]
    frames: list[Frame]
    decisions: dict[tuple[str, str], Decision]

    @classmethod
    def of(cls, held: MemoryState, keep: set[str]) -> _Move | None:
        """The held records of every run not in ``keep`` (None when there are none)."""
        move = cls(
            rows={rid: r for rid, r in held.runs.items() if rid not in keep},
            counts={rid: len(fs) for rid, fs in held.frames.items() if rid not in keep},
            frames=[f for rid, fs in held.frames.items() if rid not in keep for f in fs],
            decisions={k: d for k, d in held.decisions.items() if k[0] not in keep},
        )
        return move if move.rows or move.frames or move.decisions else None


def _row_at(row: RunRecord, last: Frame) -> RunRecord:
    """``row`` as it was right after frame ``last`` was appended (for a rewritten log)."""
    return attrs.evolve(row, next_seq=last.seq + 1, last_chain=last.chain)


@attrs.define
class Damage:
    """The runs a log names that could not be read: each is unreadable, the journal is not.

    Attributes:
        runs: the error each damaged run's reads and writes raise, by run id.
    """

    runs: dict[str, JournalCorruptError] = attrs.field(factory=dict)

    def refuse(self, run_id: str) -> None:
        """Raise the run's JournalCorruptError when it is damaged (a fresh copy each time)."""
        found = self.runs.get(run_id)
        if found is not None:
            raise JournalCorruptError(found.message, **found.to_fields())

    def records(self) -> list[list[Any]]:
        """The ``damaged`` log records that keep these runs damaged across a log rewrite."""
        return [damaged_record(run_id, exc.message) for run_id, exc in sorted(self.runs.items())]


def damaged_run(path: str, run_id: str, what: str, **fields: Any) -> JournalCorruptError:
    """The error of a run whose log records cannot be read (``what`` was found)."""
    return JournalCorruptError(
        f"{what} Run {run_id!r} of journal {path} is damaged: it cannot be read, resumed or "
        "written, so none of its steps can run twice; every other run reads and resumes as "
        f"before. Keep the log ({path}.rdlog) for inspection, then drop the run "
        f"(redrive --journal {path} drop {run_id}) or export what is intact first "
        f"(redrive --journal {path} export {run_id} --intact -o FILE.rdj).",
        run_id=run_id,
        reason=fields.pop("reason", "record"),
        **fields,
    )


def _replay_log(overlay: MemoryState, log: FrameLog, journal: str) -> Damage:
    """Apply every record of the log; return the runs found damaged.

    A malformed record that names its run (a checksummed record written by
    another process or version) makes that run damaged: its later records
    are skipped, and reading or writing it raises. A record that names no
    run, or damage to the log's own structure, could belong to any run, so
    the whole log is refused (JournalCorruptError naming the last good record).
    """
    damage = Damage()
    last: tuple[str | None, int | None] = (None, None)
    try:
        for index, (offset, record) in enumerate(log.entries()):
            run_id = record_run(record)
            if run_id is not None and run_id in damage.runs:
                continue  # nothing after a bad record applies to its run
            try:
                found = _apply(overlay, record)
            except BadRecord as exc:
                where = f"{log.path}: record {index} at byte {offset}"
                if run_id is None:
                    raise JournalCorruptError(
                        f"{where} is not a well-formed journal record: {exc}. "
                        + after(last)
                        + _ADVICE,
                        source=log.path,
                        offset=offset,
                        record_index=index,
                        reason="record",
                        run_id=last[0],
                        last_good_seq=last[1],
                    ) from None
                held = overlay.next_held_seq(run_id)
                damage.runs[run_id] = damaged_run(
                    journal,
                    run_id,
                    f"{where} is not a well-formed record of run {run_id!r}: {exc}.",
                    source=log.path,
                    offset=offset,
                    record_index=index,
                    last_good_seq=None if held is None else held - 1,
                )
                continue
            if found is not None:
                damage.runs[found[0]] = damaged_run(journal, found[0], found[1], reason="damaged")
                continue
            last = position(record)
    except JournalCorruptError as exc:
        if exc.fields.get("reason") == "record" or last == (None, None):
            raise
        fields = exc.to_fields()
        fields.update(run_id=last[0], last_good_seq=last[1])
        raise JournalCorruptError(f"{exc.message} {after(last)}".rstrip(), **fields) from None
    return damage


def _apply(overlay: MemoryState, record: Any) -> tuple[str, str] | None:
    """Apply one log record to the overlay.

    Returns:
        ``(run_id, what was found)`` for a ``damaged`` record, else None.

    Raises:
        BadRecord: the record is not a well-formed journal record (what is
            wrong is the message); nothing was applied.
    """
    parsed = parse_record(record)
    if parsed.damaged is not None:
        return parsed.damaged
    if parsed.decision is not None:
        overlay.put_decision(parsed.decision)
        return None
    assert parsed.row is not None
    _apply_run(overlay, parsed.row, parsed.frames)
    return None


def _apply_run(overlay: MemoryState, row: RunRecord, frames: Sequence[Frame]) -> None:
    """Apply a run row and its new frames to the overlay.

    Raises:
        BadRecord: the frames do not continue the run densely, or the row does
            not match them (its ``next_seq`` and ``last_chain``); nothing was applied.
    """
    if frames:
        check_frames(row, frames, overlay.next_held_seq(row.run_id))
    else:
        held = overlay.frames.get(row.run_id)
        if held and (row.next_seq, row.last_chain) != (held[-1].seq + 1, held[-1].chain):
            raise BadRecord(
                f"run: run {row.run_id!r} row says next_seq {row.next_seq} and last chain "
                f"{row.last_chain} after its frame seq {held[-1].seq} of chain {held[-1].chain}"
            )
    overlay.put_run(row, frames)


def _wholly_held(overlay: MemoryState, run_id: str) -> bool:
    """True when the overlay holds the run from seq 0 on (the tables hold none of it).

    Then its row, frames and decisions are all in the overlay (a checkpoint
    keeps or moves a run's records together, and a run is in the tables
    from its seq 0 once any of it moved).
    """
    held = overlay.frames.get(run_id)
    return bool(held) and held[0].seq == 0  # type: ignore[index]


def _kept_runs(
    held: MemoryState, checkpoint_frames: int, *, ended: bool = True, now: float | None = None
) -> set[str]:
    """The runs whose records a threshold or closing checkpoint keeps in the log.

    Unfinished runs come first, smallest first, while their frames stay within
    half of ``checkpoint_frames`` (past the first too big, every bigger one
    moves). Then, with ``ended``, the ended runs, newest first (by
    ``updated_at``), while the frames kept stay within that same half, at most
    :data:`KEEP_ENDED_RUNS` of them, each ended less than
    :data:`KEEP_ENDED_AGE` seconds before ``now`` (default: the wall clock);
    the first that does not fit and every older one move. So a process that
    replays a run that ended recently reads it from the log without opening
    DuckDB, and the log never holds more than half a threshold of frames.

    Args:
        held: the overlay.
        checkpoint_frames: the journal's threshold (frames).
        ended: False moves every ended run (the log is over :data:`KEEP_LOG_BYTES`).
        now: seconds since the Unix epoch.

    Returns:
        The run ids to keep.
    """
    live = []
    done = []
    for row in held.runs.values():
        count = len(held.frames.get(row.run_id, ()))
        if row.status not in _ENDED:
            live.append((count, row.run_id))
        else:
            done.append((-row.updated_at, row.run_id, count))
    budget = checkpoint_frames // 2
    keep: set[str] = set()
    for count, run_id in sorted(live):
        if count > budget:
            break
        budget -= count
        keep.add(run_id)
    if not ended:
        return keep
    oldest = (time.time() if now is None else now) - KEEP_ENDED_AGE
    for newest, run_id, count in sorted(done)[:KEEP_ENDED_RUNS]:
        if count > budget or -newest < oldest:
            break
        budget -= count
        keep.add(run_id)
    return keep


def _holds_live(held: MemoryState) -> bool:
    """True when the overlay holds the row of a run that has not ended."""
    return any(row.status not in _ENDED for row in held.runs.values())


def _kept_records(held: MemoryState, keep: set[str]) -> list[list[Any]]:
    """Log records that restore exactly the overlay's records of the runs in ``keep``."""
    records: list[list[Any]] = []
    for run_id in sorted(keep):
        row = held.runs[run_id]
        frames = held.frames.get(run_id, [])
        for start in range(0, len(frames), _CHUNK):
            chunk = frames[start : start + _CHUNK]
            # an earlier chunk's row only has to match its frames (_apply checks
            # it); the last record sets the run's current row
            last = chunk[-1]
            step = row if start + _CHUNK >= len(frames) else _row_at(row, last)
            records.append(frames_record(step, chunk))
        if not frames:
            records.append(run_record(row))
    records.extend(decision_record(d) for d in held.decisions.values() if d.run_id in keep)
    return records


def _held_records(held: MemoryState) -> list[list[Any]]:
    """Log records that restore exactly what the overlay holds."""
    records = _kept_records(held, set(held.runs))
    records.extend(decision_record(d) for d in held.decisions.values() if d.run_id not in held.runs)
    return records


def _drop_moved(held: MemoryState, move: _Move) -> None:
    """Forget the overlay's records that ``move`` put into the tables (caller holds the lock).

    A run written to since the snapshot keeps what came after (its newer
    row, its later frames): it is then in the tables up to some seq and in
    the overlay after it, which reads merge.
    """
    for run_id in set(move.rows) | set(move.counts):
        frames = held.frames.get(run_id, [])
        count = move.counts.get(run_id, 0)
        rest = frames[count:]
        held.held -= len(frames) - len(rest)
        if rest:
            held.frames[run_id] = rest
        else:
            held.frames.pop(run_id, None)
        if held.runs.get(run_id) is move.rows.get(run_id) and not rest:
            held.runs.pop(run_id, None)
    for key, decision in move.decisions.items():
        if held.decisions.get(key) is decision:
            del held.decisions[key]


def nothing_moves(held: MemoryState, keep: set[str]) -> bool:
    """True when a closing checkpoint keeping ``keep`` would move nothing into the tables.

    That is when every record held belongs to a run the checkpoint keeps in
    the log (see :func:`_kept_runs`, or damaged): the log already holds
    exactly what it must.
    """
    if held.empty:
        return True
    return (
        keep.issuperset(held.runs)
        and keep.issuperset(held.frames)
        and all(run_id in keep for run_id, _ in held.decisions)
    )


def _move_failed(path: str, exc: Exception) -> JournalWriteError:
    """The error of a closing checkpoint whose bulk move failed (nothing is lost)."""
    log = f"{path}.rdlog"
    return JournalWriteError(
        f"closing DuckDB journal {path}: moving the records of its log into the "
        f"database failed ({type(exc).__name__}: {exc}). Nothing is lost: every "
        f"acknowledged write is durable in {log} (fsynced); reopening the journal reads "
        "it from there and moves it into the database at its next checkpoint. Free "
        "disk space (or fix the I/O error), then reopen the journal; keep "
        f"{log} next to the database file until then.",
        journal=path,
    )


def _close_failed(path: str, closing: Exception) -> JournalWriteError:
    """The error of DuckDB's close failing (every acknowledged write is durable)."""
    return JournalWriteError(
        f"closing DuckDB journal {path} failed ({type(closing).__name__}: "
        f"{closing}); every acknowledged write is durable in the database or in "
        f"{path}.rdlog, which the reopened journal reads and moves into the "
        "database.",
        journal=path,
    )
