"""Frames: the journal's records, their kinds, and the hash chain that links them.

A :class:`Frame` is one journal record. Its ``payload`` is canonical msgpack
(see :mod:`redrive._canonical` for the encoding, format version 1); its
``key`` content-addresses a call; its ``chain`` links it to the frame before
it. :class:`ChainCheck` and :func:`verify_chain` are the one check of a run's
seq density and chain, used by every reader and writer of journals.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

import attrs
import ormsgpack
import xxhash

from ._canonical import (
    MAX_DEPTH,
    PrefixRef,
    StoredValue,
    call_key,
    canonical,
    decode,
    encode,
    fingerprint,
    hash_hex,
    pack_tree,
)
from ._canonical_fast import _PLAIN_ONLY
from ._identity import Remembered
from ._stored import (
    Tagged,
    decode_value,
    encode_value,
    rebuild,
    register_codec,
    store,
)
from .errors import JournalCorruptError

__all__ = [
    "FORMAT_VERSION",
    "GENESIS",
    "MAX_DEPTH",
    "ChainCheck",
    "Frame",
    "Kind",
    "PrefixRef",
    "StoredValue",
    "Tagged",
    "VERIFY_ADVICE",
    "call_key",
    "canonical",
    "chain_of",
    "decode",
    "decode_value",
    "encode",
    "encode_value",
    "fingerprint",
    "make_frame",
    "pack_tree",
    "payload_problem",
    "rebuild",
    "register_codec",
    "store",
    "verify_chain",
]

#: Version of the canonical encoding and frame layout. Stored in every journal.
#: 2: payloads may hold stored values (ext 10, handed back with type and order
#: kept); journals of version 1 read unchanged and are marked 2 when opened to write.
FORMAT_VERSION: Final = 2

#: The chain value "before" seq 0 of every run.
GENESIS: Final = "0" * 32

_ormsgpack_packb = ormsgpack.packb
_xxh3_hex = xxhash.xxh3_128_hexdigest


class Kind(enum.StrEnum):
    """What a frame records. Values are the strings stored in journals."""

    RUN_START = "run_start"
    MODEL_REQUEST = "model_request"
    MODEL_RESPONSE = "model_response"
    TOOL_START = "tool_start"
    TOOL_DONE = "tool_done"
    TOOL_ERROR = "tool_error"
    VALUE = "value"
    NOTE = "note"
    RUN_END = "run_end"


def chain_of(
    prev: str, *, run_id: str, seq: int, kind: str, name: str, key: str, payload: bytes, at: float
) -> str:
    """Return the chain hash of a frame given the previous frame's chain.

    ``xxh3_128(prev_chain || canonical([run_id, seq, kind, name, key, at]) || payload)``.
    It detects corruption, truncation and reordering, not deliberate forgery.
    """
    head = pack_tree([run_id, seq, kind, name, key, float(at)])
    return hash_hex(bytes.fromhex(prev) + head + payload)


def _chain_holds(frame: Frame, prev: str) -> bool:
    """True when ``frame.chain`` is :func:`chain_of` ``prev`` and the frame (inlined: one call).

    The head is packed by ormsgpack (compiled) as :func:`pack_tree` packs it: its
    fields are of the exact plain types for every frame a journal reads back; any
    other (or an error) takes :meth:`Frame.expected_chain`, the definition.
    """
    try:
        head = _ormsgpack_packb(
            [frame.run_id, frame.seq, frame.kind, frame.name, frame.key, float(frame.at)],
            option=_PLAIN_ONLY,
        )
        return frame.chain == _xxh3_hex(bytes.fromhex(prev) + head + frame.payload)
    except Exception:  # a field of another type (an int subclass, a bad hex chain...)
        return frame.chain == frame.expected_chain(prev)


@attrs.frozen(kw_only=True)
class Frame:
    """One journal record.

    Attributes:
        run_id: the run this frame belongs to.
        seq: dense 0-based position in the run.
        kind: a :class:`Kind` value (stored as its string).
        name: tool name, model step name (``openai:/chat/completions``), value name.
        key: :func:`call_key` of the call (32 hex digits), or ``""``.
        payload: canonical msgpack bytes (see :meth:`data`).
        chain: :func:`chain_of` this frame and the previous frame's chain.
        at: wall time when the frame was made, seconds since the Unix epoch.
        epoch: the run lease epoch of the writer (0 without a lease).
    """

    run_id: str
    seq: int
    kind: str
    name: str
    key: str
    payload: bytes
    chain: str
    at: float
    epoch: int = 0

    def data(self) -> Any:
        """Decode and return the payload (a dict for every frame redrive writes)."""
        return decode(self.payload)

    def expected_chain(self, prev: str) -> str:
        """Return the chain this frame should carry after a frame whose chain is ``prev``."""
        return chain_of(
            prev,
            run_id=self.run_id,
            seq=self.seq,
            kind=self.kind,
            name=self.name,
            key=self.key,
            payload=self.payload,
            at=self.at,
        )


def make_frame(
    *,
    run_id: str,
    seq: int,
    kind: Kind | str,
    name: str,
    payload: Any,
    prev_chain: str,
    key: str = "",
    at: float | None = None,
    epoch: int = 0,
    tree: bool = False,
) -> Frame:
    """Build a frame, encoding ``payload`` canonically and computing its chain.

    Args:
        run_id: the run the frame belongs to.
        seq: its position in the run.
        kind: a :class:`Kind` (stored as its string).
        name: the step name.
        payload: the value to encode canonically (see ``tree``).
        prev_chain: the chain of the frame before it (:data:`GENESIS` for seq 0).
        key: the call's key (32 hex digits), or ``""``.
        at: wall time in seconds since the Unix epoch (default: now).
        epoch: the writer's lease epoch.
        tree: ``payload`` is already a canonical tree (what :func:`canonical`
            returns, or a part-for-part copy of one): it is packed as it is,
            without walking it again. The bytes are the same either way.

    Raises:
        TypeError: ``payload`` cannot be encoded canonically.
    """
    kind = str(kind)
    body = pack_tree(payload) if tree else encode(payload, "payload")
    when = time.time() if at is None else float(at)
    chain = chain_of(
        prev_chain, run_id=run_id, seq=seq, kind=kind, name=name, key=key, payload=body, at=when
    )
    frame = Frame(
        run_id=run_id,
        seq=seq,
        kind=kind,
        name=name,
        key=key,
        payload=body,
        chain=chain,
        at=when,
        epoch=epoch,
    )
    _MADE.add((id(frame), prev_chain), frame)
    return frame


#: Frames :func:`make_frame` built, or whose chain :meth:`ChainCheck.problem` hashed and
#: found right, by identity and the chain they follow, while they live. Such a frame's
#: ``chain`` is :func:`chain_of` that chain and its own fields, computed from the very
#: values it holds, and a frame is frozen: so :meth:`ChainCheck.problem` takes its chain
#: as checked after that chain (the journal's check of the writer's own frames; a
#: replay's check of the frames a file's reader checked on open) without hashing its
#: payload a second time. A frame read anew, or following another chain, is hashed.
_MADE: Remembered[Frame] = Remembered()


#: What a reader of journals suggests after a failed chain check, by default.
VERIFY_ADVICE: Final = "Run `redrive verify` on the journal; restore it from a copy or an export."


@attrs.define
class ChainCheck:
    """Checks a run's frames one at a time, in seq order: the one seq and chain check (pure).

    Each frame must have the next seq (dense from ``next_seq``), belong to
    the run, and carry the chain of its content over the previous frame's.
    Feed it frames with :meth:`check` (raises) or ask :meth:`problem` (does
    not raise, does not advance) and then :meth:`advance`.

    Attributes:
        run_id: the run; None takes the run of the first frame checked.
        source: the journal (URL or file) named in error messages, or ``""``.
        next_seq: the seq the next frame must have (0 for a whole run).
        prev_chain: the chain of the frame before it (:data:`GENESIS` at seq 0).
        advice: the sentence after the error message that says what to do.
    """

    run_id: str | None = None
    source: str = ""
    next_seq: int = 0
    prev_chain: str = GENESIS
    advice: str = VERIFY_ADVICE
    #: remember a frame hashed and found right (:data:`_MADE`), so that a later check of
    #: the same frame object after the same chain is free; a reader that checks each
    #: frame once and lets it go (a replay's) passes False and skips the memo's store
    remember: bool = True

    @property
    def last_good_seq(self) -> int | None:
        """The seq of the last frame that passed (None before the first)."""
        return self.next_seq - 1 if self.next_seq > 0 else None

    def problem(self, frame: Frame) -> tuple[str, str] | None:
        """Return ``(reason, what is wrong)`` with ``frame`` as the next frame, or None.

        ``reason`` is ``"run"`` (another run's frame), ``"seq"`` (a gap or
        reordering) or ``"chain"`` (altered content or a broken link).
        """
        if self.run_id is not None and frame.run_id != self.run_id:
            return "run", f"belongs to run {frame.run_id!r}"
        if frame.seq != self.next_seq:
            return "seq", f"follows seq {self.next_seq - 1} (a gap or reordering)"
        key = (id(frame), self.prev_chain)
        if not _MADE.holds(key, frame):
            if not _chain_holds(frame, self.prev_chain):
                return "chain", "fails its chain check"
            if self.remember:
                _MADE.add(key, frame)  # hashed once: the next check of this frame object is free
        return None

    def advance(self, frame: Frame) -> None:
        """Take ``frame`` as checked: the next frame must follow it."""
        if self.run_id is None:
            self.run_id = frame.run_id
        self.prev_chain = frame.chain
        self.next_seq = frame.seq + 1

    def check(self, frame: Frame) -> Frame:
        """Check ``frame`` as the next frame of the run and advance past it.

        Returns:
            ``frame``.

        Raises:
            JournalCorruptError: the frame is another run's, out of seq, or
                fails its chain check (``reason`` says which).
        """
        found = self.problem(frame)
        if found is not None:
            raise self.error(frame.seq, *found, run_id=frame.run_id)
        self.advance(frame)
        return frame

    def error(
        self,
        seq: int | None,
        reason: str,
        what: str,
        *,
        run_id: str | None = None,
        inside: bool = False,
        **fields: Any,
    ) -> JournalCorruptError:
        """Build the :class:`JournalCorruptError` for frame ``seq`` (``what`` is wrong with it).

        Args:
            seq: the bad frame's seq (None when not known).
            reason: the error's ``reason`` field (``"seq"``, ``"chain"``, ``"payload"``...).
            what: the predicate of the message (``"fails its chain check"``).
            run_id: the run, when :attr:`run_id` is not yet known.
            inside: the frame passed its chain check but is bad inside (its
                payload): it is not good either, so the last good seq is the one
                before it.
            **fields: more structured fields of the error.

        Returns:
            The error (to raise).
        """
        run = self.run_id if self.run_id is not None else run_id
        last_good = self.last_good_seq
        if inside and seq is not None and last_good is not None and last_good >= seq:
            last_good = seq - 1 if seq > 0 else None
        where = f"{self.source}: " if self.source else ""
        at = f"frame seq {seq}" if seq is not None else "a frame"
        return JournalCorruptError(
            f"{where}run {run!r}: {at} {what}; the journal was altered, reordered or "
            f"truncated (last good seq {last_good}). {self.advice}".rstrip(),
            run_id=run,
            seq=seq,
            last_good_seq=last_good,
            reason=reason,
            source=self.source or None,
            **fields,
        )


def verify_chain(
    frames: Iterable[Frame],
    run_id: str | None = None,
    *,
    source: str = "",
    advice: str = VERIFY_ADVICE,
) -> Iterator[Frame]:
    """Yield a whole run's frames (from seq 0), each checked as it passes.

    Args:
        frames: the run's frames in seq order.
        run_id: the run (None: the run of the first frame).
        source: the journal named in error messages.
        advice: what the error message tells the reader to do.

    Yields:
        Each frame, after it passed its seq and chain check.

    Raises:
        JournalCorruptError: at the first frame that fails (see :meth:`ChainCheck.check`),
            with ``run_id``, ``seq``, ``last_good_seq`` and ``reason``.
    """
    check = ChainCheck(run_id, source=source, advice=advice)
    for frame in frames:
        yield check.check(frame)


#: Fields of frame payloads that readers use, with the types they must have when
#: present (every frame kind; a field a kind does not use is simply absent).
_INT_FIELDS: Final = ("turn", "step", "attempt")
_BOOL_FIELDS: Final = ("read_only", "restart_safe", "partial", "blocked", "retryable")
_STR_FIELDS: Final = ("idempotency_key", "event", "input_fp", "type", "module", "qualname")
_KIND_FIELDS: Final[dict[str, dict[str, tuple[type, ...]]]] = {
    "run_start": {"entrypoint": (str, type(None)), "flags": (dict,)},
    "run_end": {"status": (str,), "error": (str, type(None))},
    "tool_error": {"error": (dict,)},
    "error": {"notes": (list,)},  # a tool error's map (checked as the "error" kind)
}
_END_STATUSES: Final = frozenset({"succeeded", "failed", "cancelled", "running"})
#: The exact type of each field above that every kind checks (what needs no message).
_FIELD_TYPES: Final[dict[str, type]] = {
    **dict.fromkeys(_INT_FIELDS, int),
    **dict.fromkeys(_BOOL_FIELDS, bool),
    **dict.fromkeys(_STR_FIELDS, str),
}
_INT_END: Final = 2**63
#: Kinds with checks of their own (a run's first and last frame, a tool error).
_CHECKED_KINDS: Final = frozenset({*_KIND_FIELDS, "run_end", "tool_error"})


def payload_problem(kind: str, data: Any) -> str | None:
    """Check a decoded frame payload against the schema of its kind.

    Every payload is a map; the fields readers use (``turn``, ``step``...)
    must have their types when present (an int is never a bool); a
    ``run_end`` status must be a run status; a ``tool_error`` error a map
    whose ``type``, ``module``, ``qualname`` are strings.

    Args:
        kind: the frame's kind (a :class:`Kind` value).
        data: the decoded payload (:meth:`Frame.data`).

    Returns:
        None when the payload is well-formed, else ``"field: what is wrong"``.
    """
    if type(data) is dict and kind not in _CHECKED_KINDS:
        # one pass over the payload's own fields; anything off (or a subclass) takes the
        # ordered checks, which name the first problem
        for name in data:
            want = _FIELD_TYPES.get(name)
            if want is not None:
                value = data[name]
                if type(value) is not want or (want is int and not 0 <= data[name] < _INT_END):
                    break
        else:
            return None
    return _ordered_problem(kind, data)


def _ordered_problem(kind: str, data: Any) -> str | None:
    """:func:`payload_problem` by its ordered checks (the first problem in their order)."""
    if not isinstance(data, dict):
        return f"payload: expected a map, got {type(data).__name__}"
    for name in _INT_FIELDS:
        value = data.get(name)
        if name in data and (
            not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63
        ):
            return f"{name}: expected an int from 0 to 2**63-1, got {_brief(value)}"
    for name in _BOOL_FIELDS:
        if name in data and not isinstance(data[name], bool):
            return f"{name}: expected a bool, got {_brief(data[name])}"
    for name in _STR_FIELDS:
        if name in data and not isinstance(data[name], str):
            return f"{name}: expected a string, got {_brief(data[name])}"
    for name, allowed in _KIND_FIELDS.get(kind, {}).items():
        if name in data and not isinstance(data[name], allowed):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
            return f"{name}: expected {names}, got {_brief(data[name])}"
    if kind == "run_end" and data.get("status", "succeeded") not in _END_STATUSES:
        return f"status: {_brief(data.get('status'))} is not a run status"
    if kind == "tool_error":
        problem = payload_problem("error", data.get("error", {}))
        if problem is not None:
            return f"error.{problem}"
    return None


def _brief(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"
