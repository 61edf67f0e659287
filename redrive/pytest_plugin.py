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

Marker options: ``record_mode``, ``path``, ``replay``, ``live_tools``,
``block_network``, ``journal_format``; any other, or a positional argument, stops the session with
a usage error. Recordings of failing tests are not saved. In the replay-only
modes a recorded side-effecting tool step (not ``read_only``) the code no longer
makes fails the test with the command that re-records it; a journal whose
other steps (model steps, read-only lookups) a passing test no longer uses
completely is listed in the terminal summary, with that command. ``live_tools``
names that match no tool fail the test. A replay error inside a test
shows the step, the caller's file and line, the path diff and the command
that re-records the test; redrive's own frames are left out of the traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from redrive.replay import Run
    from redrive.storage import Journal

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

#: The record modes.
MODES = ("once", "new_episodes", "none", "all", "rewrite")
#: The keyword options the ``redrive`` marker takes.
MARKER_OPTIONS = ("record_mode", "path", "replay", "live_tools", "block_network", "journal_format")
#: The journal file formats: the binary ``.rdj``, or its JSON Lines text form.
FORMATS = {"rdj": ".rdj", "jsonl": ".rdj.jsonl"}

_UNUSED = pytest.StashKey[list[str]]()
#: The longest readable part of a journal file name (file systems allow 255 bytes).
_MAX_NAME = 120
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_BLOCKED = pytest.StashKey[list[str]]()
_HTTPX_MODULES = ("httpx", "httpx2")


class NetworkBlocked(BaseException):
    """An HTTP request a test made outside redrive's recorded steps, under the network guard.

    A ``BaseException``, so SDKs that retry on ``Exception`` (and the code under
    test) do not turn it into a connection error and retry; the test fails
    even if something swallows it, since the guard also records the request.
    """


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


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def record_mode(command_line: str | None, ci: bool, marker: str | None) -> tuple[str, str]:
    """Apply the one precedence rule: command line, then CI, then the marker, then ``once``.

    Args:
        command_line: ``--redrive-record-mode``'s value, or None.
        ci: whether the ``CI`` environment variable is set.
        marker: the marker's ``record_mode``, or None.

    Returns:
        ``(mode, why)``: the mode and what chose it, for messages.
    """
    if command_line:
        return command_line, "--redrive-record-mode"
    if ci:
        return "none", "CI is set"
    if marker:
        return marker, "the marker"
    return "once", "the default"


def default_record_mode(config: pytest.Config) -> str:
    """Return an unmarked test's mode: the command line's, else ``none`` under CI, else ``once``."""
    return record_mode(config.getoption("--redrive-record-mode", default=None), _ci(), None)[0]


def _suffix(item: pytest.Item) -> str:
    """The journal file suffix: the marker's ``journal_format``, else the command line's."""
    marker = item.get_closest_marker("redrive")
    chosen = marker.kwargs.get("journal_format") if marker is not None else None
    chosen = chosen or item.config.getoption("--redrive-journal-format", default=None) or "rdj"
    return FORMATS[str(chosen)]


def journal_path(item: pytest.Item) -> Path:
    """Return the journal file of a test: ``<dir>/journals/<module>/<test>.rdj``.

    The marker's ``path=`` (relative to the test file's directory) wins. Otherwise
    the name is the test's name made safe for a file name; when making it safe
    changed it (parametrized ids, unusual characters, a name longer than 120
    characters) or the test is inside a class, ``-`` and the first 8 hex digits
    of the SHA-256 of the test's id within its module (``TestA::test_x[order 1]``)
    follow, so different tests of one module never share a file. The hash does
    not depend on the root directory, so the path is the same wherever pytest runs.
    With the text format (``--redrive-journal-format=jsonl`` or the marker's
    ``journal_format="jsonl"``) the file is ``<test>.rdj.jsonl``.
    """
    marker = item.get_closest_marker("redrive")
    if marker is not None and marker.kwargs.get("path"):
        return Path(item.path).parent / str(marker.kwargs["path"])
    in_module = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name).strip("_.") or "test"
    if name != in_module or len(name) > _MAX_NAME:
        digest = hashlib.sha256(in_module.encode("utf-8")).hexdigest()[:8]
        name = f"{name[:_MAX_NAME]}-{digest}"
    folder = Path(item.path).parent / "journals" / Path(item.path).stem
    return folder / f"{name}{_suffix(item)}"


def _text(path: Path) -> bool:
    return path.name.endswith(".jsonl")


