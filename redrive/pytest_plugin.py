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
stop the session with a usage error naming both.

Record modes (pytest-recording's names and meanings, plus ``rewrite``):

================  ================================================================
mode              what the test does
================  ================================================================
``none``          replay only; a call nobody recorded fails with ``ReplayMissError``
                  naming the call and the closest recorded steps; a missing file
                  fails; no HTTP request reaches the network (the guard is on)
``once``          record when the file is missing, otherwise replay only
``new_episodes``  replay what the file has (matched leniently), record new calls,
                  save the file again
``all``           call everything live and record it again; the file is replaced
                  when the test passes (kept when it fails)
``rewrite``       record from scratch (the old file is not read): steps no longer
                  used are dropped; the file and the runs the test's code opened
                  (``.runs/``) are replaced when the test passes (kept when it fails)
================  ================================================================

One precedence rule, for every mode: ``--redrive-record-mode`` on the
command line, else ``none`` when the ``CI`` environment variable is set
(``1``, ``true``, ``yes``), else the marker's ``record_mode``, else ``once``.
So CI never reaches the network, whatever a marker says.

``--redrive-block-network`` (or the marker's ``block_network=True``; always on
in mode ``none``) fails every HTTP request the test makes through httpx other
than the live calls of a recording wrapped client: the request raises
:class:`NetworkBlocked` and the test fails, even when its code catches that.
It guards httpx's connection pool (httpcore's), under the transport: a request
a mock answers (respx, pytest-httpx, ``MockTransport``) is not refused.

``--redrive-live-tools=NAME,...`` (``all``: every tool) or the marker's
``live_tools=[...]`` run the named tools' bodies on replay, model steps still
replayed, and check each result against the record (``redrive.run``'s
``live_tools``).

Runs the test's code opens itself (``redrive.run(url, ...)``,
``@redrive.durable``) record into the test's journal too, under their own run
ids, and are saved next to the test's file as ``<test>.runs/<run id>.rdj``.

``--redrive-journal-format=jsonl`` (or the marker's ``journal_format="jsonl"``)
saves the test's journal as JSON Lines (``<test>.rdj.jsonl``, one frame a
line, volatile fields last): a re-recorded test then shows as a readable
diff in review.

