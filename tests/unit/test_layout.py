"""The package layout: the arrows between rooms, and the public surface."""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import pytest

import redrive

ROOT = Path(redrive.__file__).parent

#: room -> rooms it must never import
FORBIDDEN = {
    "storage": ("replay", "recorders"),
    "replay": ("recorders",),
    "frames.py": ("storage", "replay", "recorders"),
    "_canonical.py": ("storage", "replay", "recorders"),
    "_canonical_types.py": ("storage", "replay", "recorders", "frames", "_stored", "_canonical"),
    "_canonical_decode.py": ("storage", "replay", "recorders", "frames", "_canonical", "_stored"),
    "_stored.py": ("storage", "replay", "recorders"),
    "_scrub.py": ("storage", "replay", "recorders"),
    "_credentials.py": ("storage", "replay", "recorders", "frames", "_scrub", "_masking"),
    "_masking.py": ("storage", "replay", "recorders", "frames", "_scrub"),
    "errors.py": ("storage", "replay", "recorders", "frames"),
    "_advice.py": ("storage", "replay", "recorders", "frames"),
    "_errorbase.py": ("storage", "replay", "recorders", "frames", "errors"),
}


#: the most lines a module may have (split it by what the things in it are, not by size)
MAX_MODULE_LINES = 500

#: modules over :data:`MAX_MODULE_LINES` that other work is changing right now (issue 23);
#: each is split once that work has landed, and its entry removed. Nothing else goes here.
TOO_LONG_FOR_NOW = {}

#: the packages whose ``__all__`` must equal their public names
PUBLIC_PACKAGES = ("redrive", "redrive.replay", "redrive.storage", "redrive.recorders")


def _imports(path: Path, *, root: Path = ROOT, with_names: bool = False) -> list[str]:
    """The absolute module names ``path`` (a file under the package ``root``) imports.

    With ``with_names``, ``from a.b import c`` also yields ``a.b.c`` (``c`` may be a module).
    """
    tree = ast.parse(path.read_text())
    package = path.relative_to(root.parent).with_suffix("").parts
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level])
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module:
                module = node.module
            else:  # pragma: no cover - `from . import x` always has a level
                continue
            names.append(module)
            if with_names:
                names.extend(f"{module}.{alias.name}" for alias in node.names)
    return names


def private_reach_ins(root: Path = ROOT) -> list[str]:
    """Every import of a private module of a package (``pkg._x``) from outside ``pkg``.

    A private name inside a module (``pkg.mod._helper``) counts as private to the
    package holding ``mod``: rooms share their own helpers, never another room's.

    Args:
        root: the package directory to scan (``redrive/``).

    Returns:
        Lines ``"<file> imports <module>"``, sorted; empty when every private
        module is used only inside its own package.
    """
    top = root.name
    bad: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        home = ".".join(path.relative_to(root.parent).parent.parts)
        for name in _imports(path, root=root, with_names=True):
            parts = name.split(".")
            if parts[0] != top:
                continue
            for i, part in enumerate(parts[1:], start=1):
                if part.startswith("_") and not part.startswith("__"):
                    owner = parts[:i]
                    if not root.parent.joinpath(*owner).is_dir():  # a module: its package
                        owner = owner[:-1]
                    package = ".".join(owner)
                    if home != package and not home.startswith(f"{package}."):
                        bad.add(
                            f"{path.relative_to(root.parent)} imports {'.'.join(parts[: i + 1])}"
                        )
                    break
    return sorted(bad)


def public_names(module: types.ModuleType) -> set[str]:
    """The public names of ``module``: attributes not starting with ``_``, not modules.

    Read through ``dir()``, so the names a package loads on first use (its PEP 562
    ``__getattr__`` and ``__dir__``; not kept in its namespace) count as its own.
    ``from __future__`` features (an artifact of the import, not an export) are left out.
    """
    found = {name: getattr(module, name) for name in dir(module) if not name.startswith("_")}
    return {
        name
        for name, value in found.items()
        if not isinstance(value, types.ModuleType) and type(value).__module__ != "__future__"
    }


def test_arrows_point_one_way() -> None:
    """recorders -> replay -> storage -> frames: no module imports against the arrows."""
    bad = []
    for room, forbidden in FORBIDDEN.items():
        paths = [ROOT / room] if room.endswith(".py") else sorted((ROOT / room).rglob("*.py"))
        for path in paths:
            for name in _imports(path):
                for other in forbidden:
                    target = other.removesuffix(".py")
                    if name == f"redrive.{target}" or name.startswith(f"redrive.{target}."):
                        bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert bad == []


