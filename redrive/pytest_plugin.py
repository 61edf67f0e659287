"""The redrive pytest plugin: tests that record their model and tool calls once, replay forever.

Registered through the ``pytest11`` entry point; it imports nothing of
redrive until a test asks for it. Use the ``redrive_run`` fixture, or the
marker (which implies the fixture)::

    @pytest.mark.redrive(record_mode="once")
    def test_refund(redrive_run):
        assert agent.handle("refund A-100") == ...

The test runs inside a run whose journal is the file
``<test dir>/journals/<module>/<test name>.rdj``. Record modes (vcrpy's):

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
``record_mode`` (the marker wins). Recordings of failing tests are not saved.
A journal whose steps a passing test no longer uses completely is listed in
the terminal summary.
"""

from __future__ import annotations

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
    """Return the journal file of a test: ``<dir>/journals/<module>/<test>.rdj``."""
    marker = item.get_closest_marker("redrive")
    if marker is not None and marker.kwargs.get("path"):
        return Path(item.path).parent / str(marker.kwargs["path"])
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name).strip("_") or "test"
    return Path(item.path).parent / "journals" / Path(item.path).stem / f"{name}.rdj"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Make the marker imply the ``redrive_run`` fixture."""
    for item in items:
        names = getattr(item, "fixturenames", None)
        if item.get_closest_marker("redrive") and names is not None and "redrive_run" not in names:
            names.append("redrive_run")


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
    from redrive.storage import RunRecord
    from redrive.storage.rdj import RdjJournal

    source = RdjJournal(path)
    record = source.header.run
    frames = list(source.frames(source.run_id))
    if frames[-1].kind == "run_end":
        frames.pop()
    journal.create_run(
        RunRecord(run_id=record.run_id, input_fp=record.input_fp,
                  entrypoint=record.entrypoint, created_at=record.created_at,
                  updated_at=record.updated_at),
        frames[0],
    )
    journal.append(record.run_id, frames[1:], expected_seq=1)


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
    mode = kwargs.get("record_mode") or default_record_mode(request.config)
    if mode not in MODES:
        raise pytest.UsageError(f"redrive record_mode={mode!r}: use one of {', '.join(MODES)}")
    path = journal_path(item)
    journal = MemoryJournal(str(path))
    exists = path.exists()
    run_id = RdjJournal(path, verify=False).run_id if exists else f"test:{item.nodeid}"
    replay = kwargs.get("replay") or "strict"
    save = False
    if mode == "all" or (mode == "once" and not exists) or (
        mode == "new_episodes" and not exists
    ):
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
