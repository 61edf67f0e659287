"""The in-memory journal: the reference implementation of the Journal protocol."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

import attrs

from ..frames import Frame
from ._base import (
    Decision,
    RunIndexOps,
    RunRecord,
    RunUpdate,
    appended,
    check_append,
    unknown_run,
)

__all__ = ["MemoryJournal"]


class MemoryJournal(RunIndexOps):
    """A journal held in this process's memory (``":memory:"``); lost at exit.

    Thread-safe; every operation is atomic under one lock. Used by tests and
    as the reference semantics for the other backends.
    """

    durable = False
    read_only = False

    def __init__(self, url: str = ":memory:") -> None:
        self.url = url
        self._lock = threading.Lock()
        self._runs: dict[str, RunRecord] = {}
        self._frames: dict[str, list[Frame]] = {}
        self._decisions: dict[tuple[str, str], Decision] = {}

    def create_run(self, record: RunRecord, first: Frame) -> bool:
        """See :meth:`redrive.storage.Journal.create_run`."""
        check_append(attrs.evolve(record, next_seq=0), [first], 0)
        with self._lock:
            if record.run_id in self._runs:
                return False
            self._runs[record.run_id] = attrs.evolve(record, next_seq=1, last_chain=first.chain)
            self._frames[record.run_id] = [first]
            return True

    def get_run(self, run_id: str) -> RunRecord | None:
        """See :meth:`redrive.storage.Journal.get_run`."""
        with self._lock:
            return self._runs.get(run_id)

    def _row(self, run_id: str) -> RunRecord:
        try:
            return self._runs[run_id]
        except KeyError:
            raise unknown_run(run_id) from None

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
                self._runs.get(run_id),
                run_id,
                frames,
                expected_seq=expected_seq,
                update=update,
                epoch=epoch,
            )
            self._frames[run_id].extend(frames)
            self._runs[run_id] = row

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """See :meth:`redrive.storage.Journal.frames`."""
        with self._lock:
            snapshot = list(self._frames.get(run_id, ())[start:])
        yield from snapshot

    def runs(self, *, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """See :meth:`redrive.storage.Journal.runs`."""
        with self._lock:
            rows = [r for r in self._runs.values() if status is None or r.status == status]
        rows.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return rows if limit is None else rows[:limit]

    def _change_run(self, run_id: str, change: Callable[[RunRecord], RunRecord]) -> RunRecord:
        with self._lock:
            record = self._row(run_id)
            changed: RunRecord = change(record)
            self._runs[run_id] = changed
            return changed

    def decide(
        self, run_id: str, name: str, approved: bool, *, by: str, note: str = ""
    ) -> Decision:
        """See :meth:`redrive.storage.Journal.decide`."""
        with self._lock:
            self._row(run_id)
            existing = self._decisions.get((run_id, name))
            if existing is not None:
                return existing
            decision = Decision(
                run_id=run_id, name=name, approved=bool(approved), by=by, at=time.time(), note=note
            )
            self._decisions[(run_id, name)] = decision
            return decision

    def decision(self, run_id: str, name: str) -> Decision | None:
        """See :meth:`redrive.storage.Journal.decision`."""
        with self._lock:
            return self._decisions.get((run_id, name))

    def close(self) -> None:
        """Nothing to release; the data stays readable until garbage-collected."""
