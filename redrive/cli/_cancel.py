"""``redrive cancel``: end a run ``cancelled`` on purpose, naming who and why."""

from __future__ import annotations

import argparse
import getpass

from ..errors import UnknownRunError
from ._common import EXIT_OK, Subparsers
from ._journals import is_rdj_file, opened
from ._output import Out, run_row, shown

__all__ = ["register"]


def _default_by() -> str:
    """Who cancels when ``--by`` is not given: the login name, else ``"cli"``."""
    try:
        return f"{getpass.getuser()} (cli)"
    except (OSError, KeyError):  # no login name in this environment
        return "cli"


def _cancel(args: argparse.Namespace, out: Out) -> int:
    url = args.run if is_rdj_file(args.run) else args.journal
    journal = opened(url)
    run_id = journal.runs()[0].run_id if url == args.run else args.run
    if journal.get_run(run_id) is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {url}; list runs with `redrive runs`", run_id=run_id
        )
    record = journal.cancel(run_id, reason=args.reason, by=args.by or _default_by())
    if out.json:
        out.emit({"journal": url, "run": run_row(record)})
    else:
        out.line(f"run {shown(run_id)}  status {record.status}  ({shown(record.error)})")
    return EXIT_OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add the ``cancel`` command to the ``redrive`` parser's subcommands."""
    p = sub.add_parser(
        "cancel",
        parents=[common],
        help="end a run cancelled on purpose (a worker executing it stops at its next write)",
        description="End RUN with status cancelled, recording who and why. This is the only "
        "way a run ends cancelled: timeouts and signals leave it resumable. Exit 0 when "
        "cancelled; 1 when the run already ended (nothing changes) or the journal is "
        "read-only (.rdj); 3 when there is no such run.",
    )
    p.add_argument("run", help="run id in --journal")
    p.add_argument("--reason", required=True, help="why the run is cancelled (kept in the run)")
    p.add_argument("--by", help="who cancels it (default: your login name)")
    p.set_defaults(func=_cancel)
