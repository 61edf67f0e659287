"""scripts/test and scripts/demo say what they do while they set up (issue 25 item 8).

Before, both ran ``pip install --quiet`` and printed nothing for minutes. The
scripts run here in a copy of the repository's scripts with a stand-in
``.venv/bin/python`` that logs its arguments (no real install): each phase is
one line on stderr, stdout stays the program's own, and an unchanged
``pyproject.toml`` skips the install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: a stand-in interpreter: logs each call; pip prints what pip prints, the program its output
_FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../calls.log"
case "$*" in
  *"pip install"*"-e"*) echo "Collecting msgpack"; echo "Requirement already satisfied: x";
                        echo "Successfully installed redrive-0";;
  *"-m pytest"*|*"-m redrive.demo"*) echo '{"program": "output"}';;
esac
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of scripts/ and pyproject.toml with a stand-in .venv."""
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(_FAKE_PYTHON)
    python.chmod(0o755)
    return tmp_path


def _run(repo: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(repo / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def _calls(repo: Path) -> list[str]:
    return (repo / ".venv" / "calls.log").read_text().splitlines()


@pytest.mark.parametrize(("script", "extra"), [("test", "dev"), ("demo", "openai")])
def test_each_setup_phase_prints_a_line_and_an_unchanged_install_is_skipped(
    repo: Path, script: str, extra: str
) -> None:
    """First run: a line per phase and pip's Collecting lines on stderr, the program's output
    alone on stdout. Second run: one line saying the install is skipped, no pip call."""
    first = _run(repo, script, "--json")
    assert first.stdout == '{"program": "output"}\n'  # stdout is the program's own
    lines = first.stderr.splitlines()
    assert lines[0] == f"scripts/{script}: upgrading pip in .venv"
    assert lines[1].startswith(f"scripts/{script}: installing redrive[{extra}]")
    assert "Collecting msgpack" in lines and "Successfully installed redrive-0" in lines
    assert not any(line.startswith("Requirement already satisfied") for line in lines)
    assert f"scripts/{script}: installed" in lines
    assert lines[-1].startswith(f"scripts/{script}: running ")
    assert sum("pip install" in call for call in _calls(repo)) == 2

    again = _run(repo, script)
    assert again.stderr.splitlines()[0].startswith(
        f"scripts/{script}: redrive[{extra}] already installed in .venv"
    )
    assert sum("pip install" in call for call in _calls(repo)) == 2  # no new pip call

    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text() + "\n# changed\n")
    _run(repo, script)
    assert sum("pip install" in call for call in _calls(repo)) == 4  # a changed file reinstalls


def test_a_failed_install_stops_with_a_line_saying_so(repo: Path) -> None:
    """pip's failure is not hidden by the filter: the script exits non-zero, says so, and
    does not run the suite."""
    python = repo / ".venv" / "bin" / "python"
    python.write_text(
        _FAKE_PYTHON.replace(
            'echo "Successfully installed redrive-0";;',
            'echo "ERROR: no matching distribution" >&2; exit 1;;',
        )
    )
    done = subprocess.run(
        [str(repo / "scripts" / "test")], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "ERROR: no matching distribution" in done.stderr
    assert "scripts/test: pip install failed" in done.stderr
    assert not any("-m pytest" in call for call in _calls(repo))


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({}, [], "-m pytest -n 2 --dist loadfile"),
        ({}, ["-x", "tests/unit"], "-m pytest -n 2 --dist loadfile -x tests/unit"),
        ({"REDRIVE_TEST_WORKERS": "3"}, [], "-m pytest -n 3 --dist loadfile"),
        ({"REDRIVE_TEST_WORKERS": "0"}, ["-x"], "-m pytest -x"),
        ({}, ["-n", "1"], "-m pytest -n 1"),
        ({}, ["-n4"], "-m pytest -n4"),
        ({}, ["--numprocesses=auto"], "-m pytest --numprocesses=auto"),
        ({}, ["-p", "no:xdist"], "-m pytest -p no:xdist"),
        ({}, ["--pdb", "tests/unit"], "-m pytest --pdb tests/unit"),
    ],
)
def test_the_suite_runs_on_two_workers_unless_the_caller_chooses(
    repo: Path, env: dict[str, str], args: list[str], expected: str
) -> None:
    """By default pytest gets ``-n 2 --dist loadfile`` (pytest-xdist, a module per worker);
    ``REDRIVE_TEST_WORKERS`` changes the count (0: one process), and a caller's own ``-n``,
    ``-p no:xdist`` or ``--pdb`` is left to choose alone."""
    done = subprocess.run(
        [str(repo / "scripts" / "test"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "REDRIVE_TEST_WORKERS": "", **env},
    )
    assert _calls(repo)[-1] == expected
    assert done.stderr.splitlines()[-1].startswith(f"scripts/test: running pytest {expected[10:]}")


def test_a_worker_count_that_is_no_number_is_refused(repo: Path) -> None:
    """``REDRIVE_TEST_WORKERS=two`` stops before any install or test, saying what it takes."""
    done = subprocess.run(
        [str(repo / "scripts" / "test")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "REDRIVE_TEST_WORKERS": "two"},
    )
    assert done.returncode == 2
    assert "REDRIVE_TEST_WORKERS=two is not a number of worker processes" in done.stderr
    assert not (repo / ".venv" / "calls.log").exists()
