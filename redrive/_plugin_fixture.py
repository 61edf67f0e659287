"""The pytest plugin's ``redrive_run`` fixture: a test recorded to, or replayed from, its journal.

Part of :mod:`redrive.pytest_plugin` (see its docstring); imports nothing of
redrive's engine until a test uses the fixture. The recording itself is
:func:`._plugin_record.recording`, shared with the fixtures of wider scopes
(:mod:`._plugin_scopes`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ._plugin_guard import _BLOCKED
from ._plugin_modes import _rerecord_command, journal_path
from ._plugin_record import Target, recording

if TYPE_CHECKING:
    from redrive.replay import Run


_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


def target_of_test(item: pytest.Item) -> Target:
    """The recording of a test: its journal file, ``test:<node id>``, its marker's options."""
    marker = item.get_closest_marker("redrive")
    return Target(
        nodeid=item.nodeid,
        what="this test",
        path=journal_path(item),
        run_id=f"test:{item.nodeid}",
        options=dict(marker.kwargs) if marker is not None else {},
        config=item.config,
        rerecord=_rerecord_command(item),
    )


@pytest.fixture
def redrive_run(request: pytest.FixtureRequest) -> Iterator[Run]:
    """Run the test inside a redrive run backed by its ``.rdj`` journal file; yield the Run.

    Runs the test's code opens (``redrive.run``, ``@redrive.durable``) go to the
    same journal and are saved with it (``<test>.runs/``). The plugin sets this
    fixture up before every other function-scoped fixture of the test, so what
    those fixtures call is recorded in the test's run too.
    """
    item = request.node

    def passed() -> bool:
        call = item.stash.get(_REPORTS, {}).get("call")
        return call is not None and call.passed

    with recording(target_of_test(item), item.stash.setdefault(_BLOCKED, []), passed) as run:
        yield run