def runs_dir(path: Path) -> Path:
    """The folder holding the runs a test's code opened itself: ``<test>.runs`` beside its file."""
    return path.with_name(path.name.removesuffix(".jsonl").removesuffix(".rdj") + ".runs")


def _run_file(folder: Path, run_id: str, text: bool) -> Path:
    """The file of one run the test's code opened (its id %-quoted into a file name)."""
    return folder / (urllib.parse.quote(run_id, safe="") + (".rdj.jsonl" if text else ".rdj"))


def _run_id_of(path: Path) -> str:
    """The id of the run saved in ``path`` (either format)."""
    if _text(path):
        from redrive.storage.rdj import read_text

        return read_text(path)[0].run_id
    from redrive.storage.rdj import RdjJournal

    return RdjJournal(path, verify=False).run_id


def _check_marker(item: pytest.Item) -> None:
    """Refuse a ``redrive`` marker with a positional argument, an unknown option or a bad value.

    Raises:
        pytest.UsageError: naming the test, the option and the options there are.
    """
    marker = item.get_closest_marker("redrive")
    if marker is None:
        return
    if marker.args:
        raise pytest.UsageError(
            f"redrive: {item.nodeid}: @pytest.mark.redrive takes keyword options only "
            f"({', '.join(MARKER_OPTIONS)}), not {marker.args!r}"
        )
    unknown = sorted(set(marker.kwargs) - set(MARKER_OPTIONS))
    if unknown:
        raise pytest.UsageError(
            f"redrive: {item.nodeid}: unknown @pytest.mark.redrive option(s) "
            f"{', '.join(map(repr, unknown))}; the options are {', '.join(MARKER_OPTIONS)} "
            "(run options such as redact= go to redrive.run(...) in the code under test)"
        )
    chosen = marker.kwargs.get("journal_format")
    if chosen is not None and chosen not in FORMATS:
        raise pytest.UsageError(
            f"redrive: {item.nodeid}: journal_format={chosen!r}; use one of "
            f"{', '.join(sorted(FORMATS))}"
        )
    mode = marker.kwargs.get("record_mode")
    if mode is not None and mode not in MODES:
        raise pytest.UsageError(
            f"redrive: {item.nodeid}: record_mode={mode!r}; use one of {', '.join(MODES)}"
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Make the marker imply the ``redrive_run`` fixture; check markers; refuse shared journals.

    Raises:
        pytest.UsageError: a marker with an unknown option or a positional
            argument; or two collected tests that would record to the same
            journal file (compared case-insensitively, so the journals also stay
            apart on macOS and Windows): the message names both tests and the file.
    """
    owners: dict[str, tuple[str, Path]] = {}
    for item in items:
        _check_marker(item)
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


def _rerecord_command(item: pytest.Item) -> str:
    """The command that re-records one test from scratch."""
    return f"pytest {shlex.quote(item.nodeid)} --redrive-record-mode=rewrite"


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
    """
    entries = list(excinfo.traceback)
    if not any(not _is_redrive_frame(e.path) for e in entries):
        return  # nothing but redrive: keep it all
    with contextlib.suppress(AttributeError, TypeError):  # an exception without a __dict__
        setattr(excinfo.value, _HIDE, True)
    for entry in entries:
        if _is_redrive_frame(entry.path):
            entry.frame.f_globals.setdefault("__tracebackhide__", _hidden)


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


def _reopen(path: Path, journal: Journal) -> str:
    """Load the run in ``path`` into ``journal`` as unfinished (its run_end dropped); its id."""
    from redrive.storage import MemoryJournal, copy_run
    from redrive.storage.rdj import RdjJournal, import_run

    source: Journal
    if _text(path):
        source = MemoryJournal(str(path))
        run_id = import_run(path, source).run_id
    else:
        rdj = RdjJournal(path)
        source, run_id = rdj, rdj.run_id
    copy_run(source, run_id, journal, reopen=True)
    return run_id


@contextlib.contextmanager
def _network_guard(item: pytest.Item, on: bool) -> Iterator[None]:
    """While on, an httpx request that is not a recorded step's live call raises NetworkBlocked."""
    if not on:
        yield
        return
    from redrive.replay import sends_live

    blocked = item.stash.setdefault(_BLOCKED, [])
    saved: list[tuple[type, str, Any]] = []

    def guard(cls: type, attr: str, original: Any, is_async: bool) -> Any:
        def refuse(request: Any) -> NetworkBlocked:
            what = f"{request.method} {request.url}"
            blocked.append(what)
            return NetworkBlocked(
                f"redrive: {item.nodeid} sent {what} outside recorded steps with the network "
                "guard on (--redrive-block-network, block_network=True or record mode none)"
            )

        if is_async:

            async def ahandle(self: Any, request: Any) -> Any:
                if not sends_live():
                    raise refuse(request)
                return await original(self, request)

            return ahandle

        def handle(self: Any, request: Any) -> Any:
            if not sends_live():
                raise refuse(request)
            return original(self, request)

        return handle

    for name in _HTTPX_MODULES:
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name)
            except ImportError:
                continue
        for cls_name, attr, is_async in (
            ("HTTPTransport", "handle_request", False),
            ("AsyncHTTPTransport", "handle_async_request", True),
        ):
            cls = getattr(module, cls_name, None)
            if cls is None:
                continue
            original = cls.__dict__.get(attr)
            saved.append((cls, attr, original))
            setattr(cls, attr, guard(cls, attr, getattr(cls, attr), is_async))
    try:
        yield
    finally:
        for cls, attr, original in reversed(saved):
            if original is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, original)


