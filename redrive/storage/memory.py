"""The in-memory journal: the reference implementation of the Journal protocol."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

import attrs

from .._runid import check_run_id
from ..frames import Frame
from ._base import (
    Decision,
    RunIndexOps,
    RunRecord,
    RunUpdate,
    appended,
    check_append,
    check_delete,
    scrubbed_text,
    unknown_run,
)

__all__ = ["LocalJournal", "MemoryJournal", "MemoryState"]


class MemoryState:
    """Runs, frames and decisions held in memory: the memory journal's data.

    The DuckDB journal holds the records not yet checkpointed in one too (its
    overlay), so there a run's frames may be only a suffix of the run. Not
    thread-safe: the owner holds its lock around every call.
    """

    def __init__(self) -> None:
        self.runs: dict[str, RunRecord] = {}
        self.frames: dict[str, list[Frame]] = {}
        self.decisions: dict[tuple[str, str], Decision] = {}
        #: how many frames are held, over all runs
        self.held = 0

    @property
    def empty(self) -> bool:
        """True when nothing is held."""
        return not (self.runs or self.frames or self.decisions)

    def put_run(self, row: RunRecord, frames: Sequence[Frame] = ()) -> None:
        """Set a run's row and add ``frames`` (the next ones of the run) to it."""
        self.runs[row.run_id] = row
        if frames:
            self.frames.setdefault(row.run_id, []).extend(frames)
            self.held += len(frames)

    def next_held_seq(self, run_id: str) -> int | None:
        """The seq after the run's last held frame, or None when none is held."""
        held = self.frames.get(run_id)
        return held[-1].seq + 1 if held else None

    def put_decision(self, decision: Decision) -> Decision:
        """Keep ``decision`` unless one for its run and name is held; return the held one."""
        return self.decisions.setdefault((decision.run_id, decision.name), decision)

    def decision(self, run_id: str, name: str) -> Decision | None:
        """The held decision, or None."""
        return self.decisions.get((run_id, name))

    def page(self, run_id: str, start: int, limit: int | None = None) -> list[Frame]:
        """Up to ``limit`` held frames of a run from seq ``start`` (a copy)."""
        held = self.frames.get(run_id, [])
        offset = max(0, start - (held[0].seq if held else 0))
        return held[offset:] if limit is None else held[offset : offset + limit]

    def select(
        self, status: str | None, limit: int | None, others: Sequence[RunRecord] = ()
    ) -> list[RunRecord]:
        """Runs newest first, the held rows over ``others`` (rows stored elsewhere)."""
        merged = {r.run_id: r for r in others if r.run_id not in self.runs}
        merged.update(self.runs)
        rows = [r for r in merged.values() if status is None or r.status == status]
        rows.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return rows if limit is None else rows[:limit]

    def forget(self, run_id: str) -> None:
        """Forget one run: its row, its frames and its decisions."""
        self.runs.pop(run_id, None)
        self.held -= len(self.frames.pop(run_id, ()))
        for key in [k for k in self.decisions if k[0] == run_id]:
            del self.decisions[key]

    def clear(self) -> None:
        """Forget everything held."""
        self.runs.clear()
        self.frames.clear()
        self.decisions.clear()
        self.held = 0


