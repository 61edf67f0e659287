"""The redrive pytest plugin: tests that record their model and tool calls once, replay forever.

Registered through the ``pytest11`` entry point; it imports nothing of
redrive until a test asks for it. Use the ``redrive_run`` fixture, or the
marker (which implies the fixture)::

    @pytest.mark.redrive(record_mode="once")
    def test_refund(redrive_run):
        assert agent.handle("refund A-100") == ...

The test runs inside a run whose journal is the file
``<test dir>/journals/<module>/<test name>.rdj``. The file name is the test's
name with anything but letters, digits, ``_``, ``.`` and ``-`` turned into
``_``; when that changed the name, or the test is in a class, a short hash of
the test's id within its module follows (``test_lookup_order_1-3f2a9c41.rdj``),
so parametrized ids such as ``"order 1"`` and ``"order_1"`` get distinct files.
Two tests that would still share one file (the same ``path=`` in their markers)
stop the session with a usage error naming both. Record modes (vcrpy's):

``once``
    record when the file is missing, otherwise replay only (the default locally).
``new_episodes``
    replay what the file has (matched leniently), record new calls, save the file again.
``none``
    replay only; a call nobody recorded fails with ``ReplayMissError`` naming the
    call and the closest recorded steps; a missing file fails (the default when ``CI`` is set).
``all``
    record again, overwriting the file.

Choose with ``--redrive-record-mode`` or per test with the marker's
``record_mode`` (the marker wins, except that ``--redrive-record-mode=all``
re-records every test). Recordings of failing tests are not saved.
A journal whose steps a passing test no longer uses completely is listed in
the terminal summary.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from redrive.replay import Run

__all__ = ["MODES", "default_record_mode", "journal_path", "redrive_run"]

#: The record modes.
MODES = ("once", "new_episodes", "none", "all")

_UNUSED = pytest.StashKey[list[str]]()
#: The longest readable part of a journal file name (file systems allow 255 bytes).
_MAX_NAME = 120
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--redrive-record-mode``."""
    group = parser.getgroup("redrive", "redrive record/replay")
    group.addoption(
        "--redrive-record-mode",
        choices=MODES,
        default=None,
        help="record mode for tests using redrive_run: once (default), new_episodes, none "
        "(default when CI is set), all",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``redrive`` marker."""
    config.addinivalue_line(
        "markers",
        "redrive(record_mode=None, path=None, replay=None): run the test inside a redrive run "
        "recorded to journals/<module>/<test>.rdj next to the test file",
    )
    config.stash[_UNUSED] = []


def default_record_mode(config: pytest.Config) -> str:
    """Return the command-line mode, else ``none`` when ``CI`` is set, else ``once``."""
    chosen = config.getoption("--redrive-record-mode", default=None)
    if chosen:
        return str(chosen)
    return "none" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "once"


def journal_path(item: pytest.Item) -> Path:
    """Return the journal file of a test: ``<dir>/journals/<module>/<test>.rdj``.

    The marker's ``path=`` (relative to the test file's directory) wins. Otherwise
    the name is the test's name made safe for a file name; when making it safe
    changed it (parametrized ids, unusual characters, a name longer than 120
    characters) or the test is inside a class, ``-`` and the first 8 hex digits
    of the SHA-256 of the test's id within its module (``TestA::test_x[order 1]``)
    follow, so different tests of one module never share a file. The hash does
    not depend on the root directory, so the path is the same wherever pytest runs.
    """
    marker = item.get_closest_marker("redrive")
    if marker is not None and marker.kwargs.get("path"):
        return Path(item.path).parent / str(marker.kwargs["path"])
    in_module = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name).strip("_.") or "test"
    if name != in_module or len(name) > _MAX_NAME:
        digest = hashlib.sha256(in_module.encode("utf-8")).hexdigest()[:8]
        name = f"{name[:_MAX_NAME]}-{digest}"
    return Path(item.path).parent / "journals" / Path(item.path).stem / f"{name}.rdj"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Make the marker imply the ``redrive_run`` fixture; refuse two tests sharing a journal.

    Raises:
        pytest.UsageError: two collected tests would record to the same journal
            file (compared case-insensitively, so the journals also stay apart
            on macOS and Windows); the message names both tests and the file.
    """
    owners: dict[str, tuple[str, Path]] = {}
    for item in items:
        names = getattr(item, "fixturenames", None)
        if item.get_closest_marker("redrive") and names is not None and "redrive_run" not in names:
            names.append("redrive_run")
        if names is None or "redrive_run" not in names:
            continue
        path = journal_path(item)
        key = os.path.normcase(str(path.resolve())).casefold()
        seen = owners.setdefault(key, (item.nodeid, path))
        if seen[0] != item.nodeid:
            raise pytest.UsageError(
                f"redrive: tests {seen[0]} and {item.nodeid} would record to the same journal "
                f"file ({seen[1]} and {path}), so one would replay or overwrite the other's "
                "recording; give one of them its own file with @pytest.mark.redrive(path=...)"
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item (the fixture saves only passing recordings)."""
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """List recorded journals that passing tests no longer use completely."""
    unused = config.stash.get(_UNUSED, [])
    if unused:
        terminalreporter.write_sep("-", "redrive: recorded journals not used completely")
        for line in unused:
            terminalreporter.write_line(line)


def _reopen(path: Path, journal: Any) -> None:
    """Load the run in ``path`` into ``journal`` as unfinished (its run_end dropped)."""
    from redrive.storage import copy_run
    from redrive.storage.rdj import RdjJournal

    source = RdjJournal(path)
    copy_run(source, source.run_id, journal, reopen=True)


@pytest.fixture
def redrive_run(request: pytest.FixtureRequest) -> Iterator[Run]:
    """Run the test inside a redrive run backed by its ``.rdj`` journal file; yield the Run."""
    from redrive.errors import DivergenceError, ReplayMissError
    from redrive.replay import Run
    from redrive.storage import MemoryJournal
    from redrive.storage.rdj import RdjJournal, export_run, import_run

    item = request.node
    marker = item.get_closest_marker("redrive")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    chosen = request.config.getoption("--redrive-record-mode", default=None)
    # an explicit re-record request on the command line wins over a marker's mode
    mode = (
        "all"
        if chosen == "all"
        else (kwargs.get("record_mode") or default_record_mode(request.config))
    )
    if mode not in MODES:
        raise pytest.UsageError(f"redrive record_mode={mode!r}: use one of {', '.join(MODES)}")
    path = journal_path(item)
    journal = MemoryJournal(str(path))
    exists = path.exists()
    run_id = RdjJournal(path, verify=False).run_id if exists else f"test:{item.nodeid}"
    replay = kwargs.get("replay") or "strict"
    save = False
    if mode == "all" or (mode == "once" and not exists) or (mode == "new_episodes" and not exists):
        live, save = True, True
    elif mode == "none" and not exists:
        raise ReplayMissError(
            f"{item.nodeid}: record mode 'none' but no journal was recorded at {path}; "
            "record it with --redrive-record-mode=once (locally, with the real model/tools)",
            run_id=run_id,
        )
    elif mode == "new_episodes":
        _reopen(path, journal)
        live, save, replay = True, True, kwargs.get("replay") or "lenient"
    else:
        import_run(path, journal)
        live = False
    run = Run(journal, run_id, live=live, replay=replay)
    run.__enter__()
    try:
        yield run
    finally:
        call = item.stash.get(_REPORTS, {}).get("call")
        passed = call is not None and call.passed
        if passed:
            try:
                run.__exit__(None, None, None)
            except DivergenceError as exc:
                if exc.fields.get("found_name") is not None:
                    raise
                left = exc.fields.get("context") or []
                request.config.stash[_UNUSED].append(
                    f"{path}: {item.nodeid} left recorded steps unused from seq {exc.seq} "
                    f"({'; '.join(left)}); re-record with --redrive-record-mode=all"
                )
                save = False
        else:
            failure = RuntimeError(f"test {item.nodeid} failed")
            run.__exit__(RuntimeError, failure, None)
        if passed and save and (mode != "new_episodes" or run.live_steps > 0):
            export_run(journal, run_id, path)
