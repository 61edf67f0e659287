"""Opening a run: start it, or resume it from its journal, and catch up after waiting.

A worker that waited (for a lease, for another worker's holder) re-reads the
run, which may have moved meanwhile.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from .._advice import after_end_advice
from ..errors import AppendConflictError, RunInputMismatchError, TerminalRunError
from ..frames import FORMAT_VERSION, Kind, fingerprint, make_frame
from ..storage import RunRecord, RunStatus, RunUpdate
from ._cursor import CAUSAL_TURNS, Cursor
from ._faces import Wait
from ._fingerprint import start_fingerprint
from ._state import _UNSET, RunState, _take_until, _version

__all__ = ["Opening"]


class Opening(RunState):
    """The start, resume and catch-up part of a Run."""

    def _stored_input(self) -> Any:
        """The run's input as journaled: canonical, with ``redact`` paths replaced."""
        if self._input is _UNSET:
            return None
        try:
            return self._prepare(self._input, "input")
        except TypeError as exc:
            raise TypeError(
                f"run {self.run_id!r}: the run's input cannot be journaled: {exc}"
            ) from None

    def _start_new(self) -> RunRecord | None:
        inp = self._stored_input()
        input_fp = fingerprint(inp)
        payload: dict[str, Any] = {
            "input": inp,
            "input_fp": input_fp,
            "entrypoint": self.entrypoint,
            # what shaped the run (redrive.run_fingerprint reads it with the steps' models)
            "fingerprint": start_fingerprint(self.entrypoint, self.app_version, _version()),
            "flags": {
                "format": FORMAT_VERSION,
                "redrive": _version(),
                "model_commit": self.model_commit,
                # model and tool steps record where they were issued (Cursor.frontier)
                "turns": CAUSAL_TURNS,
            },
        }
        try:
            first = make_frame(
                run_id=self.run_id,
                seq=0,
                kind=Kind.RUN_START,
                name="run",
                payload=payload,
                prev_chain="0" * 32,
            )
        except TypeError as exc:
            raise TypeError(
                f"run {self.run_id!r}: the run's input cannot be journaled: {exc}"
            ) from None
        now = time.time()
        record = RunRecord(
            run_id=self.run_id,
            input_fp=input_fp,
            entrypoint=self.entrypoint,
            created_at=now,
            updated_at=now,
        )
        if self.journal.create_run(record, first):
            self._writer.restart_at(1, first.chain)
            self._cursor = None
            return None
        return self.journal.get_run(self.run_id)  # lost a creation race: resume it

    def _resume(self, record: RunRecord) -> None:
        self.resumed = True
        if self._input is not _UNSET and fingerprint(self._stored_input()) != record.input_fp:
            start = next(iter(self.journal.frames(self.run_id)), None)
            recorded = start.data().get("input") if start is not None else None
            from ._diff import diff_values, format_diff

            diff = diff_values(recorded, self._stored_input())
            raise RunInputMismatchError(
                f"run {self.run_id!r} was started with another input; resuming it with this "
                "one would replay answers to a different question.\n"
                f"  differences (recorded -> given):\n{format_diff(diff)}\n"
                "What to do: pass the original input, or use a new run_id for the new input.",
                run_id=self.run_id,
                expected=recorded,
                found=self._input,
                diff=diff,
            )
        self.status = record.status
        status = RunStatus(record.status)
        if status is RunStatus.SUCCEEDED:
            self._finished_record = record
        elif status.terminal and self.live:
            raise TerminalRunError(
                f"run {self.run_id!r} already ended with status {record.status}"
                + (f" ({record.error})" if record.error else "")
                + "; it cannot execute again. "
                + after_end_advice(self.run_id),
                run_id=self.run_id,
                status=record.status,
            )
        limit = record.next_seq
        frames = (f for f in self.journal.frames(self.run_id) if f.seq < limit)
        self._cursor = Cursor(
            self.run_id, _take_until(frames, limit), self.policy, source=self.journal.url
        )
        self._writer.restart_at(record.next_seq, record.last_chain)
        self._resumed_at = record.next_seq
        if record.status == RunStatus.SUSPENDED.value and self.live:
            self.status = RunStatus.RUNNING.value
            # running again: a crash from here on leaves it among interrupted_runs()
            with contextlib.suppress(AppendConflictError):
                self.journal.append(
                    self.run_id,
                    [],
                    expected_seq=record.next_seq,
                    update=RunUpdate(status=RunStatus.RUNNING.value),
                )

    def _catch_up(self, record: RunRecord) -> None:
        """Re-read the run when another worker appended while this one waited to enter."""
        if record.next_seq != self._writer.next_seq:
            self._cursor = None
            self._finished_record = None
            self._resume(record)

    def _wait_for_lease_holder(self) -> Wait[None]:
        """A worker without a lease: wait while another holds it, then re-read the run.

        A procedure with waits (:mod:`._faces`).

        Raises:
            RunBusyError: see :meth:`LeaseKeeper.wait_for_holder`.
        """
        record = yield from self._lease.wait_for_holder()
        if record is not None:
            self._catch_up(record)

    def _take_lease(self) -> Wait[None]:
        """Take the run's lease, re-read the run, and keep the lease renewed.

        A procedure with waits (:mod:`._faces`).

        Raises:
            RunBusyError: see :meth:`LeaseKeeper.take`.
        """
        record = yield from self._lease.take()
        try:
            self._catch_up(record)
        except BaseException:
            # entering fails (ended elsewhere, input mismatch...): do not sit on the lease
            self._lease.release()
            raise
        self._lease.start_renewing()
