"""The pytest plugin's ``redrive_run`` fixture: a test recorded to, or replayed from, its journal.

Part of :mod:`redrive.pytest_plugin` (see its docstring); imports nothing of
redrive's engine until a test uses the fixture.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._plugin_guard import _BLOCKED, _network_guard
from ._plugin_modes import (
    _ci,
    _rerecord_command,
    _run_file,
    _run_id_of,
    _text,
    journal_path,
    record_mode,
    runs_dir,
)

if TYPE_CHECKING:
    from redrive.replay import Run
    from redrive.storage import Journal


_UNUSED = pytest.StashKey[list[str]]()


_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


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
    replay: Any = kwargs.get("replay") or "strict"  # checked by Run (a policy or its name)
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
