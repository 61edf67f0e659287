"""Writing hostile run files straight from frames, past the writer's checks (for tests).

The writer refuses what no journal could read back, so tests that hand the
readers a hostile file write its bytes here, in the ``.rdj`` layout
(:mod:`redrive.storage.rdj._format`), re-chaining the frames so every chain and
checksum is valid.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import attrs

from redrive.frames import GENESIS, Frame
from redrive.storage import RunRecord
from redrive.storage.rdj._format import (
    RDJ_VERSION,
    TAG_END,
    TAG_FRAME,
    TAG_HEADER,
    header_bytes,
    pack,
    preamble_bytes,
    record_bytes,
)


def rechained(frames: Sequence[Frame]) -> list[Frame]:
    """Return ``frames`` with each chain recomputed over the one before (a valid chain)."""
    prev, out = GENESIS, []
    for frame in frames:
        new = attrs.evolve(frame, chain=frame.expected_chain(prev))
        prev = new.chain
        out.append(new)
    return out


def write_rdj(
    path: str | os.PathLike[str],
    record: RunRecord,
    frames: Sequence[Frame],
    *,
    flags: dict[str, Any] | None = None,
    chain: bool = True,
) -> str:
    """Write ``frames`` of run ``record`` as an ``.rdj`` file, bypassing every check.

    Args:
        path: the file to write.
        record: the run row (its ``next_seq`` and ``last_chain`` are set from ``frames``).
        frames: the frames, written as they are (re-chained first when ``chain``).
        flags: the header's flags.
        chain: re-chain the frames so the chain and the end record are valid.

    Returns:
        The path written.
    """
    frames = rechained(frames) if chain else list(frames)
    last = frames[-1].chain if frames else GENESIS
    record = attrs.evolve(record, next_seq=len(frames), last_chain=last)
    body = [
        preamble_bytes(RDJ_VERSION),
        record_bytes(TAG_HEADER, header_bytes(record, flags or {})),
    ]
    for f in frames:
        row = [f.seq, f.kind, f.name, f.key, f.payload, f.chain, f.at, f.epoch]
        body.append(record_bytes(TAG_FRAME, pack(row)))
    body.append(record_bytes(TAG_END, pack({"frames": len(frames), "last_chain": last})))
    with open(path, "wb") as out:
        out.write(b"".join(body))
    return os.fspath(path)
