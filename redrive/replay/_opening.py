"""Opening a run: start it, or resume it from its journal, and catch up after waiting.

A worker that waited (for a lease, for another worker's holder) re-reads the
run, which may have moved meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any

from .._advice import after_end_advice
from ..errors import AppendConflictError, RunInputMismatchError, TerminalRunError
from ..frames import FORMAT_VERSION, Kind, fingerprint, make_frame
from ..storage import RunRecord, RunStatus, RunUpdate, check_row
from ._config import UNSET, redrive_version
from ._cursor import CAUSAL_TURNS, Cursor
from ._faces import Wait
from ._fingerprint import start_fingerprint
from ._flows import FlowTracker
from ._lease import LeaseKeeper
from ._state import RunState
from ._steps import take_until
from ._usage import RESUMED
from ._writer import JournalWriter

__all__ = ["Opener"]


class Opener:
    """A Run's start, resume and catch-up (after waiting for a lease or another worker).

    Args:
        state: the run's state (its cursor, status and resume point are set here).
        writer: the run's journal writer (positioned after the journal's last frame).
        lease: the run's lease keeper.
        flows: the run's flow tracker (it follows the rule the run was recorded under).
    """

    def __init__(
        self, state: RunState, writer: JournalWriter, lease: LeaseKeeper, flows: FlowTracker
    ) -> None:
        self._state = state
        self._writer = writer
        self._lease = lease
        self._flows = flows

    def stored_input(self) -> Any:
        """The run's input as journaled: canonical, with ``redact`` paths replaced."""
        if self._state.config.input is UNSET:
            return None
        try:
            return self._writer.prepare(self._state.config.input, "input")
        except TypeError as exc:
            raise TypeError(
                f"run {self._state.run_id!r}: the run's input cannot be journaled: {exc}"
            ) from None

    def start_new(self) -> RunRecord | None:
        inp = self.stored_input()
        input_fp = fingerprint(inp)
        payload: dict[str, Any] = {
            "input": inp,
            "input_fp": input_fp,
            "entrypoint": self._state.config.entrypoint,
            "worker": self._lease.owner,  # who started it (a later resume names its own)
            # what shaped the run (redrive.run_fingerprint reads it with the steps' models)
            "fingerprint": start_fingerprint(
                self._state.config.entrypoint, self._state.config.app_version, redrive_version()
            ),
            "flags": {
                "format": FORMAT_VERSION,
                "redrive": redrive_version(),
                "model_commit": self._state.config.model_commit,
                # model and tool steps record where they were issued (Cursor.frontier)
                "turns": CAUSAL_TURNS,
                # their positions carry spawn paths (FlowTracker: who each caller is)
                **self._flows.run_flags(),
                # what the secret rules were (docs/secrets.md): table digest, redact, keep
                "secrets": self._writer.scrubber.policy(),
            },
        }
        try:
            first = make_frame(
                run_id=self._state.run_id,
                seq=0,
                kind=Kind.RUN_START,
                name="run",
                payload=payload,
                prev_chain="0" * 32,
            )
        except TypeError as exc:
            raise TypeError(
                f"run {self._state.run_id!r}: the run's input cannot be journaled: {exc}"
            ) from None
        now = time.time()
        record = RunRecord(
            run_id=self._state.run_id,
            input_fp=input_fp,
            entrypoint=self._state.config.entrypoint,
            created_at=now,
            updated_at=now,
        )
        if self._state.config.journal.create_run(record, first):
            self._writer.restart_at(1, first.chain)
            self._state.cursor = None
            return None
        return self._state.config.journal.get_run(
            self._state.run_id
        )  # lost a creation race: resume it

    def resume(self, record: RunRecord) -> None:
        # a malformed row: the run is damaged (JournalCorruptError), and only this run
        check_row(record, getattr(self._state.config.journal, "url", None))
        self._state.resumed = True
        if (
            self._state.config.input is not UNSET
            and fingerprint(self.stored_input()) != record.input_fp
        ):
            start = next(iter(self._state.config.journal.frames(self._state.run_id)), None)
            recorded = start.data().get("input") if start is not None else None
            from ._diff import diff_values, format_diff

            diff = diff_values(recorded, self.stored_input())
            raise RunInputMismatchError(
                f"run {self._state.run_id!r} was started with another input; resuming it with this "
                "one would replay answers to a different question.\n"
                f"  differences (recorded -> given):\n{format_diff(diff)}\n"
                "What to do: pass the original input, or use a new run_id for the new input.",
                run_id=self._state.run_id,
                expected=recorded,
                found=self._state.config.input,
                diff=diff,
            )
        self._state.status = record.status
        status = RunStatus(record.status)
        if status is RunStatus.SUCCEEDED:
            self._state.finished_record = record
        elif status.terminal and self._state.config.live:
            raise TerminalRunError(
                f"run {self._state.run_id!r} already ended with status {record.status}"
                + (f" ({record.error})" if record.error else "")
                + "; it cannot execute again. "
                + after_end_advice(self._state.run_id),
                run_id=self._state.run_id,
                status=record.status,
            )
        limit = record.next_seq
        # one generator between the journal and the cursor (take_until over this one passed
        # every frame through: none it yields reaches the limit)
        frames = (f for f in self._state.config.journal.frames(self._state.run_id) if f.seq < limit)
        self._state.cursor = Cursor(
            self._state.run_id,
            frames,
            self._state.config.policy,
            source=self._state.config.journal.url,
        )
        # steps are issued under the rule the run was recorded with (spawn paths or not)
        self._flows.follow(self._state.cursor.flags())
        self._state.cursor.callers.claimable = self._flows.may_still_issue
        self._writer.restart_at(record.next_seq, record.last_chain)
        self._state.resumed_at = record.next_seq
        journal, run_id = self._state.config.journal, self._state.run_id
        self._state.spend.resumed_from(
            lambda: take_until((f for f in journal.frames(run_id) if f.seq < limit), limit)
        )
        # a function of the state and lease only: no reference cycle through the writer
        live = self._state.config.live
        self._writer.first_note = (
            functools.partial(_resume_mark, self._state, self._lease) if live else None
        )
        waiting = (RunStatus.SUSPENDED.value, RunStatus.PAUSED.value)
        if record.status in waiting and self._state.config.live:
            self._state.status = RunStatus.RUNNING.value
            # running again: a crash from here on leaves it among interrupted_runs(); a
            # paused run's reason is cleared from its record (its `paused` note keeps it)
            cleared = "" if record.status == RunStatus.PAUSED.value else None
            with contextlib.suppress(AppendConflictError):
                self._state.config.journal.append(
                    self._state.run_id,
                    [],
                    expected_seq=record.next_seq,
                    update=RunUpdate(status=RunStatus.RUNNING.value, error=cleared),
                )

    def catch_up(self, record: RunRecord) -> None:
        """Re-read the run when another worker appended while this one waited to enter."""
        if record.next_seq != self._writer.next_seq:
            self._state.cursor = None
            self._state.finished_record = None
            self.resume(record)

    def wait_for_lease_holder(self) -> Wait[None]:
        """A worker without a lease: wait while another holds it, then re-read the run.

        A procedure with waits (:mod:`._faces`).

        Raises:
            RunBusyError: see :meth:`LeaseKeeper.wait_for_holder`.
        """
        record = yield from self._lease.wait_for_holder()
        if record is not None:
            self.catch_up(record)

    def take_lease(self) -> Wait[None]:
        """Take the run's lease, re-read the run, and keep the lease renewed.

        A procedure with waits (:mod:`._faces`).

        Raises:
            RunBusyError: see :meth:`LeaseKeeper.take`.
        """
        record = yield from self._lease.take()
        try:
            self.catch_up(record)
        except BaseException:
            # entering fails (ended elsewhere, input mismatch...): do not sit on the lease
            self._lease.release()
            raise
        self._lease.start_renewing()


def _resume_mark(state: RunState, lease: LeaseKeeper) -> tuple[str, dict[str, Any]]:
    """The ``resumed`` note a resumed execution writes before its first frame.

    It names the worker that resumed, the seq it resumed at and the model
    steps it replayed until then (what ``redrive show`` and the timeline
    mark as an interruption and a resume, and count as saved by replay).
    """
    return RESUMED, {
        "event": RESUMED,
        "worker": lease.owner,
        "after": state.resumed_at,
        "replayed_models": state.spend.replayed_seqs,
    }
