"""One attempt of a model program in a fresh process (``tests/unit/test_differential.py``).

Usage: ``python -m tests.model.child JOURNAL LEDGER PROGRAM_JSON FACE KILL_AT REPLAY``.
``PROGRAM_JSON`` is a list of items, each a call ``[kind, name, arg]`` or a batch (a list
of calls); ``KILL_AT`` is ``boundary:step name:nth`` (the process SIGKILLs itself there)
or ``none``; ``REPLAY`` is ``live`` or ``only`` (``live=False``). Tool bodies append to
``LEDGER`` (fsynced). Prints one JSON line: the callers' answers, the error's class, the
run's status.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from redrive.testing import crash_at
from tests.model import driver
from tests.model.resume_model import Batch, Call, Item


def items_of(data: list[Any]) -> tuple[Item, ...]:
    """The program a JSON list describes."""
    out: list[Item] = []
    for item in data:
        if item and isinstance(item[0], list):
            out.append(Batch(tuple(Call(*c) for c in item)))
        else:
            out.append(Call(*item))
    return tuple(out)


def main(argv: list[str]) -> int:
    """Run the attempt; print what it did; return 0."""
    journal_url, ledger, program, face, kill_at, replay = argv
    import redrive

    if kill_at != "none":
        point, name, nth = kill_at.split(":")
        crash_at(point, name, nth=int(nth), kill=True)
    world = driver.World(ledger_file=ledger)
    journal = redrive.open_journal(journal_url)
    options: dict[str, Any] = {"replay": "strict", "live": replay == "live"}
    seen = driver.attempt(
        journal, "cold", driver.Program(items_of(json.loads(program)), world, face), options
    )
    got = {k: str(v) for k, v in seen.got.items()}
    error = type(seen.error).__name__ if seen.error is not None else None
    print(json.dumps({"got": got, "error": error, "status": seen.status}))
    journal.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
