"""The code stays lint-clean and strictly typed (ruff, mypy --strict), public API included;
mypy --strict rejects misuses of the public API (the snippets of tests/typecheck_rejects.py).

Both mypy runs are in this one module so that they run in one test process, one after
the other: the second finds the package in the first one's cache (under pytest-xdist a
cache is per worker, and a cold run over the package costs tens of seconds of CPU).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> list[str]:
    if (
        shutil.which(name) is None
        and subprocess.run(
            [sys.executable, "-m", name, "--version"], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return [sys.executable, "-m", name]


def tool_env() -> dict[str, str]:
    """The environment for ruff and mypy: this process's, and under a pytest-xdist worker
    (``PYTEST_XDIST_WORKER``, e.g. ``gw0``) caches of that worker's own
    (``.mypy_cache/gw0``, ``.ruff_cache/gw0``), so two workers never write one cache."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return dict(os.environ)
    return {
        **os.environ,
        "MYPY_CACHE_DIR": str(ROOT / ".mypy_cache" / worker),
        "RUFF_CACHE_DIR": str(ROOT / ".ruff_cache" / worker),
    }


def test_ruff_is_clean() -> None:
    """ruff finds nothing in the package, the tests, benchmarks and scripts."""
    result = subprocess.run(
        [*_tool("ruff"), "check", "redrive", "tests", "benchmarks", "fixtures", "examples"],
        cwd=ROOT,
        env=tool_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    """The code is in ruff's format (``ruff format --check``): no diff noise in reviews."""
    result = subprocess.run(
        [
            *_tool("ruff"),
            "format",
            "--check",
            "redrive",
            "tests",
            "benchmarks",
            "fixtures",
            "examples",
        ],
        cwd=ROOT,
        env=tool_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    """mypy --strict passes on the package and on a file that uses the public API."""
    result = subprocess.run(
        [*_tool("mypy"), "redrive", "tests/typecheck_public_api.py"],
        cwd=ROOT,
        env=tool_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


REJECTS = Path("tests") / "typecheck_rejects.py"
_MARK = re.compile(r"#\s*rejects:\s*\[([a-z-]+)\]\s*$")
_ERROR = re.compile(
    r"^(?P<path>[^:\n]+):(?P<line>\d+): error: (?P<text>.*?)\s+\[(?P<code>[a-z-]+)\]$", re.M
)

#: (line number, expected error code, the snippet) for each marked line
SNIPPETS = [
    (number, mark.group(1), line.split("#")[0].strip())
    for number, line in enumerate((ROOT / REJECTS).read_text().splitlines(), start=1)
    if (mark := _MARK.search(line))
]


@pytest.fixture(scope="module")
def mypy_errors() -> dict[int, list[tuple[str, str]]]:
    """Run mypy once on the snippets; return line -> [(code, message)] of its errors there."""
    result = subprocess.run(
        [*_tool("mypy"), str(REJECTS)],
        cwd=ROOT,
        env=tool_env(),
        capture_output=True,
        text=True,
    )
    errors: dict[int, list[tuple[str, str]]] = {}
    for match in _ERROR.finditer(result.stdout.replace("\r", "")):
        if Path(match["path"]) == REJECTS:
            errors.setdefault(int(match["line"]), []).append((match["code"], match["text"]))
        else:  # an error in the package itself: test_static reports it better
            pytest.fail(f"mypy failed outside the snippets:\n{result.stdout}")
    return errors


@pytest.mark.parametrize(
    ("line", "code", "snippet"), SNIPPETS, ids=[snippet for _, _, snippet in SNIPPETS]
)
def test_mypy_rejects(
    mypy_errors: dict[int, list[tuple[str, str]]], line: int, code: str, snippet: str
) -> None:
    """The snippet gets a mypy --strict error of its expected code."""
    found = mypy_errors.get(line, [])
    assert code in [c for c, _ in found], f"{REJECTS}:{line} `{snippet}` was accepted: {found}"


def test_mypy_rejects_nothing_else(mypy_errors: dict[int, list[tuple[str, str]]]) -> None:
    """Only the marked lines are errors (the rest of the file is correct use)."""
    marked = {line for line, _, _ in SNIPPETS}
    assert {line: e for line, e in mypy_errors.items() if line not in marked} == {}
