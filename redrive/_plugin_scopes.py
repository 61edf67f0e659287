"""The pytest plugin's fixtures of every scope: what they call is recorded and guarded too.

Part of :mod:`redrive.pytest_plugin` (see its docstring). Function-scoped
fixtures of a redrive test run inside the test's own run: ``redrive_run`` is
set up before them (:func:`run_first`). A fixture of a wider scope (class,
module, package, session) that a redrive test uses is set up once for many
tests, so it gets recordings of its own: its setup, and the teardown after
its ``yield``, each run inside a run recorded to (or replayed from) a file
of the fixture, under the same record modes, precedence and network guard
as a test (:func:`record_fixture`):

=============  ===================================================================
scope          setup file (teardown: ``<name>.teardown.rdj``)
=============  ===================================================================
``class``      ``journals/<module>/fixtures/<Class>.<name>.rdj`` next to the module
``module``     ``journals/<module>/fixtures/<name>.rdj`` next to the module
``package``    ``journals/fixtures/package/<name>.rdj`` in the package's directory
``session``    ``journals/fixtures/session/<name>.rdj`` next to the fixture's file
=============  ===================================================================

A parametrized fixture's file name ends with ``[<param index>]`` made safe
(and a hash); its run id is ``fixture:<scope>:<scope node id>::<name>``. The
``redrive`` marker that applies is the scope node's (a module's
``pytestmark``, a class's marker); package and session fixtures have none.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import attrs
import pytest

from ._plugin_guard import NetworkBlocked
from ._plugin_modes import MARKER_OPTIONS, _suffix, file_name
from ._plugin_record import Target, recording

__all__ = ["WIDE", "note_wide_fixtures", "record_fixture", "run_first"]

#: The fixture definitions of wider scopes that redrive tests use: ``id(def) -> def``.
WIDE = pytest.StashKey[dict[int, Any]]()
#: The marker options a fixture's recording takes (a file of its own: no ``path``).
_FIXTURE_OPTIONS = tuple(o for o in MARKER_OPTIONS if o not in ("path", "journal_format"))


def _defs(item: pytest.Item) -> dict[str, Any]:
    info = getattr(item, "_fixtureinfo", None)
    return dict(getattr(info, "name2fixturedefs", None) or {})


def _scope(defs: dict[str, Any], name: str) -> str:
    found = defs.get(name) or ()
    return str(found[-1].scope) if found else "function"


def run_first(item: pytest.Item) -> None:
    """Set ``redrive_run`` up before the test's other function-scoped fixtures (autouse ones too).

    pytest sets fixtures up in the order of ``item.fixturenames`` (wider scopes
    first); ``redrive_run`` goes right after the last wider-scoped name.
    """
    names: list[str] = item.fixturenames  # type: ignore[attr-defined]
    if "redrive_run" in names:
        names.remove("redrive_run")
    defs = _defs(item)
    index = next((i for i, n in enumerate(names) if _scope(defs, n) == "function"), len(names))
    names.insert(index, "redrive_run")


def note_wide_fixtures(item: pytest.Item, wide: dict[int, Any]) -> None:
    """Add the wider-scoped fixture definitions ``item`` uses (overridden ones too) to ``wide``."""
    defs = _defs(item)
    for name in getattr(item, "fixturenames", ()):
        for fixturedef in defs.get(name) or ():
            if fixturedef.scope != "function" and name != "request":
                wide[id(fixturedef)] = fixturedef


@attrs.frozen
class _Names:
    """Where one instance of a wider-scoped fixture records (see the module docstring)."""

    argname: str
    scope: str
    node: Any  # the scope's node: Class, Module, Package, Session (or the item)
    folder: Path
    stem: str  # the file name without suffix
    run_id: str
    rerecord: str
    options: dict[str, Any]

    def target(self, teardown: bool, config: pytest.Config) -> Target:
        stem = self.stem + (".teardown" if teardown else "")
        where = self.node.nodeid or "session"
        return Target(
            nodeid=f"fixture {self.argname!r} ({self.scope} {where})"
            + (" teardown" if teardown else ""),
            what=f"fixture {self.argname!r}",
            path=self.folder / f"{stem}{_suffix(self.node)}",
            run_id=self.run_id + (":teardown" if teardown else ""),
            options=self.options,
            config=config,
            rerecord=self.rerecord,
            fixture=True,
        )


def _names(fixturedef: Any, request: Any) -> _Names:
    """The file, run id, options and re-record command of this instance of ``fixturedef``."""
    scope, argname, node = str(fixturedef.scope), str(fixturedef.argname), request.node
    item = getattr(request, "_pyfuncitem", None)
    config = request.config
    param = f"[{request.param_index}]" if fixturedef.params is not None else ""
    visible = tuple(getattr(request, "_arg2fixturedefs", {}).get(argname, ()))
    overridden = len(visible) > 1 and visible[-1] is not fixturedef
    owner = f"@{fixturedef.baseid}" if overridden else ""
    unique = f"{argname}{param}{owner}"
    if scope in ("class", "module") or node is item:
        module = node if isinstance(node, pytest.Module) else node.getparent(pytest.Module)
        path = Path(module.path if module is not None else node.path)
        folder = path.parent / "journals" / path.stem / "fixtures"
        inner = node.nodeid.split("::", 1)[1] + "." if "::" in node.nodeid else ""
        stem = file_name(inner + argname + param, inner + unique)
    else:
        if scope == "package":
            base = Path(node.path)
        else:  # the directory of the fixture's file, when it is in the project
            code = getattr(fixturedef.func, "__code__", None)
            root = Path(config.rootpath)
            source = Path(code.co_filename) if code is not None else root / "conftest.py"
            base = source.parent if source.is_relative_to(root) else root
        folder = base / "journals" / "fixtures" / scope
        stem = file_name(argname + param, unique)
    marker = node.get_closest_marker("redrive") if scope != "session" else None
    options = {k: v for k, v in (marker.kwargs if marker else {}).items() if k in _FIXTURE_OPTIONS}
    target_id = node.nodeid or (item.nodeid if item is not None else "")
    return _Names(
        argname=argname,
        scope=scope,
        node=node,
        folder=folder,
        stem=stem,
        run_id=f"fixture:{scope}:{node.nodeid}::{argname}{param}{owner}",
        rerecord=f"pytest {shlex.quote(target_id)} --redrive-record-mode=rewrite",
        options=options,
    )


def _refuse_blocked(target: Target, blocked: Iterable[str]) -> None:
    """Fail a fixture phase whose code caught the NetworkBlocked its request raised."""
    sent = list(blocked)
    if sent:
        raise NetworkBlocked(
            f"redrive: {target.nodeid} sent {'; '.join(sent)} outside recorded steps with the "
            "network guard on (its code caught the NetworkBlocked raised there). Route the "
            "call through a wrapped client (redrive.wrap) so it is recorded, or mock it."
        )


def _teardown_in_recording(fixturedef: Any, names: _Names, config: pytest.Config) -> None:
    """Run the teardown after a yield fixture's ``yield`` inside a recording of its own.

    pytest registers that teardown as the fixture's last finalizer (a partial of
    ``_teardown_yield_fixture``) during setup; it is replaced by one that runs
    it in the recording. A fixture without one (a plain ``return``) has no teardown.
    """
    finalizers = getattr(fixturedef, "_finalizers", None)
    if not finalizers:
        return
    last = finalizers[-1]
    func = getattr(last, "func", None)
    if not isinstance(last, functools.partial) or getattr(func, "__name__", "") != (
        "_teardown_yield_fixture"
    ):
        return

    def teardown() -> None:
        target = names.target(True, config)
        blocked: list[str] = []
        with recording(target, blocked):
            last()
        _refuse_blocked(target, blocked)

    finalizers[-1] = teardown


def record_fixture(fixturedef: Any, request: Any) -> Generator[None, Any, Any]:
    """The ``pytest_fixture_setup`` wrapper of a wider-scoped fixture: its setup in a recording.

    The fixtures it depends on are set up first (each in its own recording),
    then its body runs inside the run of its setup file; the teardown after
    its ``yield`` gets the teardown file (see :func:`_teardown_in_recording`).

    Raises:
        NetworkBlocked: the fixture's code caught a request the guard refused.
        ReplayMissError / DivergenceError: as a test's replay raises them,
            ending with the command that re-records the fixture.
    """
    for argname in fixturedef.argnames:
        request.getfixturevalue(argname)
    names = _names(fixturedef, request)
    target = names.target(False, request.config)
    blocked: list[str] = []
    with recording(target, blocked):
        result = yield
    _refuse_blocked(target, blocked)
    _teardown_in_recording(fixturedef, names, request.config)
    return result
