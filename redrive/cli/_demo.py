"""``redrive demo``: the crash-resume demo (:func:`redrive.demo.main`)."""

from __future__ import annotations

import argparse

from ._common import Subparsers
from ._output import Out

__all__ = ["register"]


def _demo(args: argparse.Namespace, out: Out) -> int:
    from .. import demo

    argv = list(args.rest)
    if out.json:
        argv.append("--json")
    return int(demo.main(argv) or 0)


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``demo`` command; its arguments are passed to the demo unparsed."""
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="the crash-resume demo",
        add_help=False,
        description="Run the crash-resume demo (an agent killed mid-run, then resumed without "
        "repeating its side effect); `redrive demo --help` lists its own options.",
    )
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the demo's own options")
    p.set_defaults(func=_demo)
