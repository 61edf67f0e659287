"""The read model: a run's frames as recorded steps (pure: no I/O of its own).

Every reader of a run's record (the replay cursor, fork, the resume note, the
CLI, the demo) reads frames through this module, so they agree on what a step
is: its opening frame, its outcome frame, its turn, its attempts, and its
model request with prefix deltas resolved.

A step may be attempted more than once (a restart-safe re-run, an in-flight
step settled by ``recover()`` or a block, a retryable error re-attempted on
resume): every outcome and ``attempt`` note of every attempt belongs to the
step, and its outcome is its LAST attempt's outcome (an ``attempt`` note opens
a new attempt, so the step is in flight again until that attempt's outcome).
A step whose last outcome is a retryable ``tool_error`` is not settled yet: a
later attempt may follow, so the reader keeps it (even once forgotten) until a
step of a later turn opens, and updates it in place when that attempt comes.

:class:`StepReader` takes frames one at a time (the cursor feeds it lazily);
:func:`iter_steps` is the iterator face over it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import attrs

from .. import _decoded
from .._canonical_decode import decode_checked
from ..errors import JournalCorruptError
from ..frames import VERIFY_ADVICE, ChainCheck, Frame, Kind, decode, payload_problem
from ..storage import passed
from ._delta import Expander

__all__ = [
    "END_KINDS",
    "STEP_KINDS",
    "RecordedStep",
    "StepReader",
    "StepStatus",
    "iter_steps",
    "take_until",
]

#: Frame kind that opens a step -> step kind.
STEP_KINDS = {
    Kind.MODEL_REQUEST.value: "model",
    Kind.TOOL_START.value: "tool",
    Kind.VALUE.value: "value",
}
#: Frame kinds that record a step's outcome.
END_KINDS = frozenset({Kind.MODEL_RESPONSE.value, Kind.TOOL_DONE.value, Kind.TOOL_ERROR.value})
#: The kinds as plain strings, for the per-frame tests of :meth:`StepReader.feed` (a frame's
#: kind is a str; reading an enum member off its class costs several times a comparison)
_MODEL_REQUEST = Kind.MODEL_REQUEST.value
_VALUE = Kind.VALUE.value
_NOTE = Kind.NOTE.value
_TOOL_ERROR = Kind.TOOL_ERROR.value
_RUN_START = Kind.RUN_START.value
_RUN_END = Kind.RUN_END.value

#: What became of a step: ``"done"`` (an outcome, or a recorded value),
#: ``"error"`` (the tool raised), ``"blocked"`` (an in-flight tool settled as
#: not safely resumable), ``"in_flight"`` (started, no outcome recorded).
StepStatus = Literal["done", "error", "blocked", "in_flight"]


@attrs.define(eq=False)
class RecordedStep:
    """One recorded step: its opening frame and, when finished, its outcome frame.

    Attributes:
        seq: seq of the opening frame (``model_request``, ``tool_start``, ``value``).
        kind: ``"model"``, ``"tool"`` or ``"value"``.
        name, key: as on the opening frame (the cursor may re-key a step under
            its policy's ignore paths).
        start: the opening frame.
        end: the outcome frame (``model_response``, ``tool_done``, ``tool_error``;
            the opening frame itself for a value), or None while in flight.
        turn: number of model steps the loop had completed when it issued this step.
        attempts: how many times the step was started (1 + re-executions).
        last_attempt_seq: seq of the last ``attempt`` note (a re-execution), or None.
        reopenable: the last outcome is a retryable ``tool_error`` and a later
            attempt may still follow (see :attr:`settled`).
        resolved_not_done: a person declared (``redrive resolve --not-done``) that
            the in-flight attempt did not take effect: resuming runs the step again.
            A later attempt clears it.
    """

    seq: int
    kind: str
    name: str
    key: str
    start: Frame
    end: Frame | None
    turn: int
    attempts: int = 1
    _data: dict[str, Any] | None = None
    last_attempt_seq: int | None = None
    reopenable: bool = False
    resolved_not_done: bool = False
    #: the parsed issue position (:func:`redrive.replay._callers.position`), once asked
    position_cache: Any = attrs.field(default=None, repr=False)
    #: ``(end, its decoded payload)`` as the reader decoded it, handed out by the first
    #: :meth:`decode_outcome` (one decode per frame), then dropped
    end_cache: tuple[Frame, dict[str, Any]] | None = attrs.field(default=None, repr=False)

    @property
    def harmless(self) -> bool:
        """True for a recorded tool call declared read-only or restart-safe."""
        return bool(self.data.get("read_only") or self.data.get("restart_safe"))

    @property
    def data(self) -> dict[str, Any]:
        """The decoded payload of the opening frame (model requests resolved in full)."""
        if self._data is None:
            self._data = self.start.data()
        return self._data

    @property
    def args(self) -> Any:
        """The recorded canonical arguments (redacted)."""
        return self.data.get("args")

    @property
    def in_flight(self) -> bool:
        """True when the step started and no outcome was recorded."""
        return self.end is None

    @property
    def settled(self) -> bool:
        """True when the step has an outcome that no later attempt can replace.

        A retryable tool error is not settled until a step of a later turn
        opens (or the frames run out: then the reader yields it as it is).
        """
        return self.end is not None and not self.reopenable

    @property
    def last_seq(self) -> int:
        """The seq of the frame that began the step's last attempt (opening or ``attempt`` note)."""
        return self.seq if self.last_attempt_seq is None else self.last_attempt_seq

    @property
    def idempotency_key(self) -> str | None:
        """The idempotency key recorded on a tool step's opening frame (None: not recorded)."""
        key = self.data.get("idempotency_key") if self.kind == "tool" else None
        return key if isinstance(key, str) else None

    @property
    def outcome(self) -> dict[str, Any] | None:
        """The decoded outcome payload (a fresh dict on each read), or None while in flight."""
        return None if self.end is None else self.decode_outcome()

    @property
    def status(self) -> StepStatus:
        """What became of the step (see :data:`StepStatus`)."""
        if self.end is None:
            return "in_flight"
        if self.end.kind == Kind.TOOL_ERROR:
            return "error"
        if self.end.kind == Kind.TOOL_DONE:
            result = self.decode_outcome().get("result")
            if isinstance(result, dict) and result.get("status") == "not_safely_resumable":
                return "blocked"
        return "done"

    def peek_outcome(self) -> dict[str, Any] | None:
        """The decoded outcome payload to read, not to change (None while in flight).

        The reader's decode when it still holds one (kept for the first
        :meth:`decode_outcome`, which hands it out), else a fresh decode.
        """
        if self.end is None:
            return None
        cached = self.end_cache
        if cached is not None and cached[0] is self.end:
            return cached[1]
        return self.decode_outcome()

    def decode_outcome(self) -> dict[str, Any]:
        """Return the decoded payload of the outcome frame.

        For a value step that is the opening payload itself; otherwise a fresh
        dict decoded from the outcome frame.

        Raises:
            ValueError: the step is in flight (no outcome frame), or the
                outcome payload cannot be decoded.
        """
        if self.end is None:
            raise ValueError(f"{self.describe()} is in flight: it has no recorded outcome")
        if self.end is self.start:
            return self.data
        cached, self.end_cache = self.end_cache, None
        if cached is not None and cached[0] is self.end:
            return cached[1]  # the reader's decode, handed out once: still a fresh dict
        data: dict[str, Any] = decode(self.end.payload)
        return data

    def describe(self) -> str:
        """One line: ``seq 4 tool open_ticket``."""
        return f"seq {self.seq} {self.kind} {self.name}"


class StepReader:
    """Builds :class:`RecordedStep` values from a run's frames, fed one at a time in seq order.

    Checks each frame's seq and chain as it is read and resolves model
    requests' prefix deltas. Holds only the steps it was not told to
    :meth:`forget`, so a caller that forgets what it used reads any run in
    bounded memory.

    Args:
        run_id: the run (None: the run of the first frame), for checks and messages.
        verify: check seq density (from 0) and the hash chain of each frame.
    """

    def __init__(self, run_id: str | None = None, *, verify: bool = True) -> None:
        self.run_id = run_id
        self.verify = verify
        #: steps read and not forgotten, by seq
        self.steps: dict[int, RecordedStep] = {}
        #: steps a later attempt may still update in place, forgotten or not, by seq: a
        #: retryable error (until a later turn opens), then a re-attempt (until its outcome)
        self._followed: dict[int, RecordedStep] = {}
        #: seqs of forgotten retryable errors no longer followed (a later outcome is ignored)
        self._closed: set[int] = set()
        #: decoded payload of ``run_start`` / ``run_end``, once read
        self.run_start: dict[str, Any] | None = None
        self.run_end: dict[str, Any] | None = None
        #: the ``run_start`` / ``run_end`` frames themselves (their ``at``...), once read
        self.run_start_frame: Frame | None = None
        self.run_end_frame: Frame | None = None
        self.frames_read = 0
        #: the last full model request per step name (to resolve prefix deltas)
        self.expander = Expander()
        # each frame is checked once and let go: no memo of it is kept (remember=False)
        self._chain = ChainCheck(
            run_id, advice="Nothing was replayed from it. " + VERIFY_ADVICE, remember=False
        )

    @property
    def last_chain(self) -> str:
        """The chain of the last frame read (checked), or ``GENESIS`` before the first."""
        return self._chain.prev_chain

    def feed(self, frame: Frame) -> RecordedStep | None:
        """Read the next frame of the run.

        Returns:
            The step this frame opened, or None (an outcome, note or run frame
            updates the step or the run it refers to).

        Raises:
            JournalCorruptError: a seq gap, a broken chain, an unreadable
                payload, an unresolvable prefix reference, or an outcome for a
                step that was never opened (or already forgotten).
        """
        if self.verify:
            self._chain.check(frame)
        self.frames_read += 1
        kind = frame.kind
        if kind in STEP_KINDS:
            data = self._payload(frame)
            if kind == _MODEL_REQUEST:
                try:
                    data = self.expander.request(frame, data)
                except ValueError as exc:
                    raise self.corrupt(
                        frame,
                        "prefix reference",
                        f"is a model request whose prefix reference cannot be resolved ({exc})",
                    ) from None
            step = RecordedStep(
                seq=frame.seq,
                kind=STEP_KINDS[kind],
                name=frame.name,
                key=frame.key,
                start=frame,
                end=frame if kind == _VALUE else None,
                turn=int(data.get("turn", 0)),
                data=data,
            )
            if self._followed:
                self._settle_before(step.turn)
            self.steps[frame.seq] = step
            return step
        if kind in END_KINDS or kind == _NOTE:
            data = self._payload(frame)
            ref = data.get("step")
            if ref is None:
                return None
            target = self.steps.get(ref) or self._followed.get(ref)
            if target is None and kind in END_KINDS and ref not in self._closed:
                raise self.corrupt(
                    frame,
                    "dangling outcome",
                    f"is a {kind} for step seq {ref}, which opened no step",
                )
            if target is None:
                return None
            if kind in END_KINDS:
                target.end = frame  # the last attempt's outcome is the step's outcome
                target.end_cache = (frame, data)
                target.reopenable = kind == _TOOL_ERROR and _retryable(data)
            elif data.get("event") == "attempt":
                target.attempts += 1
                target.last_attempt_seq = frame.seq
                target.end, target.reopenable = None, False  # a new attempt: in flight again
                target.end_cache = None
                target.resolved_not_done = False
            elif data.get("event") == "resolved" and target.end is None:
                target.resolved_not_done = data.get("state") == "not_done"
            if target.reopenable or (target.end is None and ref in self._followed):
                self._followed[ref] = target
            else:
                self._followed.pop(ref, None)
        elif kind == _RUN_START:
            self.run_start, self.run_start_frame = self._payload(frame), frame
        elif kind == _RUN_END:
            self.run_end, self.run_end_frame = self._payload(frame), frame
        return None

    def read(self, frames: Iterable[Frame]) -> Iterator[RecordedStep]:
        """Feed ``frames`` and yield the steps, as :func:`iter_steps` does.

        After the iterator is exhausted, :attr:`run_start` and :attr:`run_end`
        hold the run's first and last frames' payloads (when recorded).
        """
        waiting: collections.deque[RecordedStep] = collections.deque()
        for frame in frames:
            opened = self.feed(frame)
            if opened is not None:
                waiting.append(opened)
            while waiting and waiting[0].settled:
                step = waiting.popleft()
                self.forget(step.seq)
                yield step
        yield from waiting

    def forget(self, seq: int) -> None:
        """Drop the step opened at ``seq`` (an outcome for it is then corrupt).

        A step whose last outcome is a retryable error is still followed: a
        later attempt updates it in place, until a step of a later turn opens.
        """
        self.steps.pop(seq, None)

    def _settle_before(self, turn: int) -> None:
        """A step of ``turn`` opened: retryable errors of earlier turns take no more attempts."""
        if not self._followed:
            return
        for seq, step in list(self._followed.items()):
            if step.reopenable and step.turn < turn:
                del self._followed[seq]
                step.reopenable = False
                if seq not in self.steps:
                    self._closed.add(seq)

    def corrupt(self, frame: Frame, reason: str, what: str) -> JournalCorruptError:
        """Build the :class:`JournalCorruptError` for a bad ``frame`` (``what`` it is)."""
        return self._chain.error(frame.seq, reason, what, run_id=frame.run_id, inside=True)

    def _payload(self, frame: Frame) -> dict[str, Any]:
        kept = _decoded.take(frame)  # decoded and checked by the file's reader on open
        if kept is not None:
            return kept
        if passed(frame):
            # this frame object passed the journal's full check (a frame held in its log,
            # written or read back by this process): a map within the depth bound whose
            # schema passes; a frame read anew (a table row, a file) is checked below
            checked: dict[str, Any] = decode_checked(frame.payload)
            return checked
        try:
            data = frame.data()
        except ValueError as exc:
            raise self.corrupt(frame, "payload", f"has an unreadable payload ({exc})") from None
        if not isinstance(data, dict):
            raise self.corrupt(
                frame, "payload", f"has a {type(data).__name__} payload where a map belongs"
            )
        # frames read back from DuckDB or Postgres tables get the same schema check as
        # .rdj and .rdlog records: a hostile row is a JournalCorruptError naming seq and field
        problem = payload_problem(frame.kind, data)
        if problem is not None:
            raise self.corrupt(frame, "payload", f"has a malformed {frame.kind} payload: {problem}")
        return data


def _retryable(data: dict[str, Any]) -> bool:
    """True for a ``tool_error`` payload whose error is marked retryable."""
    error = data.get("error")
    return isinstance(error, dict) and error.get("retryable") is True


def iter_steps(
    frames: Iterable[Frame], run_id: str | None = None, *, verify: bool = True
) -> Iterator[RecordedStep]:
    """Yield a run's recorded steps in seq order, lazily.

    A step is yielded once its outcome is read (or, for a step still in
    flight, when the frames run out), so memory holds only the steps between
    the oldest unfinished one and the frame being read.

    Args:
        frames: the run's frames in seq order (from seq 0 when ``verify``).
        run_id: the run (None: the run of the first frame).
        verify: check seq density, run and hash chain of each frame.

    Yields:
        One :class:`RecordedStep` per model, tool and value step.

    Raises:
        JournalCorruptError: a frame fails its checks (see :meth:`StepReader.feed`).
    """
    return StepReader(run_id, verify=verify).read(frames)


def take_until(frames: Iterator[Frame], limit: int) -> Iterator[Frame]:
    """Yield ``frames`` (in seq order) up to, not including, seq ``limit``."""
    for frame in frames:
        if frame.seq >= limit:
            return
        yield frame
