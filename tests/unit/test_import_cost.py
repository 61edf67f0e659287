"""What ``import redrive`` and the pytest plugin load: the engine, not the tooling (issue 26).

Every process pays the import: each CLI command, each restarted worker, each
pytest session (the plugin loads in all of them). The checks, plans, recovery,
export and the SDK client wrapping are imported on first use of their names.
No test here times anything: each asserts which modules a fresh interpreter holds.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import redrive

#: modules a recording or replaying loop never needs, kept out of ``import redrive``
DEFERRED = (
    # the command line's and operators' modules (checks, plans, recovery, what changed)
    "redrive._check",
    "redrive._check_jobs",
    "redrive._dryreport",
    "redrive._durable",
    "redrive._entry",
    "redrive._plan",
    "redrive._promptcheck",
    "redrive._recover",
    "redrive._resumable",
    "redrive._runcheck",
    "redrive._whatchanged",
    "redrive.cli",
    # an SDK client's HTTP recording (``redrive.wrap``): decorated tools and models skip it
    "redrive.recorders._recorder",
    "redrive.recorders._transports",
    "redrive.recorders._wrap",
    "redrive.recorders.anthropic",
    "redrive.recorders.openai",
    # comparing runs and rendering a run's timeline page (the command line, reports)
    "redrive._volatile",
    "redrive.replay._history",
    "redrive.replay._rundiff",
    "redrive.replay._timeline",
    # export to a file (the pytest plugin imports it when a test replays one)
    "redrive.storage.rdj",
    # what only they import from the standard library
    "multiprocessing",
    "pickle",
    "statistics",
    "xml.etree.ElementTree",
    # optional dependencies and heavy ones
    "duckdb",
    "httpx",
    "psycopg",
    "rich",
)

#: what ``import redrive`` leaves out but ``import pytest`` loads itself: the installed
#: metadata (read on first use: a new run's start), what only ``wrap`` needs, and
#: ``html`` (a run's timeline page)
NOT_WITH_THE_PACKAGE = (
    "difflib",
    "gzip",
    "html",
    "importlib.metadata",
    "pathlib",
    "urllib.parse",
    "zipfile",
)


def _loaded(statement: str, modules: tuple[str, ...] = DEFERRED) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after ``statement``."""
    code = (
        f"import sys, json; {statement}; "
        f"print(json.dumps(sorted(set({list(modules)!r}) & set(sys.modules))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


@pytest.mark.parametrize("statement", ["import redrive", "import redrive.pytest_plugin"])
def test_import_leaves_the_tooling_unloaded(statement: str) -> None:
    """Importing the package, or the plugin, loads none of the deferred modules."""
    assert _loaded(statement) == []


def test_import_redrive_leaves_the_metadata_and_http_modules_unloaded() -> None:
    """Without pytest, ``import redrive`` imports neither importlib.metadata nor urllib.parse."""
    assert _loaded("import redrive", NOT_WITH_THE_PACKAGE) == []


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    """Each name of ``__all__`` resolves, ``from redrive import *`` binds all, dir lists all."""
    code = (
        "import redrive; names = list(redrive.__all__); "
        "listed = set(names) - set(dir(redrive)); "
        "ns = {}; exec('from redrive import *', ns); "
        "import json; print(json.dumps([sorted(listed), sorted(set(names) - set(ns)), "
        "sorted(n for n in names if getattr(redrive, n, None) is None)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(done.stdout) == [[], [], []]


def test_a_lazy_name_is_the_defining_modules_object() -> None:
    """A lazy name is its defining module's object; an unknown name raises AttributeError."""
    from redrive._check import check_run
    from redrive._plan import plan
    from redrive.storage.rdj import export_run

    assert redrive.check_run is check_run
    assert redrive.plan is plan
    assert redrive.export_run is export_run
    assert redrive.wrap is redrive.recorders.wrap
    assert redrive.diff_runs is redrive.replay.diff_runs
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        redrive.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", ["redrive", "redrive.replay"])
def test_every_lazy_name_is_exported(package: str) -> None:
    """A name loaded on first use is in the package's ``__all__`` (so the layout checks see it)."""
    module = importlib.import_module(package)
    assert sorted(set(module._LAZY) - set(module.__all__)) == []