def _live_tools(request: pytest.FixtureRequest, kwargs: dict[str, Any]) -> bool | list[str]:
    """The tools whose bodies run on replay: the command line's, else the marker's."""
    chosen = request.config.getoption("--redrive-live-tools", default=None)
    if chosen:
        names = [n.strip() for n in str(chosen).split(",") if n.strip()]
        return True if names == ["all"] else names
    value = kwargs.get("live_tools")
    if value is None or value is False:
        return False
    if value is True:
        return True
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise pytest.UsageError(
            f"redrive: {request.node.nodeid}: live_tools={value!r}; use True or a list of "
            "tool names"
        )
    return list(value)


@pytest.fixture
def redrive_run(request: pytest.FixtureRequest) -> Iterator[Run]:
    """Run the test inside a redrive run backed by its ``.rdj`` journal file; yield the Run.

    Runs the test's code opens (``redrive.run``, ``@redrive.durable``) go to the
    same journal and are saved with it (``<test>.runs/``).
    """
    from redrive.errors import DivergenceError, DivergenceReason, ReplayMissError
    from redrive.replay import Run, redirect_runs
    from redrive.storage import MemoryJournal
    from redrive.storage.rdj import export_run, import_run

    item = request.node
    marker = item.get_closest_marker("redrive")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    mode, why = record_mode(
        request.config.getoption("--redrive-record-mode", default=None),
        _ci(),
        kwargs.get("record_mode"),
    )
    path = journal_path(item)
    folder = runs_dir(path)
    journal = MemoryJournal(str(path))
    # rewrite records from scratch but leaves the old files alone until the test passes
    exists = path.exists() and mode != "rewrite"
    pattern = "*.rdj.jsonl" if _text(path) else "*.rdj"
    others = sorted(folder.glob(pattern)) if folder.is_dir() and exists else []
    run_id = _run_id_of(path) if exists else f"test:{item.nodeid}"
    replay = kwargs.get("replay") or "strict"
    live_tools = _live_tools(request, kwargs)
    forced: dict[str, Any] = {"live_tools": live_tools} if live_tools else {}
    save = False
    loaded: dict[str, str] = {}
    if mode in ("all", "rewrite") or (mode in ("once", "new_episodes") and not exists):
        live, save = True, True
    elif mode == "none" and not exists:
        raise ReplayMissError(
            f"{item.nodeid}: record mode 'none' ({why}) but no journal was recorded at {path}; "
            f"record it locally (with the real model and tools): "
            f"pytest {shlex.quote(item.nodeid)} --redrive-record-mode=once",
            run_id=run_id,
        )
    elif mode == "new_episodes":
        _reopen(path, journal)
        for other in others:
            _reopen(other, journal)
        live, save, replay = True, True, kwargs.get("replay") or "lenient"
        forced["replay"] = replay
        loaded = _chains(journal)
    else:
        import_run(path, journal)
        for other in others:
            import_run(other, journal)
        live = False
        forced["live"] = False
    block = bool(
        mode == "none"
        or (not live and _ci())
        or request.config.getoption("--redrive-block-network", default=False)
        or kwargs.get("block_network")
    )
    run = Run(journal, run_id, live=live, replay=replay, live_tools=live_tools)
    with _network_guard(item, block), redirect_runs(journal, **forced):
        run.__enter__()
        try:
            yield run
        finally:
            call = item.stash.get(_REPORTS, {}).get("call")
            passed = call is not None and call.passed and not item.stash.get(_BLOCKED, [])
            if passed:
                try:
                    run.__exit__(None, None, None)
                except DivergenceError as exc:
                    if exc.reason is not DivergenceReason.UNUSED_STEPS:
                        raise
                    left = exc.context or []
                    effects = _side_effects_left(journal, exc) if not live else []
                    if effects:
                        raise _unused_side_effects(item, exc, effects, mode, why) from None
                    request.config.stash[_UNUSED].append(
                        f"{path}: {item.nodeid} left recorded steps unused from seq {exc.seq} "
                        f"({'; '.join(left[:5])}); re-record with `{_rerecord_command(item)}`"
                    )
                    save = False
                _check_live_tool_names(item, journal, live_tools)
            else:
                failure = RuntimeError(f"test {item.nodeid} failed")
                run.__exit__(RuntimeError, failure, None)
    if passed and save and (mode != "new_episodes" or _chains(journal) != loaded):
        export_run(journal, run_id, path)
        opened = [r.run_id for r in journal.runs() if r.run_id != run_id]
        written = set()
        for other_id in opened:
            folder.mkdir(parents=True, exist_ok=True)
            target = _run_file(folder, other_id, _text(path))
            export_run(journal, other_id, target)
            written.add(target)
        for stale in folder.glob(pattern) if folder.is_dir() else ():
            if stale not in written:
                stale.unlink()


