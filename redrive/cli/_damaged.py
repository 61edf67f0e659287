"""Damaged runs: ``redrive drop RUN`` and ``redrive export RUN --intact``.

A run whose records or rows cannot be read is damaged: reading, resuming or
writing it raises :class:`~redrive.errors.JournalCorruptError`, and every
other run reads and resumes as before. ``redrive runs`` lists it as
``damaged``; ``export --intact`` saves the frames that still pass every check
(as an unfinished run, which an import can inspect or resume), and ``drop``
deletes it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from .._runcheck import check_run
from ..errors import JournalCorruptError, ReplayError
from ..frames import Frame
from ..replay import StepReader
from ..storage import Journal, MemoryJournal, RunRecord, frame_problem
from ._common import EXIT_FAILED, EXIT_OK, CliError, Subparsers
from ._journals import opened
from ._output import Out, shown

__all__ = ["damage_of", "export_intact", "register"]


def damage_of(journal: Journal, run_id: str) -> str | None:
    """Why run ``run_id`` is damaged (the error's message), or None when every read passes."""
    held = getattr(journal, "damaged_runs", None)
    if held is not None and run_id in held():
        return str(held()[run_id])
    try:
        record = journal.get_run(run_id)
        if record is None:
            return None
        check_run(record, journal.frames(run_id), source=journal.url)
    except JournalCorruptError as exc:
        return exc.message
    return None


def _intact(journal: Journal, run_id: str) -> tuple[RunRecord | None, Iterator[Frame]]:
    held = getattr(journal, "damaged_runs", None)
    if held is not None and run_id in held():
        intact: tuple[RunRecord | None, Iterator[Frame]] = journal.intact(run_id)  # type: ignore[attr-defined]
        return intact
    return journal.get_run(run_id), journal.frames(run_id)


def export_intact(journal: Journal, run_id: str, path: str) -> tuple[RunRecord, int]:
    """Export the frames of a (damaged) run that pass every check, up to the first that fails.

    The copy is an unfinished run (``running``): importing it lets a person
    inspect it, or resume it (a tool step cut in flight then blocks, as after
    a crash, until ``redrive resolve`` settles it).

    Returns:
        ``(the exported row, frames the run holds past the intact ones)``.

    Raises:
        UnknownRunError-like CliError: the run is not in the journal, or no frame is intact.
    """
    from ..storage.rdj import export_run

    row, frames = _intact(journal, run_id)
    if row is None:
        raise CliError("UnknownRunError", f"no run {run_id!r} in journal {journal.url}", 3)
    reader = StepReader(run_id)
    kept: list[Frame] = []
    try:
        for frame in frames:
            if frame_problem(frame) is not None:
                break
            reader.feed(frame)
            kept.append(frame)
    except ReplayError:
        pass
    if not kept:
        raise CliError(
            "JournalCorruptError",
            f"run {run_id!r}: not even its first frame is intact; nothing to export",
            EXIT_FAILED,
        )
    copy = MemoryJournal()
    start = RunRecord(
        run_id=run_id,
        input_fp=row.input_fp,
        entrypoint=row.entrypoint,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
    copy.create_run(start, kept[0])
    copy.append(run_id, kept[1:], expected_seq=1)
    return export_run(copy, run_id, path), max(row.next_seq - len(kept), 0)


def _drop(args: argparse.Namespace, out: Out) -> int:
    journal = opened(args.journal)
    run_id = args.run
    why = damage_of(journal, run_id)
    if why is None:
        raise CliError(
            "UsageError",
            f"run {run_id!r} is not damaged (or not in {args.journal}): drop deletes only a "
            "damaged run; delete ended runs with `redrive prune`",
            EXIT_FAILED,
        )
    dropper = getattr(journal, "drop_damaged", None)
    if dropper is None or not dropper(run_id):
        row = journal.get_run(run_id)
        if row is None or not journal.delete_run(run_id, expected_seq=row.next_seq):
            raise CliError("UsageError", f"run {run_id!r} changed while it was dropped", 1)
    data: dict[str, Any] = {"dropped": run_id, "damage": why}
    if out.json:
        out.emit(data)
    else:
        out.line(f"dropped damaged run {shown(run_id)} from {shown(args.journal)}")
    return EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add ``drop`` to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "drop",
        parents=[common],
        help="delete a damaged run (one `redrive runs` lists as damaged)",
        description="Delete RUN when it is damaged (its records cannot be read; every other "
        "run is unaffected). Export what is intact first with `redrive export RUN --intact "
        "-o FILE.rdj`. A readable run is refused (use `redrive prune`). Exit 0 when dropped, "
        "1 when the run is not damaged.",
    )
    p.add_argument("run", help="run id in --journal")
    p.set_defaults(func=_drop)
