"""Errors raised by redrive.

Every error is a :class:`ReplayError`; where it is also a standard error, it
subclasses that too, so ``except LookupError`` keeps working::

    ReplayError (Exception)
    ├── DivergenceError                 the replayed loop asked for a different step
    ├── ReplayMissError (LookupError)   replay-only run asked for a step nobody recorded
    ├── SideEffectRetryBlockedError     an in-flight side effect would run twice
    │   └── RetryLimitExceededError     an in-flight step was attempted too often
    ├── RunBusyError                    another worker holds the run or claimed the step
    │   └── LeaseLostError              this worker's lease was taken over (fenced)
    ├── AppendConflictError             a conditional append lost its race
    ├── RunInputMismatchError (ValueError)
    ├── UnknownRunError (LookupError)
    ├── TerminalRunError                the run already ended
    ├── JournalCorruptError             a journal failed its integrity checks
    ├── JournalFormatError              a journal of another format version
    ├── JournalLockedError              a DuckDB file in use by another process
    ├── JournalWriteError               a write failed (disk full, I/O error, connection lost)
    └── RecordedToolError               a recorded tool exception that cannot be rebuilt

Each error carries structured fields (``run_id``, ``seq``...) besides its
message, and pickles with them (so it crosses process pools).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AppendConflictError",
    "DivergenceError",
    "JournalCorruptError",
    "JournalFormatError",
    "JournalLockedError",
    "JournalWriteError",
    "LeaseLostError",
    "RecordedToolError",
    "ReplayError",
    "ReplayMissError",
    "RetryLimitExceededError",
    "RunBusyError",
    "RunInputMismatchError",
    "SideEffectRetryBlockedError",
    "TerminalRunError",
    "UnknownRunError",
]


class ReplayError(Exception):
    """Root of every redrive error.

    Args:
        message: the human-readable text (what happened, to which run, what next).
        **fields: structured fields, set as attributes (``run_id``, ``seq``...).
    """

    run_id: str | None
    seq: int | None

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = fields.pop("run_id", None)
        self.seq = fields.pop("seq", None)
        self.fields = fields
        for name, value in fields.items():
            setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.to_fields()))

    def to_fields(self) -> dict[str, Any]:
        """Return the structured fields (``run_id``, ``seq`` and the error's own)."""
        return {"run_id": self.run_id, "seq": self.seq, **self.fields}

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[ReplayError], message: str, fields: dict[str, Any]) -> ReplayError:
    err = cls.__new__(cls)
    ReplayError.__init__(err, message, **fields)
    return err


class DivergenceError(ReplayError):
    """The replayed loop asked for a step that differs from the recorded one.

    Fields: ``run_id``, ``seq`` (of the recorded step), ``kind``, ``name``
    (recorded), ``found_name``, ``expected`` / ``found`` (canonical arguments),
    ``expected_key`` / ``found_key``, ``diff`` (list of ``(path, recorded,
    replayed)``), ``context`` (the last matching steps, as text lines).
    """


class ReplayMissError(ReplayError, LookupError):
    """A replay-only run asked for a step that no recorded step answers.

    Fields: ``run_id``, ``seq``, ``kind``, ``name``, ``found`` (arguments) and
    ``closest`` (text lines describing the nearest recorded steps).
    """


class SideEffectRetryBlockedError(ReplayError):
    """A tool that was in flight when the run stopped would run a second time.

    Raised on resume for a tool whose ``tool_start`` is journaled without an
    outcome, unless it is restart safe, its ``recover()`` settled the outcome,
    or the run asked for ``on_in_flight="tell_model"``. Fields: ``run_id``,
    ``seq``, ``tool``, ``arguments``, ``idempotency_key``, ``attempts``.
    """


class RetryLimitExceededError(SideEffectRetryBlockedError):
    """An in-flight step was attempted more often than the run allows."""


class RunBusyError(ReplayError):
    """Another worker holds this run's lease or has claimed this step."""


class LeaseLostError(RunBusyError):
    """This worker's lease expired and another worker took the run over.

    Every later write of this worker is refused (fencing): stop the loop.
    """


class AppendConflictError(ReplayError):
    """A conditional append found another frame already at its seq.

    Fields: ``run_id``, ``seq`` (the seq that was expected to be next),
    ``found`` (the journal's actual next seq).
    """


class RunInputMismatchError(ReplayError, ValueError):
    """A run was resumed with a different input than it was started with."""


class UnknownRunError(ReplayError, LookupError):
    """No run with this id is in the journal."""


class TerminalRunError(ReplayError):
    """The run already ended (failed or cancelled) and cannot execute again."""


class JournalCorruptError(ReplayError):
    """A journal failed an integrity check: bad bytes, chain or order.

    Fields: ``run_id``, ``last_good_seq`` (None when not even the first frame
    could be read), ``source`` (file or table), ``reason``.
    """


class JournalFormatError(ReplayError):
    """A journal was written by a format version this redrive cannot read."""


class JournalLockedError(ReplayError):
    """A DuckDB journal file is open for writing in another process."""


class JournalWriteError(ReplayError):
    """A journal write failed for a reason outside redrive (disk full, I/O error,
    lost database connection). The underlying error is its ``__cause__``.

    The run stays resumable: nothing from ``seq`` on was acknowledged, so a
    tool whose claim failed did not run. (With a lost connection the write may
    still have committed; a resume then finds that claim in flight and applies
    the in-flight rules, which fail closed.) Fields: ``run_id``, ``seq`` (first
    seq of the failed write), ``journal`` (its URL), ``frames`` (how many).
    """


class RecordedToolError(ReplayError):
    """A tool raised during recording, and its exception type cannot be rebuilt.

    Fields: ``run_id``, ``seq``, ``tool``, ``error_type`` (``module.QualName``),
    ``error_message``.
    """
