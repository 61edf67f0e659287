"""A memory journal that puts every frame offered to it through the journal's full check.

The journal's own check (``storage._checks.check_append``) may take a frame the writer
built as checked (``storage._validate.passed_as_built``: the schema tested on the tree
the payload was packed from). :class:`CheckedJournal` checks a fresh copy of each frame
(a new object: no memo applies) with :func:`redrive.storage._validate.frame_problem`,
which decodes the payload's bytes and checks their schema, before the append goes on;
a refusal is kept in :attr:`CheckedJournal.refused` (and the append then fails as it
would have). Used by ``tests/unit/test_frames_written.py``: no frame the engine writes
may be one the journal refuses (a refusal after a paid model call or a tool body is a
``JournalWriteError`` the loop cannot undo).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from redrive.frames import Frame
from redrive.storage import MemoryJournal
from redrive.storage._validate import frame_problem


class CheckedJournal(MemoryJournal):
    """:class:`MemoryJournal` that keeps ``(seq, kind, name, problem)`` of each frame refused."""

    def __init__(self, url: str = ":memory:") -> None:
        super().__init__(url)
        self.refused: list[tuple[int, str, str, str]] = []
        self.checked = 0

    def _check(self, frames: Sequence[Frame]) -> None:
        for frame in frames:
            problem = frame_problem(attrs.evolve(frame))  # a copy: checked in full
            self.checked += 1
            if problem is not None:
                self.refused.append((frame.seq, frame.kind, frame.name, problem))

    def create_run(self, record: Any, first: Frame) -> bool:
        self._check([first])
        return super().create_run(record, first)

    def append(self, run_id: str, frames: Sequence[Frame], **kwargs: Any) -> None:
        self._check(frames)
        super().append(run_id, frames, **kwargs)
