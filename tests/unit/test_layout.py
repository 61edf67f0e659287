"""The package layout: the arrows between rooms, and the public surface."""

from __future__ import annotations

import ast
from pathlib import Path

import redrive

ROOT = Path(redrive.__file__).parent

#: room -> rooms it must never import
FORBIDDEN = {
    "storage": ("replay", "recorders"),
    "replay": ("recorders",),
    "frames.py": ("storage", "replay", "recorders"),
    "errors.py": ("storage", "replay", "recorders", "frames"),
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    package = path.relative_to(ROOT.parent).with_suffix("").parts
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level])
                names.append(".".join([*base, *(node.module.split(".") if node.module else [])]))
            elif node.module:
                names.append(node.module)
    return names


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


def test_all_is_sorted_and_complete() -> None:
    """redrive.__all__ is sorted, and names exactly the public attributes it exports."""
    assert list(redrive.__all__) == sorted(redrive.__all__)
    for name in redrive.__all__:
        assert hasattr(redrive, name), name


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