def module_lengths(root: Path = ROOT) -> dict[str, int]:
    """The number of lines of every module under ``root``, by its path relative to ``root``."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(root.rglob("*.py"))
    }


def test_no_module_is_over_500_lines() -> None:
    """Every module has at most 500 lines, but those other work is changing right now."""
    over = {
        name: lines
        for name, lines in module_lengths().items()
        if lines > MAX_MODULE_LINES and name not in TOO_LONG_FOR_NOW
    }
    assert over == {}, (
        f"modules over {MAX_MODULE_LINES} lines (split each by what the things in it are, "
        f"importing one way): {over}"
    )


def test_the_long_module_allow_list_holds_only_long_modules() -> None:
    """An allow-listed module that is gone or back under 500 lines leaves the list."""
    lengths = module_lengths()
    stale = sorted(name for name in TOO_LONG_FOR_NOW if lengths.get(name, 0) <= MAX_MODULE_LINES)
    assert stale == [], f"remove from TOO_LONG_FOR_NOW (gone or short now): {stale}"


def test_the_length_check_counts_lines(tmp_path: Path) -> None:
    """A module of 501 lines is over the limit, one of 500 is not."""
    pkg = tmp_path / "pkg"
    (pkg / "room").mkdir(parents=True)
    (pkg / "room" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (pkg / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert module_lengths(pkg) == {"room/long.py": MAX_MODULE_LINES + 1, "short.py": 500}


def test_no_private_reach_ins_across_rooms() -> None:
    """A private module (``redrive.replay._x``...) is imported only from inside its own package."""
    offenders = private_reach_ins()
    assert offenders == [], "private modules imported from outside their package:\n" + "\n".join(
        offenders
    )


def test_the_reach_in_check_sees_every_import_form(tmp_path: Path) -> None:
    """Relative, absolute and ``from pkg import _mod`` reach-ins are found; in-room ones are not."""
    pkg = tmp_path / "pkg"
    for room in ("replay", "storage", "recorders"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
        (pkg / room / "_private.py").write_text("")
    (pkg / "__init__.py").write_text("from ._top import x\n")
    (pkg / "recorders" / "http.py").write_text(
        "from ..replay._private import decode\n"
        "from ..storage import _private\n"
        "import pkg.replay._private\n"
        "from . import _private as mine\n"
        "from ._private import helper\n"
        "from .http import _helper\n"
    )
    (pkg / "replay" / "run.py").write_text("from pkg.replay._private import y\n")
    assert private_reach_ins(pkg) == [
        "pkg/recorders/http.py imports pkg.replay._private",
        "pkg/recorders/http.py imports pkg.storage._private",
    ]


def test_all_is_sorted_and_complete() -> None:
    """redrive.__all__ is sorted, and names exactly the public attributes it exports."""
    assert list(redrive.__all__) == sorted(redrive.__all__)
    for name in redrive.__all__:
        assert hasattr(redrive, name), name


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_all_equals_the_public_names(package: str) -> None:
    """Each room's ``__all__`` is sorted and equals its public names, both ways."""
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert exported == sorted(exported), f"{package}.__all__ is not sorted"
    missing = sorted(name for name in exported if not hasattr(module, name))
    assert missing == [], f"{package}.__all__ names what it does not have: {missing}"
    public = public_names(module)
    unlisted = sorted(public - set(exported))
    assert unlisted == [], f"{package} has public names missing from __all__: {unlisted}"
    hidden = sorted(name for name in set(exported) - public if not name.startswith("__"))
    assert hidden == [], f"{package}.__all__ lists modules or private names: {hidden}"


