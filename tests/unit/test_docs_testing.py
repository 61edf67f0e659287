"""docs/testing.md: its blocks name options and paths the suite has, its tables are true."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROFILES, examples

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```sh\n(.*?)```", PAGE, re.DOTALL)
#: the environment options a test module reads with a default (its size)
_READ = re.compile(r"os\.environ\.get\(\s*\"((?:REDRIVE|HYPOTHESIS)_[A-Z_]+)\"")
_TABLE_ROW = re.compile(r"^\| `([A-Z_]+)` \|", re.M)


def _options_read() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        found.update(_READ.findall(path.read_text(encoding="utf-8")))
    return found


def test_the_page_has_blocks() -> None:
    """The page is read (a moved page or a changed fence would check nothing)."""
    assert len(BLOCKS) == 4


def test_the_option_table_is_every_size_the_tests_read() -> None:
    """Each option in the table is read by a test; each size option a test reads is listed."""
    listed = set(_TABLE_ROW.findall(PAGE))
    sizes = {name for name in _options_read() if name.endswith(("_TRIALS", "_N", "_MATRIX"))}
    assert sizes <= listed, f"read by tests, missing from docs/testing.md: {sizes - listed}"
    known = _options_read() | _script_options() | {"HYPOTHESIS_PROFILE"}
    assert listed <= known, listed - known


def _script_options() -> set[str]:
    """The options scripts/test reads (``${REDRIVE_...:-default}``)."""
    return set(re.findall(r"\$\{(REDRIVE_[A-Z_]+):-", (ROOT / "scripts" / "test").read_text()))


def test_the_worker_option_is_listed_with_its_default() -> None:
    """scripts/test's ``REDRIVE_TEST_WORKERS`` is in a table with the default the script uses."""
    default = re.search(r"\$\{REDRIVE_TEST_WORKERS:-(\d+)\}", (ROOT / "scripts/test").read_text())
    assert default is not None and _script_options() == {"REDRIVE_TEST_WORKERS"}
    assert f"| `REDRIVE_TEST_WORKERS` | {default.group(1)} |" in PAGE


def test_the_profile_table_is_the_registered_profiles() -> None:
    """The examples column is each profile's max_examples."""
    for name, profile in PROFILES.items():
        assert f"| `{name}` | {profile.max_examples} |" in PAGE, name


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_block_collects_with_its_options(block: str) -> None:
    """Each block is ``NAME=value ... scripts/test [args]`` with options from the table; its
    pytest arguments collect (``--collect-only``) in that environment."""
    words = shlex.split(block)
    env = dict(os.environ)
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        assert f"| `{name}` |" in PAGE, name
        env[name] = value
    assert words[0] == "scripts/test", block
    args = words[1:]
    paths = [arg for arg in args if not arg.startswith("-")]
    if not paths:  # the whole suite: collect one module, enough to check the options parse
        args.append("tests/unit/test_docs_testing.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"^\d+ tests? collected", done.stdout, re.M), done.stdout[-2000:]


def test_the_quick_matrix_option_runs_fewer_cells() -> None:
    """``REDRIVE_MATRIX=quick`` runs fewer cells than the default, every one (the option works)."""
    from tests.integrations.matrix_cells import SCENARIOS, cells

    every = sum(len(scenario.boundaries) for scenario in SCENARIOS)
    assert 0 < len(cells("quick")) < len(cells()) == every


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_costly_property_follows_the_profile(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``examples()`` gives the count of the profile ``HYPOTHESIS_PROFILE`` names."""
    monkeypatch.setenv("HYPOTHESIS_PROFILE", profile)
    counts = {"default": 1, "ci": 2, "thorough": 3}
    assert examples(**counts) == counts[profile]
