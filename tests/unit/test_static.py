"""The code stays lint-clean and strictly typed (ruff, mypy --strict), public API included."""

from __future__ import annotations

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


def test_ruff_is_clean() -> None:
    """ruff finds nothing in the package, the tests, benchmarks and scripts."""
    result = subprocess.run(
        [*_tool("ruff"), "check", "redrive", "tests", "benchmarks", "fixtures", "examples"],
        cwd=ROOT,
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
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    """mypy --strict passes on the package and on a file that uses the public API."""
    result = subprocess.run(
        [*_tool("mypy"), "redrive", "tests/typecheck_public_api.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
