"""The committed form of a test recording: what two recordings of the same behaviour share.

Part of :mod:`redrive.pytest_plugin`. A recording is saved *settled*: every
value that differs between two recordings of the same behaviour, and that
the loop under test never receives, is left out or fixed:

- each frame's wall time (``at``) is ``0.0`` and its lease epoch ``0``; the
  chains are recomputed over the settled frames (so they are as stable as the
  content they cover);
- a ``model_request``'s ``started_at`` (a wall-clock reading kept for
  durations) is dropped; readers fall back to the frame's time;
- the worker (host, pid) named by the ``run_start`` and by a ``resumed`` note
  is dropped;
- the ``run_start`` fingerprint's ``app_version`` (the git commit, the
  ``REDRIVE_APP_VERSION`` variable or the package version, unless the run
  was given ``app_version=``) is ``None`` with source ``"omitted"``;
- the run row's ``created_at`` / ``updated_at`` and the ``.rdj`` header's
  ``exported_at`` are ``0.0``; a lease (owner: host, pid) is never exported.

What the loop receives stays as it was received (invariant 16): response
headers that describe the transport rather than the answer (:data:`VOLATILE_HEADERS`,
from :mod:`redrive._volatile`:
``date``, ``server``, processing times, rate-limit counters, request ids)
are kept. Instead, a file already on disk whose steps equal the new
recording's in everything but those (and the fields above) is left as it is:
re-recording unchanged behaviour leaves the committed bytes alone, whatever
the commit, clock, host, process or header timing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs
import msgpack

from ._volatile import VOLATILE_HEADERS, volatile_header
from .frames import GENESIS, Frame, Kind

if TYPE_CHECKING:
    from .storage import Journal, RunRecord

__all__ = ["VOLATILE_HEADERS", "save_settled", "settled_frames"]

#: Ext code of a stored value (a tool's result or a model's response as handed back).
_STORED_EXT = 10
#: What a settled fingerprint says of the app version (see :mod:`._whatchanged`).
OMITTED = "omitted"


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _pack(tree: Any) -> bytes:
    return msgpack.packb(tree, use_bin_type=True, use_single_float=False)  # type: ignore[no-any-return]


def _settled_payload(frame: Frame) -> bytes:
    """``frame``'s payload with the volatile fields of its kind left out (bytes kept otherwise).

    The payload is edited as a msgpack tree (ext values kept as they are), and
    only when that tree re-encodes to the very same bytes: a payload this
    cannot round-trip is kept whole.
    """
    resumed = frame.kind == Kind.NOTE.value and frame.name == "resumed"
    if frame.kind not in (Kind.RUN_START.value, Kind.MODEL_REQUEST.value) and not resumed:
        return frame.payload
    try:
        tree = _unpack(frame.payload)
    except Exception:
        return frame.payload
    if not isinstance(tree, dict) or _pack(tree) != frame.payload:
        return frame.payload
    if frame.kind == Kind.MODEL_REQUEST.value:
        tree.pop("started_at", None)
    elif resumed:
        tree.pop("worker", None)
    else:
        tree.pop("worker", None)
        found = tree.get("fingerprint")
        if isinstance(found, dict) and found.get("app_version_source") != "option":
            if "app_version" in found:
                found["app_version"] = None
            if "app_version_source" in found:
                found["app_version_source"] = OMITTED
    return _pack(tree)


def settled_frames(frames: Iterable[Frame]) -> Iterator[Frame]:
    """``frames`` (one run, in seq order), settled as the module docstring says, and rechained."""
    prev = GENESIS
    for frame in frames:
        moved = attrs.evolve(frame, payload=_settled_payload(frame), at=0.0, epoch=0)
        settled = attrs.evolve(moved, chain=moved.expected_chain(prev))
        prev = settled.chain
        yield settled


def _masked(frame: Frame) -> Any:
    """A settled frame's payload as a tree, with the values of volatile response headers masked."""
    tree = _unpack(frame.payload)
    if frame.kind != Kind.MODEL_RESPONSE.value or not isinstance(tree, dict):
        return tree
    response = tree.get("response")
    if isinstance(response, msgpack.ExtType) and response.code == _STORED_EXT:
        response = _unpack(response.data)
    if isinstance(response, dict) and isinstance(response.get("headers"), list):
        response["headers"] = [
            [pair[0], None]
            if isinstance(pair, list) and pair and volatile_header(pair[0])
            else pair
            for pair in response["headers"]
        ]
    return {**tree, "response": response}


def _behaviour(record: RunRecord, frames: Iterable[Frame]) -> tuple[Any, ...]:
    """What a recording says happened: its steps and outcome, every volatile part left out."""
    steps = [(f.seq, f.kind, f.name, f.key, _masked(f)) for f in settled_frames(frames)]
    outcome = (record.run_id, record.status, record.output, record.error, record.input_fp)
    return (outcome, record.entrypoint, steps)


def _recorded(path: Path) -> tuple[RunRecord, list[Frame]] | None:
    """The run saved at ``path`` (either format), or None when it is missing or unreadable."""
    from .storage.rdj import RdjJournal, read_text

    if not path.exists():
        return None
    try:
        if path.name.endswith(".jsonl"):
            return read_text(path)
        rdj = RdjJournal(path)
        record = rdj.get_run(rdj.run_id)
        return None if record is None else (record, list(rdj.frames(rdj.run_id)))
    except Exception:
        return None


@attrs.frozen
class _SettledView:
    """One run of a journal, settled, as much of a journal as an export reads."""

    journal: Journal
    record: RunRecord
    frames_: list[Frame]

    @property
    def url(self) -> str:
        return self.journal.url

    def get_run(self, run_id: str) -> RunRecord | None:
        return self.record if run_id == self.record.run_id else None

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        return iter(self.frames_[start:] if run_id == self.record.run_id else [])


def save_settled(journal: Journal, run_id: str, path: Path) -> bool:
    """Save run ``run_id`` of ``journal`` to ``path`` settled, unless ``path`` already holds it.

    Args:
        journal: holds the recorded run.
        run_id: the run.
        path: its file (``.rdj``, or ``.rdj.jsonl`` for the text form).

    Returns:
        True when the file was written; False when ``path`` already held a
        recording of the same behaviour (same steps and outcome; only the
        fields this module leaves out, or volatile header values, differ),
        which is left byte for byte as it was.

    Raises:
        UnknownRunError / JournalCorruptError: as :func:`~redrive.storage.rdj.export_run`.
    """
    from .storage.rdj import export_run

    record = journal.get_run(run_id)
    if record is None:  # let export_run name the problem
        export_run(journal, run_id, path)
        return True
    frames = list(settled_frames(journal.frames(run_id)))
    settled = attrs.evolve(
        record,
        created_at=0.0,
        updated_at=0.0,
        last_chain=frames[-1].chain if frames else GENESIS,
        lease_owner=None,
        lease_epoch=0,
        lease_expires=None,
    )
    old = _recorded(path)
    if old is not None and _behaviour(*old) == _behaviour(settled, frames):
        return False
    view = cast("Journal", _SettledView(journal, settled, frames))
    export_run(view, run_id, os.fspath(path), exported_at=0.0)
    return True
