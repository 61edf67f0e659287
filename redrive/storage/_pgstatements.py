"""The statements of the Postgres journal: the one-round-trip claim and the frames' insert.

See :mod:`.postgres` for how a claim is one conditional ``UPDATE`` and
``INSERT`` in one ``WITH`` statement.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..frames import Frame
from ._sqlschema import FRAME_ATTRS, FRAME_COLUMNS

#: Postgres array type of each frame column, for ``unnest`` (one parameter per column).
_FRAME_ARRAYS = (
    "varchar",
    "bigint",
    "varchar",
    "varchar",
    "varchar",
    "bytea",
    "varchar",
    "double precision",
    "bigint",
)


#: The run columns a compare-and-swap compares (everything a write may change).
_SWAP_COLUMNS = (
    "status",
    "next_seq",
    "last_chain",
    "updated_at",
    "output",
    "error",
    "lease_owner",
    "lease_epoch",
    "lease_expires",
)


@functools.lru_cache(maxsize=32)
def _append_statement(count: int, leaseless: bool, sync: bool, ends: bool) -> str:
    """The claim statement for ``count`` frames (0, 1, or 2 for two or more; cached).

    Updates the run row ``WHERE`` the fence, seq, chain and status are what
    the writer checked, and inserts the frames only if that matched. The
    statement's own command is the ``INSERT`` (the ``UPDATE`` is its ``WITH``;
    with no frames, the ``UPDATE`` alone), so its row count says whether it
    wrote: the frames' count when it did, 0 when the run row had changed
    (nothing written). No result rows travel back.

    Parameters, in order: the row's new next_seq, last_chain, updated_at,
    then (``ends`` only: the write also sets the status, output or error)
    status, output, error; the known run_id, next_seq, last_chain, status,
    lease_epoch; the time now (``leaseless`` only: no live lease may exist);
    then :func:`_frame_arrays`. Without ``ends`` the row's status, output
    and error stay as they are (they are still compared: the status in the
    ``WHERE``).
    """
    fence = "lease_epoch = %s"
    if leaseless:
        fence += " AND (lease_owner IS NULL OR lease_expires IS NULL OR lease_expires <= %s)"
    sets = "next_seq = %s, last_chain = %s, updated_at = %s"
    if ends:
        sets += ", status = %s, output = %s, error = %s"
    update = (
        f"UPDATE redrive_runs SET {sets} "
        f"WHERE run_id = %s AND next_seq = %s AND last_chain = %s AND status = %s AND {fence}"
    )
    # SET LOCAL for this statement's own transaction, in a CTE its command reads
    relaxed = "" if sync else "s AS (SELECT set_config('synchronous_commit', 'off', true)), "
    relaxed_if = "" if sync else " AND EXISTS (SELECT 1 FROM s)"
    if not count:
        return (f"WITH {relaxed[:-2]} " if relaxed else "") + update + relaxed_if
    return (
        f"WITH {relaxed}r AS ({update} RETURNING 1) "
        f"{_insert_frames_sql(count)} WHERE EXISTS (SELECT 1 FROM r){relaxed_if}"
    )


def _insert_frames_sql(count: int) -> str:
    """``INSERT`` of ``count`` frames as a ``SELECT`` (to be followed by a ``WHERE``).

    One frame (the common claim) is one row of scalar parameters; more frames
    are one array parameter per column (``unnest``), so the statement text does
    not depend on how many.
    """
    if count == 1:
        values = ", ".join(f"%s::{t}" for t in _FRAME_ARRAYS)
        return f"INSERT INTO redrive_frames ({', '.join(FRAME_COLUMNS)}) SELECT {values}"
    arrays = ", ".join(f"%s::{t}[]" for t in _FRAME_ARRAYS)
    return f"INSERT INTO redrive_frames ({', '.join(FRAME_COLUMNS)}) SELECT * FROM unnest({arrays})"


def _frame_arrays(frames: Sequence[Frame]) -> list[Any]:
    """The parameters of :func:`_insert_frames_sql` for ``frames``."""
    if len(frames) == 1:
        return [getattr(frames[0], a) for a in FRAME_ATTRS]
    return [[getattr(f, a) for f in frames] for a in FRAME_ATTRS]
