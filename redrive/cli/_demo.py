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
    p = sub.add_parser("demo", parents=[common], help="the crash-resume demo", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_demo)
