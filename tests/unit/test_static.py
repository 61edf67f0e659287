"""The code stays lint-clean and strictly typed (ruff, mypy --strict), public API included."""

from __future__ import annotations

import os
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