Fixtures of every scope: ``redrive_run`` is set up before the test's other
function-scoped fixtures (so they record into the test's run), and each
class-, module-, package- or session-scoped fixture a redrive test uses
records its setup and its teardown to files of its own, under the same
modes, precedence and network guard (see :mod:`._plugin_scopes`).

A replayed recording is opened once and its frames checked once; the
session keeps them, keyed by the file's path and a hash of its bytes, so a
recording replayed again is not decoded again and a file changed on disk is
read anew (:mod:`._plugin_load`). Each test replays from a journal of its own.

Recordings are saved settled (:mod:`._plugin_settle`): what differs between
two recordings of the same behaviour (wall times, lease epochs, the app
version, durations) is left out, and a file that already holds the same
behaviour is not rewritten, so a re-record of unchanged behaviour changes
no byte of the committed files.

Marker options: ``record_mode``, ``path``, ``replay``, ``live_tools``,
``block_network``, ``journal_format``; any other, or a positional argument, stops the session with
a usage error. Recordings of failing tests are not saved. In the replay-only
modes a recorded side-effecting tool step (not ``read_only``) the code no longer
makes fails the test with the command that re-records it; a journal whose
other steps (model steps, read-only lookups) a passing test no longer uses
completely is listed in the terminal summary, with that command. ``live_tools``
names that match no tool fail the test. A replay error inside a test
shows the step, the caller's file and line, the path diff and the command
that re-records the test; redrive's own frames are left out of the traceback,
and so are the standard library's and installed packages' (a framework such
as pydantic-ai, the SDK, asyncio) for a replay error, with a note saying how
many (``--full-trace`` shows them). A test's recording is updated by
re-recording it; the offline update that keeps the recorded model responses
(``redrive check --update --write PATH``) is for runs saved from
``@redrive.durable`` entrypoints (``fixtures/runs``), which record what to re-drive.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from ._plugin_fixture import _REPORTS, redrive_run
from ._plugin_guard import _BLOCKED, NetworkBlocked
from ._plugin_modes import (
    FORMATS,
    MARKER_OPTIONS,
    MODES,
    _check_marker,
    _rerecord_command,
    _run_id_of,
    _text,
    default_record_mode,
    journal_path,
    record_mode,
    runs_dir,
)
from ._plugin_record import _UNUSED
from ._plugin_scopes import WIDE, note_wide_fixtures, record_fixture, run_first

__all__ = [
    "MARKER_OPTIONS",
    "MODES",
    "NetworkBlocked",
    "default_record_mode",
    "journal_path",
    "record_mode",
    "redrive_run",
    "runs_dir",
]

# named (in tracebacks) and pickled under this module, where it is imported from
NetworkBlocked.__module__ = __name__


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--redrive-record-mode``, ``--redrive-block-network`` and ``--redrive-live-tools``."""
    group = parser.getgroup("redrive", "redrive record/replay")
    group.addoption(
        "--redrive-record-mode",
        choices=MODES,
        default=None,
        help="record mode for every redrive test, beating markers: once (default), "
        "new_episodes, none (default when CI is set), all, rewrite",
    )
    group.addoption(
        "--redrive-block-network",
        action="store_true",
        default=False,
        help="fail any HTTP request a redrive test makes outside recorded steps",
    )
    group.addoption(
        "--redrive-journal-format",
        choices=sorted(FORMATS),
        default=None,
        help="rdj (binary, default) or jsonl (text a reviewer reads in a pull request)",
    )
    group.addoption(
        "--redrive-live-tools",
        default=None,
        metavar="NAMES",
        help="comma-separated tool names (or 'all') whose bodies run on replay, their "
        "results checked against the record",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``redrive`` marker."""
    config.addinivalue_line(
        "markers",
        "redrive(record_mode=None, path=None, replay=None, live_tools=None, "
        "block_network=False): run the test inside a redrive run recorded to "
        "journals/<module>/<test>.rdj next to the test file",
    )
    config.stash[_UNUSED] = []
    config.stash[WIDE] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Make the marker imply the ``redrive_run`` fixture; check markers; refuse shared journals.

    ``redrive_run`` is set up before the test's other function-scoped fixtures,
    and the wider-scoped fixtures a redrive test uses are noted: they are
    recorded on their own (see :mod:`._plugin_scopes`).

    Raises:
        pytest.UsageError: a marker with an unknown option or a positional
            argument; or two collected tests that would record to the same
            journal file (compared case-insensitively, so the journals also stay
            apart on macOS and Windows): the message names both tests and the file.
    """
    owners: dict[str, tuple[str, Path]] = {}
    folders: dict[Path, Path] = {}  # each journal folder resolved once, not once per test
    for item in items:
        _check_marker(item)
        names = getattr(item, "fixturenames", None)
        if names is None or not (item.get_closest_marker("redrive") or "redrive_run" in names):
            continue
        run_first(item)
        note_wide_fixtures(item, config.stash[WIDE])
        path = journal_path(item)
        key = os.path.normcase(str(_resolved(path, folders))).casefold()
        seen = owners.setdefault(key, (item.nodeid, path))
        if seen[0] != item.nodeid:
            raise pytest.UsageError(
                f"redrive: tests {seen[0]} and {item.nodeid} would record to the same journal "
                f"file ({seen[1]} and {path}), so one would replay or overwrite the other's "
                "recording; give one of them its own file with @pytest.mark.redrive(path=...)"
            )


def _resolved(path: Path, folders: dict[Path, Path]) -> Path:
    """``path.resolve()``, its folder's resolution looked up in ``folders`` (and added there).

    A journal file that is itself a symbolic link is resolved whole, as before.
    """
    if path.is_symlink():
        return path.resolve()
    folder = folders.get(path.parent)
    if folder is None:
        folder = folders[path.parent] = path.parent.resolve()
    return folder / path.name


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
    """Set a wider-scoped fixture a redrive test uses up inside a recording of its own."""
    if id(fixturedef) not in request.config.stash.get(WIDE, {}):
        return (yield)
    return (yield from record_fixture(fixturedef, request))


def _unknown_run_message(item: pytest.Item, message: str) -> str:
    """An ``UnknownRunError``'s message in a test: the recorded run ids, the re-record command."""
    path = journal_path(item)
    folder = runs_dir(path)
    recorded = []
    if path.exists():
        with contextlib.suppress(Exception):
            recorded.append(_run_id_of(path))
    if folder.is_dir():
        pattern = "*.rdj.jsonl" if _text(path) else "*.rdj"
        for other in sorted(folder.glob(pattern)):
            with contextlib.suppress(Exception):
                recorded.append(_run_id_of(other))
    head = message.partition("\nWhat to do:")[0]
    runs = (
        f"the test's recording has the run id(s) {', '.join(map(repr, recorded))} "
        f"({path} and {folder}/)"
        if recorded
        else f"the test has no recording at {path}"
    )
    return (
        f"{head}\n  {runs}; the code under test opened a run id that was not recorded (a "
        "changed id, or a run added since the recording).\n"
        f"What to do: if the change is intended, re-record this test: `{_rerecord_command(item)}`"
    )


def _is_redrive_frame(path: Any) -> bool:
    package = Path(__file__).resolve().parent
    try:
        return Path(str(path)).resolve().is_relative_to(package)
    except (OSError, ValueError):
        return False


#: set on the exception of a redrive test whose traceback leaves redrive's frames out
_HIDE = "_redrive_hide_frames"


def _hidden(excinfo: pytest.ExceptionInfo[BaseException]) -> bool:
    """The ``__tracebackhide__`` hook for redrive's modules: hide them in redrive tests."""
    return bool(getattr(excinfo.value, _HIDE, False))


def _hide_redrive_frames(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """Mark redrive's frames in a redrive test's failure hidden (pytest's ``__tracebackhide__``).

    pytest reads ``__tracebackhide__`` from a frame's locals or module globals;
    a callable one is asked per failure, so only the failures of tests using
    ``redrive_run`` lose redrive's frames (``--full-trace`` still shows them).
    A replay error (a divergence, a miss) also loses the frames of installed
    packages and the standard library (a framework such as pydantic-ai, the SDK,
    httpx, asyncio) between the test and the agent's code: the report is the
    test's line, the agent's lines and the error, with a note of how many
    frames were left out.
    """
    from redrive.errors import ReplayError
    from redrive.replay import is_user_file

    entries = list(excinfo.traceback)
    if not any(not _is_redrive_frame(e.path) for e in entries):
        return  # nothing but redrive: keep it all
    with contextlib.suppress(AttributeError, TypeError):  # an exception without a __dict__
        setattr(excinfo.value, _HIDE, True)
    framework = isinstance(excinfo.value, ReplayError)
    hidden = 0
    for entry in entries:
        if _is_redrive_frame(entry.path):
            entry.frame.f_globals.setdefault("__tracebackhide__", _hidden)
        elif framework and not is_user_file(str(entry.path)):
            entry.frame.f_globals.setdefault("__tracebackhide__", _hidden)
            hidden += 1
    notes = getattr(excinfo.value, "__notes__", [])
    if hidden and not any(str(n).startswith("redrive: ") for n in notes):
        excinfo.value.add_note(
            f"redrive: {hidden} frame(s) of installed packages and the standard library "
            "are left out of this traceback (pytest --full-trace shows them)"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """End a replay error's message in a redrive test with the command that re-records it."""
    if "redrive_run" not in getattr(item, "fixturenames", ()):
        return (yield)
    from redrive.errors import (
        DivergenceError,
        NextStep,
        NextStepAction,
        ReplayMissError,
        UnknownRunError,
    )

    try:
        return (yield)
    except UnknownRunError as exc:
        exc.message = _unknown_run_message(item, exc.message)
        exc.args = (exc.message,)
        raise
    except (DivergenceError, ReplayMissError) as exc:
        # in a test, a recording is re-recorded: that is the one next step
        text = f"if the change is intended, re-record this test: `{_rerecord_command(item)}`"
        exc.with_next_steps((NextStep(NextStepAction.RERECORD, text),))
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Hide redrive's frames from a redrive test's traceback; keep each phase's report."""
    if call.excinfo is not None and "redrive_run" in getattr(item, "fixturenames", ()):
        _hide_redrive_frames(call.excinfo)
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    blocked = item.stash.get(_BLOCKED, [])
    if blocked and report.when == "call" and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"redrive: {item.nodeid} sent {'; '.join(blocked)} outside recorded steps with "
            "the network guard on (its code caught the NetworkBlocked raised there). Route "
            "the call through a wrapped client (redrive.wrap) so it is recorded, or mock it."
        )
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """List recorded journals that passing tests no longer use completely."""
    unused = config.stash.get(_UNUSED, [])
    if unused:
        terminalreporter.write_sep("-", "redrive: recorded journals not used completely")
        for line in unused:
            terminalreporter.write_line(line)