class LocalJournal(RunIndexOps):
    """Journal methods written once for the journals this process holds (memory, DuckDB).

    A subclass sets ``_lock`` (held around every primitive call) and provides
    the primitives: ``_current(run_id)`` (the run's row, or None),
    ``_commit(row, frames, sync=)`` (make a run's new row and its new frames
    durable and visible), ``_held_decision(run_id, name)`` and
    ``_put_decision(decision)``, plus ``frames`` and ``runs``.
    """

    _lock: threading.Lock | threading.RLock

    def _current(self, run_id: str) -> RunRecord | None:
        raise NotImplementedError

    def _commit(self, row: RunRecord, frames: Sequence[Frame], *, sync: bool) -> None:
        raise NotImplementedError

    def _held_decision(self, run_id: str, name: str) -> Decision | None:
        raise NotImplementedError

    def _put_decision(self, decision: Decision) -> None:
        raise NotImplementedError

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        """See :meth:`redrive.storage.Journal.create_run`."""
        check_run_id(record.run_id)
        check_append(attrs.evolve(record, next_seq=0), [first], 0)
        with self._lock:
            if self._current(record.run_id) is not None:
                return False
            row = attrs.evolve(record, next_seq=1, last_chain=first.chain)
            self._commit(row, [first], sync=True)
            return True

    def get_run(self, run_id: str) -> RunRecord | None:
        """See :meth:`redrive.storage.Journal.get_run`."""
        with self._lock:
            return self._current(run_id)

    def append(
        self,
        run_id: str,
        frames: Sequence[Frame],
        *,
        expected_seq: int,
        update: RunUpdate | None = None,
        epoch: int | None = None,
        sync: bool = True,
    ) -> None:
        """See :meth:`redrive.storage.Journal.append`."""
        with self._lock:
            row = appended(
                self._current(run_id),
                run_id,
                frames,
                expected_seq=expected_seq,
                update=update,
                epoch=epoch,
            )
            self._commit(row, frames, sync=sync)

    def _change_run(self, run_id: str, change: Callable[[RunRecord], RunRecord]) -> RunRecord:
        with self._lock:
            record = self._current(run_id)
            if record is None:
                raise unknown_run(run_id)
            changed = change(record)
            if changed is not record:
                self._commit(changed, [], sync=True)
            return changed

    def decide(
        self, run_id: str, name: str, approved: bool, *, by: str, note: str = ""
    ) -> Decision:
        """See :meth:`redrive.storage.Journal.decide`."""
        by, note = scrubbed_text(by), scrubbed_text(note)
        with self._lock:
            if self._current(run_id) is None:
                raise unknown_run(run_id)
            existing = self._held_decision(run_id, name)
            if existing is not None:
                return existing
            decision = Decision(
                run_id=run_id, name=name, approved=bool(approved), by=by, at=time.time(), note=note
            )
            self._put_decision(decision)
            return decision

    def decision(self, run_id: str, name: str) -> Decision | None:
        """See :meth:`redrive.storage.Journal.decision`."""
        with self._lock:
            return self._held_decision(run_id, name)


class MemoryJournal(LocalJournal):
    """A journal held in this process's memory (``":memory:"``); lost at exit.

    Thread-safe; every operation is atomic under one lock. Used by tests and
    as the reference semantics for the other backends.
    """

    durable = False
    read_only = False

    def __init__(self, url: str = ":memory:") -> None:
        self.url = url
        self._lock = threading.Lock()
        self._state = MemoryState()

    def _current(self, run_id: str) -> RunRecord | None:
        return self._state.runs.get(run_id)

    def _commit(self, row: RunRecord, frames: Sequence[Frame], *, sync: bool) -> None:
        self._state.put_run(row, frames)

    def _held_decision(self, run_id: str, name: str) -> Decision | None:
        return self._state.decision(run_id, name)

    def _put_decision(self, decision: Decision) -> None:
        self._state.put_decision(decision)

    def _adopt(self, row: RunRecord, frames: Sequence[Frame]) -> bool:
        """Hold a new run whose frames were already checked; False when the id is taken.

        For :func:`~._copy.load_checked` only: no field, seq or chain of
        ``frames`` is looked at again (they come from a reader that checked
        them, such as :class:`~.rdj.RdjJournal`).
        """
        with self._lock:
            if self._current(row.run_id) is not None:
                return False
            self._state.put_run(row, frames)
            return True

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """See :meth:`redrive.storage.Journal.frames`."""
        with self._lock:
            snapshot = self._state.page(run_id, start)
        yield from snapshot

    def delete_run(self, run_id: str, *, expected_seq: int) -> bool:
        """See :meth:`redrive.storage.Journal.delete_run`."""
        with self._lock:
            if not check_delete(self._state.runs.get(run_id), expected_seq):
                return False
            self._state.forget(run_id)
            return True

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """See :meth:`redrive.storage.Journal.runs`."""
        with self._lock:
            return self._state.select(status, limit)

    def close(self) -> None:
        """Nothing to release; the data stays readable until garbage-collected."""
