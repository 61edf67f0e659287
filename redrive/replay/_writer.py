"""The journal writer: a Run's queued frames, its chain position, and the append.

Frames are queued as steps produce them (chained in memory) and appended
in one transaction at the next durable point (group commit). What to do
when another worker appended first (adopt its frames, or stop) is the
Run's decision: the writer reports it as ``AppendConflictError``.

Every frame is made here, and every payload passes through the run's
:class:`~redrive._scrub.Scrubber` first (``redact=`` paths, credential fields,
secret-looking text): no other path reaches a journal with a payload.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from .._scrub import DEFAULT, Scrubber
from ..errors import JournalWriteError, LeaseLostError, ReplayError
from ..frames import Frame, Kind, canonical, make_frame
from ..storage import Journal, RunUpdate, passed_as_built
from ._context import _observe
from ._lease import LeaseKeeper

__all__ = ["OUTCOMES", "JournalWriter"]

#: Frames that answer a call that was made (a tool body ran, a model answered): refused
#: after the run's block ended, the call had run and its step stays in flight.
OUTCOMES = frozenset({Kind.TOOL_DONE.value, Kind.TOOL_ERROR.value, Kind.MODEL_RESPONSE.value})


class _Adopted(Exception):
    """Internal: a lost append was replaced by the winner's frames; match the step again."""


#: What :meth:`JournalWriter.prepare` scrubs -> the step kind it belongs to.
_STEP_OF = {"args": "tool", "request": "model", "extra": "model", "input": "run", "value": "value"}


