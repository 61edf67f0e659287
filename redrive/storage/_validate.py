"""The one validator of a frame and a run row, shared by every reader and writer (pure).

A journal never acknowledges what it cannot read back: the writer
(:func:`~._checks.check_append`), the ``.rdj`` and ``.rdlog`` readers, the
readers of DuckDB and Postgres rows, ``verify`` and ``import`` all ask
:func:`frame_problem` and :func:`run_problem`, so a value passes one exactly
when it passes all.

The ranges are the column types of the SQL journals (``_sqlschema``): ``seq``,
``next_seq`` and the lease epochs are ``BIGINT`` (signed 64-bit, and never
negative), times are finite ``DOUBLE``; text is valid Unicode (DuckDB and
Python's UTF-8 codec refuse lone surrogates) and, except free-form error
text, holds no NUL (Postgres ``TEXT`` refuses it). Run ids follow
:func:`redrive._runid.check_run_id`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from .. import _decoded
from .._canonical_decode import _HEADS
from .._canonical_types import MAX_DEPTH
from .._identity import Remembered
from .._runid import MAX_RUN_ID_BYTES, check_run_id
from ..errors import JournalCorruptError
from ..frames import Frame, Kind, decode, payload_problem
from ._records import RunRecord, RunStatus

__all__ = [
    "BIGINT_MAX",
    "FRAME_FIELDS",
    "check_row",
    "frame_problem",
    "passed_as_built",
    "run_problem",
]

#: The largest ``BIGINT`` (signed 64-bit) of DuckDB and Postgres: the bound of every count.
BIGINT_MAX: Final = 2**63 - 1
#: The fields of a frame itself (a problem elsewhere is in its payload).
FRAME_FIELDS: Final = frozenset(
    ("run_id", "seq", "kind", "name", "key", "payload", "chain", "at", "epoch")
)
_KINDS: Final = frozenset(k.value for k in Kind)
_STATUSES: Final = frozenset(s.value for s in RunStatus)
#: 32 lowercase hex digits, the whole string (``fullmatch``: no trailing newline either)
_HEX32: Final = re.compile("[0-9a-f]{32}")


def _count(value: Any) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"expected an int, got {_brief(value)}"
    if not 0 <= value <= BIGINT_MAX:
        return f"{value} is out of range 0..{BIGINT_MAX} (a BIGINT column)"
    return None


def _time(value: Any, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"expected a number of seconds, got {_brief(value)}"
    try:
        if math.isfinite(float(value)):
            return None
    except OverflowError:
        pass
    return f"{_brief(value)} is not a finite number of seconds"


def _text(value: Any, *, optional: bool = False, nul: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        return f"expected a string, got {_brief(value)}"
    if not nul and "\x00" in value:
        return "holds a NUL character (no journal column stores it)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode (a lone surrogate at index {exc.start})"
    return None


def _hex32(value: Any, *, empty: bool = False) -> str | None:
    if empty and value == "":
        return None
    if isinstance(value, str) and _HEX32.fullmatch(value) is not None:
        return None
    return f"expected 32 lowercase hex digits, got {_brief(value)}"


def _run_id(value: Any) -> str | None:
    try:
        check_run_id(value)
    except ValueError as exc:
        return str(exc)
    return None


#: Frames that passed :func:`frame_problem`, by identity, while they live: a frame is
#: immutable, so one read from a file and then appended to a journal (an import, a
#: test's or ``check``'s copy) is checked once, not once per hop.
_PASSED: Remembered[Frame] = Remembered()


def frame_problem(frame: Frame, *, keep: bool = False) -> str | None:
    """Check every field of a frame: its type and range, its kind, its payload's schema.

    The chain and the seq order are the run's business (:class:`~redrive.frames.ChainCheck`).
    A frame object that passed once passes again without a second look (it is
    frozen: its fields cannot change).

    Args:
        frame: the frame, as read or about to be written.
        keep: leave the decoded payload of a frame that passes for the next
            reader of the same frame object (:func:`redrive._decoded.take`: a
            replay of a file checked on open decodes it once).

    Returns:
        None when the frame can be stored on every journal and read back, else
        ``"field: what is wrong"`` (``"epoch: 18446744073709551615 is out of range..."``).
    """
    if _PASSED.holds(id(frame), frame):
        return None
    found = None if _frame_fields_fine(frame) else _frame_field_problem(frame)
    if found is not None:
        return found
    try:
        data = decode(frame.payload)
    except Exception as exc:  # any decoding failure of a hostile payload is a problem
        return f"payload: not canonical msgpack ({type(exc).__name__}: {exc})"
    found = payload_problem(frame.kind, data)
    if found is None:
        _PASSED.add(id(frame), frame)
        if keep:
            _decoded.keep(frame, data)
    return found


def passed(frame: Frame) -> bool:
    """True when this very frame object passed :func:`frame_problem` (or :func:`passed_as_built`).

    Its payload then decodes within the depth bound to a map whose schema
    passes :func:`~redrive.frames.payload_problem` (a frame is frozen).
    """
    return _PASSED.holds(id(frame), frame)


def passed_as_built(frame: Frame, tree: Any) -> bool:
    """Remember a frame the engine built as passing :func:`frame_problem` when cheap tests prove it.

    ``frame.payload`` must be ``pack_tree(tree)`` of a canonical tree (what
    :func:`~redrive.frames.make_frame` packs with ``tree=True``; the journal
    writer's frames): such bytes decode (an invariant of the encoder), so the
    full check's decode and its walk of the payload prove nothing more than
    the tests here: the frame's own fields pass the one-expression test, the
    payload's schema passes on ``tree`` itself (a canonical tree holds the
    exact types its bytes decode to: a field that passes on the tree passes
    decoded), and the bytes hold at most :data:`MAX_DEPTH` map or array headers
    (they cannot nest deeper: the decoder's own test). When any test fails
    nothing is remembered and the journal checks the frame in full, as a
    frame read from outside always is.

    Returns:
        True when the frame is remembered as passing.
    """
    body = frame.payload
    if not (
        _frame_fields_fine(frame)
        and payload_problem(frame.kind, tree) is None
        and (len(body) <= MAX_DEPTH or len(body) - len(body.translate(None, _HEADS)) <= MAX_DEPTH)
    ):
        return False
    _PASSED.add(id(frame), frame)
    return True


def _id_fine(value: Any) -> bool:
    """A sufficient test for :func:`_run_id` passing: ASCII without NUL, 1 to 1,024 bytes."""
    return (
        type(value) is str
        and 0 < len(value) <= MAX_RUN_ID_BYTES
        and value.isascii()
        and "\x00" not in value
    )


def _frame_fields_fine(frame: Frame) -> bool:
    """A sufficient test (one expression, the common case) for :func:`_frame_field_problem`.

    True only when every check there passes: exact ``str``/``int``/``float``/``bytes``
    types, ASCII text, counts in range, finite time. False proves nothing (the full
    checks decide and name the field); ``tests/unit/test_validator_fast.py`` holds it.
    """
    seq, epoch, at, key, name = frame.seq, frame.epoch, frame.at, frame.key, frame.name
    return (
        _id_fine(frame.run_id)
        and type(seq) is int
        and 0 <= seq <= BIGINT_MAX
        and type(frame.kind) is str
        and frame.kind in _KINDS
        and _ascii(name)
        and type(key) is str
        and (key == "" or _HEX32.fullmatch(key) is not None)
        and type(frame.payload) is bytes
        and type(frame.chain) is str
        and _HEX32.fullmatch(frame.chain) is not None
        and type(at) is float
        and math.isfinite(at)
        and type(epoch) is int
        and 0 <= epoch <= BIGINT_MAX
    )


def _frame_field_problem(frame: Frame) -> str | None:
    """The first of a frame's own fields that no journal could store, as ``"field: why"``."""
    checks = (
        ("run_id", _run_id(frame.run_id)),
        ("seq", _count(frame.seq)),
        (
            "kind",
            None
            if type(frame.kind) is str and frame.kind in _KINDS
            else f"unknown kind {_brief(frame.kind)}",
        ),
        ("name", _text(frame.name)),
        ("key", _hex32(frame.key, empty=True)),
        ("payload", None if isinstance(frame.payload, bytes) else "expected bytes"),
        ("chain", _hex32(frame.chain)),
        ("at", _time(frame.at)),
        ("epoch", _count(frame.epoch)),
    )
    for name, problem in checks:
        if problem is not None:
            return f"{name}: {problem}"
    return None


#: Run rows that passed :func:`run_problem`, by identity, while they live: a row is
#: frozen (its fields are str, int, float, bytes or None), so the row a journal made
#: after one append and checked is not checked again as the row the next append reads.
_ROWS_PASSED: Remembered[RunRecord] = Remembered()


def run_problem(record: RunRecord) -> str | None:
    """Check every field of a run row: its type and range, its status, its output.

    A row object that passed once passes again without a second look (it is
    frozen: its fields cannot change).

    Args:
        record: the row, as read or about to be written.

    Returns:
        None when the row can be stored on every journal and read back, else
        ``"field: what is wrong"``.
    """
    if _ROWS_PASSED.holds(id(record), record):
        return None
    found = None if _row_fields_fine(record) else _row_field_problem(record)
    if found is None:
        _ROWS_PASSED.add(id(record), record)
    return found


def passed_as_moved(after: RunRecord, before: RunRecord) -> bool:
    """Remember ``after`` as passing :func:`run_problem` when it is a passed row moved on.

    ``before`` passed (this very object); ``after`` holds the very same field
    objects but for ``next_seq``, ``last_chain`` and ``updated_at``, which are
    checked here as :func:`run_problem` checks them: the row an append makes
    from the row it read (:func:`~._checks.after_append`). False proves nothing.
    """
    seq, chain, at = after.next_seq, after.last_chain, after.updated_at
    if not (
        _ROWS_PASSED.holds(id(before), before)
        and type(seq) is int
        and 0 <= seq <= BIGINT_MAX
        and (chain is before.last_chain or (type(chain) is str and _HEX32.fullmatch(chain)))
        and type(at) is float
        and math.isfinite(at)
        and after.run_id is before.run_id
        and after.status is before.status
        and after.input_fp is before.input_fp
        and after.entrypoint is before.entrypoint
        and after.created_at is before.created_at
        and after.output is before.output
        and after.error is before.error
        and after.lease_owner is before.lease_owner
        and after.lease_epoch is before.lease_epoch
        and after.lease_expires is before.lease_expires
    ):
        return False
    _ROWS_PASSED.add(id(after), after)
    return True


def _row_fields_fine(record: RunRecord) -> bool:
    """A sufficient test (one expression, the common case) for :func:`_row_field_problem`.

    As :func:`_frame_fields_fine`: True only when every check passes (an output that
    decodes, ASCII text); False proves nothing.
    """
    owner, expires, output, error = (
        record.lease_owner,
        record.lease_expires,
        record.output,
        record.error,
    )
    created, updated, seq, epoch = (
        record.created_at,
        record.updated_at,
        record.next_seq,
        record.lease_epoch,
    )
    return (
        _id_fine(record.run_id)
        and type(record.status) is str
        and record.status in _STATUSES
        and type(seq) is int
        and 0 <= seq <= BIGINT_MAX
        and type(record.last_chain) is str
        and _HEX32.fullmatch(record.last_chain) is not None
        and _ascii(record.input_fp)
        and (record.entrypoint is None or _ascii(record.entrypoint))
        and type(created) is float
        and math.isfinite(created)
        and type(updated) is float
        and math.isfinite(updated)
        and (output is None or (type(output) is bytes and _output(output) is None))
        and (error is None or (type(error) is str and error.isascii()))
        and (owner is None or _ascii(owner))
        and type(epoch) is int
        and 0 <= epoch <= BIGINT_MAX
        and (expires is None or (type(expires) is float and math.isfinite(expires)))
    )


def _ascii(value: Any) -> bool:
    """A sufficient test for :func:`_text` passing: an exact ``str`` of ASCII without NUL."""
    return type(value) is str and value.isascii() and "\x00" not in value


def _row_field_problem(record: RunRecord) -> str | None:
    """The first of a run row's fields that no journal could store, as ``"field: why"``."""
    status = record.status
    checks = (
        ("run_id", _run_id(record.run_id)),
        (
            "status",
            None
            if type(status) is str and status in _STATUSES
            else f"{_brief(status)} is not a run status",
        ),
        ("next_seq", _count(record.next_seq)),
        ("last_chain", _hex32(record.last_chain)),
        ("input_fp", _text(record.input_fp)),
        ("entrypoint", _text(record.entrypoint, optional=True)),
        ("created_at", _time(record.created_at)),
        ("updated_at", _time(record.updated_at)),
        ("output", _output(record.output)),
        ("error", _text(record.error, optional=True, nul=True)),
        ("lease_owner", _text(record.lease_owner, optional=True)),
        ("lease_epoch", _count(record.lease_epoch)),
        ("lease_expires", _time(record.lease_expires, optional=True)),
    )
    for name, problem in checks:
        if problem is not None:
            return f"{name}: {problem}"
    return None


def check_row(record: RunRecord, source: str | None = None) -> None:
    """Refuse a run row as read when it fails :func:`run_problem`: the run is damaged.

    Every reader that acts on a row (a resume, ``show``, ``verify``) calls this,
    so a row the validator refuses is refused alike everywhere, and only that
    run is: the journal and its other runs read on.

    Args:
        record: the row, as read.
        source: the journal or file, for the message.

    Raises:
        JournalCorruptError: ``reason="row"``, naming the run, the field and the way out
            (export what is intact, or drop the run).
    """
    problem = run_problem(record)
    if problem is None:
        return
    where = f"{source}: " if source else ""
    raise JournalCorruptError(
        f"{where}run {record.run_id!r}: its row is malformed: {problem}. Export what is "
        "intact (redrive export RUN --intact -o FILE.rdj) or drop the run (redrive drop RUN).",
        run_id=record.run_id,
        reason="row",
        source=source,
    )


def _output(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, bytes):
        return f"expected bytes or None, got {_brief(value)}"
    try:
        decode(value)
    except Exception as exc:  # any decoding failure of a hostile value is a problem
        return f"not canonical msgpack ({type(exc).__name__}: {exc})"
    return None


def _brief(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"
