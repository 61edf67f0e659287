"""``redrive what-changed RUN``: a run's fingerprint against the current code."""

from __future__ import annotations

import argparse

from .._entry import import_paths as _import_paths
from .._whatchanged import what_changed
from ._common import EXIT_FAILED, EXIT_OK, Subparsers, add_import_path, import_paths
from ._journals import source
from ._output import Out

__all__ = ["register"]


def _what_changed(args: argparse.Namespace, out: Out) -> int:
    journal, run_id = source(args.run, args.journal)
    imports = import_paths(args)
    with _import_paths(imports):
        found = what_changed(journal, run_id, replay=not args.no_replay)
    if out.json:
        out.emit(found.to_dict())
    else:
        out.line(found.summary())
    return EXIT_FAILED if found.changed or found.undetermined else EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``what-changed`` command to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "what-changed",
        parents=[common],
        help="compare a run's fingerprint with the current code, before resuming it",
        description="Import RUN's entrypoint (from the current directory and each -I DIR), "
        "compare its recorded fingerprint (app version, redrive version, tool set) with the "
        "current code, and name the recorded steps that would not replay under strict "
        "replay; unless --no-replay, also re-drive it replay-only over an in-memory copy to "
        "find the first drifting step (a changed prompt). Exit 0 when nothing changed, 1 "
        "when something did or the replay could not tell (it stopped where the run goes "
        "live with recorded steps left), 3 when there is no such run.",
    )
    p.add_argument("run", help="run id in --journal, or an .rdj file")
    add_import_path(p)
    p.add_argument(
        "--no-replay",
        action="store_true",
        help="compare the fingerprint only (app and redrive versions, tools, and the system "
        "prompts against the string literals of the entrypoint's package), without re-driving "
        "the run",
    )
    p.set_defaults(func=_what_changed)
