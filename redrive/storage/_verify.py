"""Verifying a run as stored: its frames' seq and chain, and its run row (read-only)."""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import UnknownRunError
from ..frames import ChainCheck, Frame, verify_chain
from ._base import Journal

__all__ = ["verify_frames", "verify_run"]


def verify_frames(frames: Iterator[Frame], *, source: str) -> int:
    """Check seq density and the chain of a run's frames; return the frame count.

    Raises:
        JournalCorruptError: a gap, a reordering or a broken chain, naming the
            last good seq.
    """
    count = 0
    for _ in verify_chain(frames, source=source, advice=""):
        count += 1
    return count


def verify_run(journal: Journal, run_id: str) -> int:
    """Check a stored run: every frame's seq and chain, and that the run row agrees.

    Args:
        journal: the journal holding the run.
        run_id: the run.

    Returns:
        The number of frames (all of them good).

    Raises:
        UnknownRunError: no such run.
        JournalCorruptError: a gap, a reordering or a broken chain (``reason``
            ``"seq"``, ``"chain"``), or fewer or more frames than the row says,
            or a last chain that is not the row's (``reason`` ``"count"``);
            ``last_good_seq`` names the last good frame.
    """
    record = journal.get_run(run_id)
    if record is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {journal.url}; list runs with `redrive runs`",
            run_id=run_id,
        )
    check = ChainCheck(run_id, source=journal.url, advice="")
    for frame in journal.frames(run_id):
        check.check(frame)
    if check.next_seq != record.next_seq or check.prev_chain != record.last_chain:
        raise check.error(
            None,
            "count",
            f"is missing or extra: the run has {check.next_seq} frames where its row says "
            f"{record.next_seq}",
        )
    return check.next_seq