def test_errors_are_replay_errors_and_stdlib_where_true() -> None:
    """Every error is a ReplayError; lookup and value errors are the stdlib ones too."""
    assert issubclass(redrive.UnknownRunError, LookupError)
    assert issubclass(redrive.ReplayMissError, LookupError)
    assert issubclass(redrive.RunInputMismatchError, ValueError)
    for name in redrive.__all__:
        obj = getattr(redrive, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and name.endswith("Error"):
            assert issubclass(obj, redrive.ReplayError), name


def test_errors_pickle_with_fields() -> None:
    """Errors pickle with their structured fields (they cross process pools)."""
    import pickle

    err = redrive.SideEffectRetryBlockedError("blocked", run_id="r", seq=3, tool="charge_card")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is redrive.SideEffectRetryBlockedError
    assert (back.run_id, back.seq, back.tool, str(back)) == ("r", 3, "charge_card", "blocked")


def _sibling_imports(path: Path) -> set[str]:
    """The modules of ``path``'s own package it imports: relative imports anywhere in it.

    Imports inside functions and under ``TYPE_CHECKING`` count: each is an arrow.
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                names.add(node.module.split(".")[0])
            else:
                names.update(alias.name for alias in node.names)
    return names


def circles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of ``graph`` (node -> the nodes it points at): each one's nodes, sorted.

    Tarjan's strongly connected components of more than one node; ``[]`` when the
    arrows go one way.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return circles


def import_circles(package: Path) -> list[list[str]]:
    """Every circle of imports among the modules of ``package`` (strongly connected, size > 1).

    Returns:
        Each circle's module names, sorted; ``[]`` when imports go one way.
    """
    modules = {path.stem: path for path in package.glob("*.py")}
    graph = {
        name: {dep for dep in _sibling_imports(path) if dep in modules and dep != name}
        for name, path in modules.items()
    }
    return circles_of(graph)


def test_replay_modules_import_one_way() -> None:
    """replay/'s parts import one way: no circle, counting lazy and TYPE_CHECKING imports."""
    assert import_circles(ROOT / "replay") == []


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    """A circle through a TYPE_CHECKING import and a lazy one is found; a one-way chain is not."""
    (tmp_path / "_a.py").write_text("from ._b import x\n")
    (tmp_path / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._c import y\n"
    )
    (tmp_path / "_c.py").write_text("def f():\n    from ._a import z\n")
    (tmp_path / "_d.py").write_text("from ._a import x\n")
    assert import_circles(tmp_path) == [["_a", "_b", "_c"]]
    (tmp_path / "_c.py").write_text("")
    assert import_circles(tmp_path) == []


def test_run_is_a_thin_facade_over_parts() -> None:
    """Run holds its parts (no base class of the library) and has about 40 members."""
    import inspect
    import textwrap

    from redrive.replay import Run

    assert Run.__mro__ == (Run, object)
    plumbing = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"}
    plumbing |= {"__annotations__", "__firstlineno__", "__static_attributes__"}
    members = set(vars(Run)) - plumbing
    tree = ast.parse(textwrap.dedent(inspect.getsource(Run.__init__)))
    members |= {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and isinstance(node.ctx, ast.Store)
    }
    assert len(members) <= 46, sorted(members)  # 46: run.usage (issue 25)


def _module_arrows(path: Path, root: Path, modules: dict[str, Path]) -> set[str]:
    """The modules under ``root`` that ``path`` imports (``from pkg import mod``: ``pkg.mod``)."""
    package = path.relative_to(root.parent).with_suffix("").parts[:-1]
    arrows: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            arrows.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            named = {f"{module}.{alias.name}" for alias in node.names} & set(modules)
            arrows.update(named or ({module} & set(modules)))
    return arrows


def package_circles(root: Path = ROOT) -> list[list[str]]:
    """Every circle of imports among all modules under ``root`` (lazy and TYPE_CHECKING too).

    A package import (``from .replay import x``) is an arrow to its ``__init__``.

    Returns:
        Each circle's module names, sorted; ``[]`` when the whole package imports one way.
    """
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph = {name: _module_arrows(path, root, modules) - {name} for name, path in modules.items()}
    return circles_of(graph)


def test_the_whole_package_imports_one_way() -> None:
    """No circle of imports anywhere under redrive/ (lazy and TYPE_CHECKING imports count)."""
    assert package_circles() == []


def test_the_package_circle_check_finds_circles(tmp_path: Path) -> None:
    """A circle through ``from pkg import mod`` and a lazy import is found; one-way is not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sub import thing\n")
    (pkg / "sub" / "__init__.py").write_text("from ._a import thing\n")
    (pkg / "sub" / "_a.py").write_text("def f():\n    from .. import _top\n")
    (pkg / "_top.py").write_text("from .sub import _a\n")
    assert package_circles(pkg) == [["pkg._top", "pkg.sub._a"]]
    (pkg / "sub" / "_a.py").write_text("thing = 1\n")
    assert package_circles(pkg) == []
