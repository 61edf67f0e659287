"""``redrive view``: a run (or two side by side) as one self-contained HTML timeline."""

from __future__ import annotations

import argparse
import os

from ._common import EXIT_OK, Subparsers
from ._journals import source
from ._output import Out, shown
from ._shares import add_allow_secrets, refuse_secrets
from ._spend import add_prices_option, prices_from

__all__ = ["register"]


def _view(args: argparse.Namespace, out: Out) -> int:
    from ..replay import render_compare, render_run

    journal_a, a = source(args.a, args.journal)
    refuse_secrets(journal_a, a, "write the page of", allowed=args.allow_secrets)
    if args.b is None:
        document = render_run(journal_a, a, prices=prices_from(args))
        default = f"{_safe(a)}.html"
    else:
        journal_b, b = source(args.b, args.journal)
        refuse_secrets(journal_b, b, "write the page of", allowed=args.allow_secrets)
        document = render_compare(journal_a, a, journal_b, b)
        default = f"{_safe(a)}--{_safe(b)}.html"
    path = args.output or default
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(document)
    if out.json:
        out.emit({"path": path, "runs": [x for x in (a, args.b and b) if x]})
    else:
        out.line(
            f"wrote the timeline to {shown(path)} (open it in a browser: {os.path.abspath(path)})"
        )
    return EXIT_OK


def _safe(run_id: str) -> str:
    """A file name made of ``run_id`` (other characters than letters, digits, ``-._``: ``_``)."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in run_id)[:80] or "run"


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``view`` command to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "view",
        parents=[common],
        help="write a run's timeline (or two runs side by side) as one HTML file",
        description="Write RUN's timeline as one self-contained HTML file; with RUN_B, both "
        "side by side with their first divergence marked as `redrive diff` names it. The runs "
        "are scanned for secrets first: the command refuses (exit 65) unless --allow-secrets.",
    )
    p.add_argument("a", metavar="RUN", help="run id or .rdj file")
    p.add_argument(
        "b",
        metavar="RUN_B",
        nargs="?",
        help="a second run to compare (first divergent step marked)",
    )
    p.add_argument("-o", "--output", metavar="FILE.html", help="where to write (default RUN.html)")
    add_allow_secrets(p)
    add_prices_option(p)
    p.set_defaults(func=_view)
