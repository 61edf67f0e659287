"""Simulated workers in one process: each gets its own handle on a shared journal.

redrive refuses a second live block of one run on one journal object in a
process (``RunBusyError``, reason ``open_here``): within a process one block
per run is the rule. Tests of what happens between *workers* (separate
processes in production: lost claims, leases, fencing) give each simulated
worker its own handle, as a second process has its own journal object.
"""

from __future__ import annotations

from typing import Any, cast

from redrive.storage import Journal


class _Handle:
    """Another object over the same journal: every attribute is the journal's own."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)


def worker_handle(journal: Journal) -> Journal:
    """Return a handle on ``journal`` for a simulated worker (same data, another object)."""
    return cast(Journal, _Handle(journal))