def _side_effects_left(journal: Journal, exc: BaseException) -> list[str]:
    """The unused recorded steps of ``exc`` that are side-effecting tool calls (not read-only).

    Args:
        journal: the test's journal.
        exc: a ``DivergenceError`` of reason ``UNUSED_STEPS``; its ``context``
            lists every unused step (``"seq 5 tool refund"``).

    Returns:
        The descriptions of the unused ``tool_start`` steps not declared
        ``read_only``, in seq order (empty when only model steps, values or
        read-only lookups were left).
    """
    from redrive.replay import expand_frames

    run_id = getattr(exc, "run_id", None)
    seqs: set[int] = set()
    for line in getattr(exc, "context", None) or []:
        found = re.match(r"seq (\d+) tool ", line)
        if found:
            seqs.add(int(found.group(1)))
    if run_id is None or not seqs:
        return []
    effects = []
    for frame, data in expand_frames(journal.frames(run_id)):
        read_only = isinstance(data, dict) and data.get("read_only")
        if frame.seq in seqs and frame.kind == "tool_start" and not read_only:
            effects.append(f"seq {frame.seq} tool {frame.name}")
    return effects


def _unused_side_effects(
    item: pytest.Item, exc: BaseException, effects: list[str], mode: str, why: str
) -> BaseException:
    """The failure of a replay-only test whose code no longer makes recorded side effects."""
    from redrive.errors import DivergenceError, NextStep, NextStepAction

    assert isinstance(exc, DivergenceError)
    exc.message = (
        f"{item.nodeid}: the code no longer makes recorded side-effecting tool call(s) "
        f"({'; '.join(effects)}) of run {exc.run_id!r}; in record mode {mode!r} ({why}) "
        "a recorded side effect the code skips fails the test (unused model steps and "
        "read-only lookups are only listed in the summary).\n"
        f"{exc.message}"
    )
    text = f"if dropping the call is intended, re-record this test: `{_rerecord_command(item)}`"
    return exc.with_next_steps((NextStep(NextStepAction.RERECORD, text),))


def _check_live_tool_names(
    item: pytest.Item, journal: Journal, live_tools: bool | list[str]
) -> None:
    """Refuse ``live_tools`` names that match no tool of this process or of the journal.

    Raises:
        pytest.UsageError: naming the unknown names, the close matches and
            the known tool names.
    """
    if isinstance(live_tools, bool):
        return
    from redrive.replay import unknown_live_tools

    names = {
        f.name for r in journal.runs() for f in journal.frames(r.run_id) if f.kind == "tool_start"
    }
    problem = unknown_live_tools(live_tools, names)
    if problem:
        raise pytest.UsageError(f"redrive: {item.nodeid}: {problem}")


def _chains(journal: Journal) -> dict[str, str]:
    """Each run's last chain: it changes exactly when a frame was written."""
    return {r.run_id: r.last_chain for r in journal.runs()}
