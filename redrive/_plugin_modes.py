"""The pytest plugin's record modes, marker options and journal files (which file, which mode).

Part of :mod:`redrive.pytest_plugin` (see its docstring for the modes and the
file names); imports nothing of redrive's engine until a test asks for it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import urllib.parse
from pathlib import Path

import pytest

#: The record modes.
MODES = ("once", "new_episodes", "none", "all", "rewrite")
#: The keyword options the ``redrive`` marker takes.
MARKER_OPTIONS = ("record_mode", "path", "replay", "live_tools", "block_network", "journal_format")
#: The journal file formats: the binary ``.rdj``, or its JSON Lines text form.
FORMATS = {"rdj": ".rdj", "jsonl": ".rdj.jsonl"}


#: The longest readable part of a journal file name (file systems allow 255 bytes).
_MAX_NAME = 120


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


def _suffix(node: pytest.Item | pytest.Collector, marker: pytest.Mark | None = None) -> str:
    """The journal file suffix: the marker's ``journal_format``, else the command line's.

    ``marker``: the node's closest ``redrive`` marker when the caller has it (else looked up).
    """
    marker = marker if marker is not None else node.get_closest_marker("redrive")
    chosen = marker.kwargs.get("journal_format") if marker is not None else None
    chosen = chosen or node.config.getoption("--redrive-journal-format", default=None) or "rdj"
    return FORMATS[str(chosen)]


def file_name(name: str, unique: str) -> str:
    """``name`` made safe for a file name, made unique by a hash of ``unique`` when needed.

    Anything but letters, digits, ``_``, ``.`` and ``-`` becomes ``_``; when
    that changed ``unique`` (or the name is over 120 characters), ``-`` and
    the first 8 hex digits of the SHA-256 of ``unique`` follow.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "test"
    if safe != unique or len(safe) > _MAX_NAME:
        digest = hashlib.sha256(unique.encode("utf-8")).hexdigest()[:8]
        safe = f"{safe[:_MAX_NAME]}-{digest}"
    return safe


#: Each test's journal file, worked out once (the marker and the options do not change).
_JOURNAL_PATH = pytest.StashKey[Path]()
#: Each test file's journal folder (``<dir>/journals/<module>``), worked out once per file.
_FOLDERS = pytest.StashKey[dict[Path, Path]]()


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
    found = item.stash.get(_JOURNAL_PATH, None)
    if found is None:
        found = item.stash[_JOURNAL_PATH] = _journal_path(item)
    return found


def _journal_path(item: pytest.Item) -> Path:
    """:func:`journal_path`, worked out."""
    marker = item.get_closest_marker("redrive")
    if marker is not None and marker.kwargs.get("path"):
        return Path(item.path).parent / str(marker.kwargs["path"])
    in_module = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    name = file_name(item.name, in_module)
    folders = item.config.stash.setdefault(_FOLDERS, {})
    folder = folders.get(item.path)
    if folder is None:
        folder = folders[item.path] = Path(item.path).parent / "journals" / Path(item.path).stem
    return folder / f"{name}{_suffix(item, marker)}"


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


def _rerecord_command(item: pytest.Item) -> str:
    """The command that re-records one test from scratch."""
    return f"pytest {shlex.quote(item.nodeid)} --redrive-record-mode=rewrite"