class JournalWriter:
    """The frames one Run has queued and not yet appended, and where its chain stands.

    Args:
        journal: the run's journal.
        run_id: the run's id.
        lease: the run's lease keeper (its epoch fences every append).
        scrubber: what every payload passes through before its frame is made
            (default: credential fields and secret-looking text only).

    Attributes:
        pending: frames queued, not yet appended.
        next_seq: the seq the next queued frame gets.
        last_chain: the chain of the last queued (or journaled) frame.
    """

    def __init__(
        self, journal: Journal, run_id: str, lease: LeaseKeeper, scrubber: Scrubber = DEFAULT
    ) -> None:
        self.journal = journal
        self.scrubber = scrubber
        self.run_id = run_id
        self.lease = lease
        self.pending: list[Frame] = []
        self.next_seq = 0
        self.last_chain = ""
        #: set once the run's block ended: called with what is queued, it raises
        self.refuse: Callable[[str, bool], None] | None = None
        #: makes the note queued before the first frame of this execution (a resume's
        #: mark: ``(name, data)``), or None
        self.first_note: Callable[[], tuple[str, dict[str, Any]]] | None = None

    def restart_at(self, next_seq: int, last_chain: str) -> None:
        """Drop what is queued and continue after the journaled frame ``next_seq - 1``."""
        self.pending = []
        self.next_seq = next_seq
        self.last_chain = last_chain

    def prepare(self, value: Any, path: str, kind: str | None = None) -> Any:
        """Return ``value`` as it is journaled: canonical and scrubbed (keys are made on it).

        Args:
            value: a step's user data.
            path: what it is (``"args"``, ``"request"``, ``"input"``, ``"value"``...).
            kind: the step kind whose ``keep=`` paths apply; by default the one
                ``path`` belongs to (``args``: tool, ``request``: model...).

        Raises:
            TypeError: ``value`` cannot be encoded canonically (``path`` names where).
        """
        scrubber = self.scrubber.for_step(kind or _STEP_OF.get(path, ""))
        return scrubber.value(canonical(value, path))

    def mark_first(self) -> None:
        """Queue the :attr:`first_note` now if it is due (before reading ``next_seq`` for a step).

        :meth:`queue` does it too; a step that reads ``next_seq`` for its own
        frame (its seq, its idempotency key) calls this first, so the note
        takes the seq before the step's.
        """
        if self.first_note is not None:
            make, self.first_note = self.first_note, None
            self.queue(Kind.NOTE, *make())

    def queue(
        self, kind: Kind, name: str, payload: Any, key: str = "", *, scrubbed: str = ""
    ) -> Frame:
        """Scrub ``payload``, chain a new frame after the last one and queue it; return it.

        Args:
            kind: the frame's kind.
            name: the step's name.
            payload: the frame's payload (a map of plain data, stored values...).
            key: the step's match key (32 hex digits), or ``""``.
            scrubbed: the payload field (``"args"``) holding what :meth:`prepare`
                returned for this step (canonical and scrubbed already; a model
                request's lists may be prefix references): it is not scrubbed again.

        Raises:
            TypeError: ``payload`` cannot be encoded canonically.
            RunEndedError: the run's block ended (see ``refuse``); nothing is queued.
        """
        if self.refuse is not None:
            self.refuse(f"{kind.value} {name!r}", kind.value in OUTCOMES)
        self.mark_first()
        payload = self.scrubber.payload(
            kind.value, canonical(payload, "payload"), scrubbed=scrubbed
        )
        frame = make_frame(
            run_id=self.run_id,
            seq=self.next_seq,
            kind=kind,
            name=name,
            key=key,
            payload=payload,
            prev_chain=self.last_chain,
            epoch=self.lease.epoch or 0,
            tree=True,  # canonical above; the scrubber keeps it so (one walk, not two)
        )
        # the journal's check of this frame need not decode the bytes just packed
        passed_as_built(frame, payload)
        self.pending.append(frame)
        self.next_seq += 1
        self.last_chain = frame.chain
        return frame

    def append(self, update: RunUpdate | None, *, sync: bool) -> None:
        """Append every queued frame (and ``update``) in one transaction; then nothing is queued.

        Raises:
            LeaseLostError: the run's lease was lost (remembered: every later write fails).
            AppendConflictError: another worker appended first (nothing was written).
            JournalWriteError: the journal failed (space, permissions, connection).
            ReplayError: another refusal of the journal.
        """
        self.lease.check()
        if update is not None and update.error is not None:
            update = attrs.evolve(update, error=self.scrubber.text(update.error))
        frames = self.pending
        first = frames[0].seq if frames else self.next_seq
        try:
            self.journal.append(
                self.run_id,
                frames,
                expected_seq=first,
                update=update,
                epoch=self.lease.epoch,
                sync=sync,
            )
        except LeaseLostError as exc:
            self.lease.lost = exc
            raise
        except Exception as exc:
            if isinstance(exc, ReplayError):
                raise
            raise JournalWriteError(
                f"run {self.run_id!r}: writing seq {first}..{first + len(frames) - 1} "
                f"to journal {self.journal.url} failed: {type(exc).__name__}: {exc}. "
                f"Those frames are not journaled ({_unjournaled(frames)}); the run stays "
                "resumable: fix the journal (space, permissions, connection) and run it "
                "again with the same run_id.",
                run_id=self.run_id,
                seq=first,
                journal=self.journal.url,
                frames=len(frames),
            ) from exc
        self.pending = []
        if frames:
            _observe("frames", run_id=self.run_id, frames=frames)

    @contextlib.contextmanager
    def unqueue_on_failure(self) -> Iterator[None]:
        """Drop the frames queued in this block if it fails (their write was refused).

        A claim whose append failed must not be written later with other
        frames: its body never ran, and a resume would take it for in flight.
        """
        mark = (len(self.pending), self.next_seq, self.last_chain)
        try:
            yield
        except _Adopted:
            raise  # the pending frames were replaced by the winner's
        except BaseException:
            if len(self.pending) > mark[0] and self.next_seq > mark[1]:
                del self.pending[mark[0] :]
                self.next_seq, self.last_chain = mark[1], mark[2]
            raise


def _unjournaled(frames: list[Frame]) -> str:
    """What a failed append of ``frames`` means for the steps they record (for the message)."""
    ran = [f for f in frames if f.kind in (Kind.TOOL_DONE.value, Kind.TOOL_ERROR.value)]
    if ran:
        names = ", ".join(sorted({repr(f.name) for f in ran}))
        return (
            f"the body of tool {names} ran, but its outcome is not journaled: on resume the "
            "step is in flight, so a restart-safe tool runs again and any other blocks until "
            "`redrive resolve` records whether it took effect"
        )
    if any(f.kind == Kind.MODEL_RESPONSE.value for f in frames):
        return "the model call was made, but its response is not journaled: resuming asks again"
    if any(f.kind == Kind.TOOL_START.value for f in frames):
        return "a tool whose claim this was did not run"
    return "no step ran on their account"
