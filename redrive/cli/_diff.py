"""``redrive diff``: where two runs first differ, as :func:`redrive.diff_runs` finds it."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from ..replay import RunDiff, StepView, diff_runs
from ._common import EXIT_FAILED, EXIT_OK, Subparsers
from ._journals import source
from ._output import Out, shown
from ._steps import count_steps

__all__ = ["diff_document", "diff_text", "register"]


def _step(step: StepView | None) -> dict[str, Any] | None:
    return None if step is None else attrs.asdict(step)


def _argument_path(path: str) -> str:
    """Return ``$.args.x`` as ``$.x``: the path inside the step's arguments (as in a divergence)."""
    return "$" + path.removeprefix("$.args") if path.startswith("$.args") else path


def diff_document(a: str, b: str, found: RunDiff | None) -> dict[str, Any]:
    """Return the ``--json`` document of ``redrive diff`` for :func:`redrive.diff_runs`'s answer.

    Args:
        a: the first run's id.
        b: the second run's id.
        found: what :func:`redrive.diff_runs` returned for them (None: no difference).

    Returns:
        ``{"a", "b", "identical", "what", "index", "location", "first_divergent_step",
        "output_diff"}``: ``what`` and ``index`` as in :class:`~redrive.replay.RunDiff`
        (None when identical), ``location`` as the text names it (``seq 5 (step 2)``);
        ``first_divergent_step`` is None when identical or when only the runs' ends
        differ, else ``{"index", "what", "a", "b", "diff"}`` with both steps in full
        (seq, kind, name, args, status, outcome; None where a run has no step) and
        ``diff`` as ``[path, a, b]`` leaves, argument paths from ``$`` (the step's
        arguments), outcome paths from ``$.outcome``; ``output_diff`` the
        ``[path, a, b]`` leaves of the runs' ends (``$.run_end.status``,
        ``$.run_end.output``, ``$.run_end.error``), whatever else differs.
    """
    document: dict[str, Any] = {
        "a": a,
        "b": b,
        "identical": found is None,
        "what": None if found is None else found.what,
        "index": None if found is None else found.index,
        "location": None if found is None else found.location(),
        "first_divergent_step": None,
        "output_diff": [],
    }
    if found is None:
        return document
    document["output_diff"] = [list(leaf) for leaf in found.ends]
    if found.what != "output":
        leaves = [
            [_argument_path(p) if found.what == "args" else p, x, y] for p, x, y in found.diff
        ]
        document["first_divergent_step"] = {
            "index": found.index,
            "what": found.what,
            "a": _step(found.step_a),
            "b": _step(found.step_b),
            "diff": leaves,
        }
    return document


def diff_text(a: str, b: str, found: RunDiff) -> list[str]:
    """Return the lines ``redrive diff`` prints for a difference (without ``--json``).

    :meth:`RunDiff.lines <redrive.replay.RunDiff.lines>` (the library's one
    rendering, which the two-run ``redrive view`` shows too), argument paths
    from ``$`` (the step's arguments) as a divergence error prints them.
    """
    if found.what != "args":
        return found.lines()
    shown_diff = [(_argument_path(p), x, y) for p, x, y in found.diff]
    return attrs.evolve(found, diff=shown_diff).lines()


def _diff(args: argparse.Namespace, out: Out) -> int:
    journal_a, a = source(args.a, args.journal)
    journal_b, b = source(args.b, args.journal)
    found = diff_runs(a, b, journal=journal_a, journal_b=journal_b)
    if out.json:
        out.emit(diff_document(a, b, found))
    elif found is None:
        steps = count_steps(journal_a, a)
        out.line(f"{shown(a)} and {shown(b)}: the same {steps} steps and the same output", "green")
    else:
        for line in diff_text(a, b, found):
            out.line(line)
    return EXIT_OK if found is None else EXIT_FAILED


def _textconv(args: argparse.Namespace, out: Out) -> int:
    """Print a run file as its JSON Lines text form (a git ``textconv`` diff driver)."""
    import sys

    from ..storage.rdj import RdjJournal, is_text_path, read_text, text_lines

    if is_text_path(args.file):
        record, frames = read_text(args.file)
        lines = text_lines(record, frames)
    else:
        journal = RdjJournal(args.file)
        record_or_none = journal.get_run(journal.run_id)
        assert record_or_none is not None
        lines = text_lines(record_or_none, journal.frames(journal.run_id))
    for line in lines:
        sys.stdout.write(line + "\n")
    return EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``diff`` and ``textconv`` commands to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "textconv",
        parents=[common],
        help="print an .rdj file as JSON Lines, one frame a line (a git diff driver)",
        description="Print FILE as its JSON Lines text form on stdout, volatile fields last: "
        "set it as a git textconv driver (`git config diff.rdj.textconv 'redrive textconv'`) "
        "to review recorded runs as text.",
    )
    p.add_argument("file", metavar="FILE", help=".rdj file (or .jsonl)")
    p.set_defaults(func=_textconv)
    p = sub.add_parser(
        "diff",
        parents=[common],
        help="where two runs first differ, and how their ends differ",
        description="Compare two runs step by step (kind, name, arguments, status, outcome) and "
        "their ends (status, output, error). Response ids, HTTP Date and rate-limit headers and "
        "created times are not differences. Exit 0 when they agree, 1 when they differ.",
    )
    p.add_argument("a", metavar="A", help="run id or .rdj file")
    p.add_argument("b", metavar="B", help="run id or .rdj file")
    p.set_defaults(func=_diff)
