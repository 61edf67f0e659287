"""One recording of the pytest plugin: a test's run, or one phase of a wider-scoped fixture.

Part of :mod:`redrive.pytest_plugin` (see its docstring): :func:`recording`
applies the record mode to a :class:`Target` (its journal file, its run id,
its options), runs the code inside the run with the network guard when the
mode asks for it, and saves the settled recording (:mod:`._plugin_settle`).
Imports nothing of redrive's engine until a recording starts.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from ._plugin_guard import _network_guard
from ._plugin_load import load_recording
from ._plugin_modes import _ci, _run_file, _run_id_of, _text, record_mode, runs_dir

if TYPE_CHECKING:
    from redrive.replay import Run
    from redrive.storage import Journal

#: Journals that passing tests (and fixtures) no longer use completely: listed in the summary.
_UNUSED = pytest.StashKey[list[str]]()


@attrs.frozen(kw_only=True)
class Target:
    """What one recording is for.

    Attributes:
        nodeid: what messages name: a test id, or ``fixture 'agent' (module test_x.py)``.
        what: the same in a sentence's words: ``"this test"``, ``"fixture 'agent'"``.
        path: the journal file (``.rdj`` or ``.rdj.jsonl``).
        run_id: the run id of a fresh recording (a recorded file keeps its own).
        options: the ``redrive`` marker's options that apply (``record_mode``,
            ``replay``, ``live_tools``, ``block_network``).
        config: pytest's config (the command-line options).
        rerecord: the command that re-records it.
        fixture: a phase of a wider-scoped fixture: with no file in mode
            ``none`` it replays an empty recording (most fixtures call no model:
            one that does fails on its first call, naming the command), and a
            recording with no step is not saved.
    """

    nodeid: str
    what: str
    path: Path
    run_id: str
    options: Mapping[str, Any]
    config: pytest.Config
    rerecord: str
    fixture: bool = False


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


def _live_tools(target: Target) -> bool | list[str]:
    """The tools whose bodies run on replay: the command line's, else the marker's."""
    chosen = target.config.getoption("--redrive-live-tools", default=None)
    if chosen:
        names = [n.strip() for n in str(chosen).split(",") if n.strip()]
        return True if names == ["all"] else names
    value = target.options.get("live_tools")
    if value is None or value is False:
        return False
    if value is True:
        return True
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise pytest.UsageError(
            f"redrive: {target.nodeid}: live_tools={value!r}; use True or a list of tool names"
        )
    return list(value)


def _empty_record(journal: Journal, run_id: str) -> None:
    """Put a finished run with no step in ``journal``: replayed, any step it is asked raises."""
    from redrive.replay import Run

    with Run(journal, run_id, live=True):
        pass


def _rerecord_next_step(target: Target, exc: BaseException, missing: str = "") -> None:
    """End a replay error's next steps with the command that re-records ``target``.

    ``missing``: why the recording was replayed although it has no file (a
    fixture in mode ``none``); the message then says so and the command records.
    """
    from redrive.errors import NextStep, NextStepAction, ReplayError

    if not isinstance(exc, ReplayError):
        return
    text = f"if the change is intended, re-record {target.what}: `{target.rerecord}`"
    if missing:
        exc.message = (
            f"{target.nodeid}: record mode 'none' ({missing}) and no recording at "
            f"{target.path}, but its code called a model or tool:\n{exc.message}"
        )
        exc.args = (exc.message,)
        command = target.rerecord.replace("--redrive-record-mode=rewrite", "")
        text = f"record {target.what} locally (real model and tools): `{command}"
        text += "--redrive-record-mode=once`"
    exc.with_next_steps((NextStep(NextStepAction.RERECORD, text),))


@contextlib.contextmanager
def recording(
    target: Target, blocked: list[str], passed: Callable[[], bool] | None = None
) -> Iterator[Run]:
    """Run the block inside ``target``'s run, recorded or replayed as its record mode says.

    Args:
        target: what is recorded.
        blocked: the network guard appends each request it refused here; a
            block that made one is not saved (and fails: the caller reports it).
        passed: asked at the end whether the code passed (a test's outcome is
            in its report, not an exception); None: it passed unless the
            block raised.

    Yields:
        The entered :class:`~redrive.replay.Run`.

    Raises:
        ReplayMissError: mode ``none`` and no recording of a test at ``target.path``.
        DivergenceError: a replay-only recording whose side-effecting steps
            the code no longer makes; as the run raises otherwise.
    """
    from redrive.errors import DivergenceError, DivergenceReason, ReplayMissError
    from redrive.replay import Run, redirect_runs
    from redrive.storage import MemoryJournal

    config, options, path = target.config, target.options, target.path
    mode, why = record_mode(
        config.getoption("--redrive-record-mode", default=None), _ci(), options.get("record_mode")
    )
    folder = runs_dir(path)
    journal = MemoryJournal(str(path))
    # rewrite records from scratch but leaves the old files alone until the code passes
    exists = path.exists() and mode != "rewrite"
    pattern = "*.rdj.jsonl" if _text(path) else "*.rdj"
    others = sorted(folder.glob(pattern)) if folder.is_dir() and exists else []
    run_id = target.run_id
    replay: Any = options.get("replay") or "strict"  # checked by Run (a policy or its name)
    live_tools = _live_tools(target)
    forced: dict[str, Any] = {"live_tools": live_tools} if live_tools else {}
    save = False
    loaded: dict[str, str] = {}
    missing = ""
    if mode in ("all", "rewrite") or (mode in ("once", "new_episodes") and not exists):
        live, save = True, True
        run_id = _run_id_of(path) if exists else run_id  # mode all keeps the file's run id
    elif mode == "none" and not exists and target.fixture:
        _empty_record(journal, run_id)
        live, missing = False, why
        forced["live"] = False
    elif mode == "none" and not exists:
        raise ReplayMissError(
            f"{target.nodeid}: record mode 'none' ({why}) but no journal was recorded at {path}; "
            f"record it locally (with the real model and tools): "
            f"pytest {shlex.quote(target.nodeid)} --redrive-record-mode=once",
            run_id=run_id,
        )
    elif mode == "new_episodes":
        run_id = _reopen(path, journal)
        for other in others:
            _reopen(other, journal)
        live, save, replay = True, True, options.get("replay") or "lenient"
        forced["replay"] = replay
        loaded = _chains(journal)
    else:  # each file opened once, its frames checked once (see ._plugin_load)
        run_id = load_recording(config, path, journal)
        for other in others:
            load_recording(config, other, journal)
        live = False
        forced["live"] = False
    block = bool(
        mode == "none"
        or (not live and _ci())
        or config.getoption("--redrive-block-network", default=False)
        or options.get("block_network")
    )
    run = Run(journal, run_id, live=live, replay=replay, live_tools=live_tools)
    ok = False
    with _network_guard(target.nodeid, blocked, block), redirect_runs(journal, **forced):
        run.__enter__()
        try:
            try:
                yield run
            except BaseException as exc:
                _rerecord_next_step(target, exc, missing)
                raise
            ok = passed() if passed is not None else True
        finally:
            ok = ok and not blocked
            if ok:
                try:
                    run.__exit__(None, None, None)
                except DivergenceError as exc:
                    if exc.reason is not DivergenceReason.UNUSED_STEPS:
                        _rerecord_next_step(target, exc)
                        raise
                    left = exc.context or []
                    effects = _side_effects_left(journal, exc) if not live else []
                    if effects:
                        raise _unused_side_effects(target, exc, effects, mode, why) from None
                    config.stash[_UNUSED].append(
                        f"{path}: {target.nodeid} left recorded steps unused from seq {exc.seq} "
                        f"({'; '.join(left[:5])}); re-record with `{target.rerecord}`"
                    )
                    save = False
                _check_live_tool_names(target, journal, live_tools)
            else:
                failure = RuntimeError(f"{target.nodeid} failed")
                run.__exit__(RuntimeError, failure, None)
    if ok and save and (mode != "new_episodes" or _chains(journal) != loaded):
        _save(target, journal, run_id)


def _has_steps(journal: Journal, run_id: str) -> bool:
    """Whether the recording holds anything but an empty run: a step, or a run its code opened."""
    record = journal.get_run(run_id)
    others = [r for r in journal.runs() if r.run_id != run_id]
    return bool(others) or (record is not None and record.next_seq > 2)


def _save(target: Target, journal: Journal, run_id: str) -> None:
    """Write the recording: its run to ``target.path``, the runs its code opened beside it.

    Each run is saved settled (:func:`~._plugin_settle.save_settled`): a file that
    already holds the same behaviour is left byte for byte. A fixture's
    recording with no step is not saved (and an older one is removed).
    """
    from ._plugin_settle import save_settled

    path = target.path
    folder = runs_dir(path)
    pattern = "*.rdj.jsonl" if _text(path) else "*.rdj"
    written: set[Path] = set()
    if target.fixture and not _has_steps(journal, run_id):
        path.unlink(missing_ok=True)
    else:
        save_settled(journal, run_id, path)
        for other in journal.runs():
            if other.run_id == run_id:
                continue
            folder.mkdir(parents=True, exist_ok=True)
            file = _run_file(folder, other.run_id, _text(path))
            save_settled(journal, other.run_id, file)
            written.add(file)
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
    target: Target, exc: BaseException, effects: list[str], mode: str, why: str
) -> BaseException:
    """The failure of a replay-only test whose code no longer makes recorded side effects."""
    from redrive.errors import DivergenceError, NextStep, NextStepAction

    assert isinstance(exc, DivergenceError)
    exc.message = (
        f"{target.nodeid}: the code no longer makes recorded side-effecting tool call(s) "
        f"({'; '.join(effects)}) of run {exc.run_id!r}; in record mode {mode!r} ({why}) "
        "a recorded side effect the code skips fails the test (unused model steps and "
        "read-only lookups are only listed in the summary).\n"
        f"{exc.message}"
    )
    text = f"if dropping the call is intended, re-record {target.what}: `{target.rerecord}`"
    return exc.with_next_steps((NextStep(NextStepAction.RERECORD, text),))


def _check_live_tool_names(target: Target, journal: Journal, live_tools: bool | list[str]) -> None:
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
        raise pytest.UsageError(f"redrive: {target.nodeid}: {problem}")


def _chains(journal: Journal) -> dict[str, str]:
    """Each run's last chain: it changes exactly when a frame was written."""
    return {r.run_id: r.last_chain for r in journal.runs()}
