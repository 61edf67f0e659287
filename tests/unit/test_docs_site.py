"""The documentation site builds strictly and offline, and its generated pages match the code.

``mkdocs build --strict`` turns every warning into an error (a broken link or
anchor, a page missing from the nav, a docstring mkdocstrings cannot read);
the build runs with every proxy pointed at a closed port, so a plugin that
fetched anything would fail it. The timeline screenshot of the site is
regenerated in headless Chromium from the commands its page shows.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import redrive
from tests import sample_run
from tests.docblocks import ROOT, claimed
from tests.sdkserver import serve

ARTIFACTS = ROOT / "tests" / "artifacts"
SCREENSHOT = ROOT / "docs" / "timeline.png"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_timeline_screenshot_is_regenerated(tmp_path: Path) -> None:
    """The page's two-run ``redrive view`` command, rendered in headless Chromium (network
    cut), gives the screenshot the page shows, at its size. Written to docs/timeline.png in CI
    and with ``REDRIVE_DOCS_SCREENSHOTS=write`` (else to tests/artifacts/)."""
    from tests.unit.test_view import browse

    (block,) = claimed("tests/unit/test_view.py::test_docs_view_commands")
    (command,) = [c for c in block.code.splitlines() if " view " in c and "compare.html" in c]
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    with serve() as server:
        sample_run.record(server, journal)
        sample_run.record(server, journal, "support:43", cents=9900)
    journal.close()
    words = shlex.split(command)[1:]
    words[words.index("--journal") + 1] = str(tmp_path / "runs.duckdb")
    words[-1] = str(tmp_path / "compare.html")
    made = subprocess.run(
        [sys.executable, "-m", "redrive.cli", *words],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    width, height = _png_size(SCREENSHOT)
    shot = ARTIFACTS / "timeline.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    dom = browse(tmp_path / "compare.html", screenshot=shot, size=(width, height))
    assert 'data-rendered="yes"' in dom and 'id="divergence"' in dom
    assert _png_size(shot) == (width, height)
    assert shot.stat().st_size > 10_000  # a drawn timeline, not a blank page
    if os.environ.get("CI") == "true" or os.environ.get("REDRIVE_DOCS_SCREENSHOTS") == "write":
        # beside it, then renamed over it: a reader in another process (the site build, the
        # view test's size check) sees the old screenshot or the new one, never a torn one
        partial = SCREENSHOT.with_name(f".{SCREENSHOT.name}.{os.getpid()}")
        shutil.copyfile(shot, partial)
        os.replace(partial, SCREENSHOT)


def test_site_builds_strictly_offline(tmp_path: Path) -> None:
    """``mkdocs build --strict`` passes with the network cut; the generated pages hold every
    command of the parser and every public exception."""
    dead = "http://127.0.0.1:9"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NO_MKDOCS_2_WARNING": "1",
        **{name: dead for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
        "NO_PROXY": "",
        "no_proxy": "",
    }
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    cli_page = (site / "reference" / "cli.html").read_text()
    for command in _commands():
        assert f'id="{command}"' in cli_page, f"the command line page lacks {command}"
    errors_page = (site / "reference" / "errors.html").read_text()
    for cls in _hooks().public_exceptions():
        assert f'id="{cls.__name__.lower()}"' in errors_page, cls
    api_page = (site / "reference" / "api.html").read_text()
    for name in ("redrive.run", "redrive.open_journal", "redrive.wrap", "redrive.tool"):
        assert f'id="{name}"' in api_page, name
    assert (site / "timeline.png").stat().st_size > 10_000


def _commands() -> list[str]:
    import argparse

    from redrive.cli._main import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_command_table_names_real_commands_and_options() -> None:
    """Each row of the command line page's table names commands of the parser, with options
    those commands have; every command has a row."""
    import argparse

    from redrive.cli._main import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    table = text.split("## Commands at a glance\n", 1)[1].split("\n## ", 1)[0]
    seen = set()
    for row in table.splitlines()[2:]:
        first = row.split(" | ", 1)[0]
        for usage in re.findall(r"`([a-z][^`]*)`", first):
            command = usage.split()[0]
            assert command in sub.choices, f"no command {command!r}: {row}"
            seen.add(command)
            options = {o for a in sub.choices[command]._actions for o in a.option_strings}
            for flag in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", usage):
                assert flag in options, f"{command} has no option {flag}: {row}"
    assert seen == set(sub.choices)


def test_exit_codes_are_the_command_lines() -> None:
    """The exit codes the command line page lists are the ``redrive.cli.EXIT_*`` codes."""
    from redrive import cli

    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    listed = text.split("Exit codes:", 1)[1].split("\n\n", 1)[0]
    codes = {int(c) for c in re.findall(r"(?:^|; )(\d+) ", " ".join(listed.split()))}
    assert codes == {v for k, v in vars(cli).items() if k.startswith("EXIT_")}


def test_every_error_says_what_to_do() -> None:
    """Each redrive error's docstring (the errors page) ends with what to do next."""
    missing = [
        cls.__name__
        for cls in _hooks().public_exceptions()
        if issubclass(cls, redrive.ReplayError)
        and cls is not redrive.ReplayError
        and not _hooks().what_to_do(inspect.cleandoc(cls.__doc__ or ""))[1]
    ]
    assert not missing, f"errors without a 'What to do:' paragraph: {missing}"


def _table(page: str, heading: str) -> dict[str, list[str]]:
    """The rows of the Markdown table under ``heading``: first cell (unquoted) -> cells."""
    text = (ROOT / "docs" / page).read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


def test_configuration_page_lists_every_option_with_its_default() -> None:
    """Every option of ``redrive.run`` is on the configuration page, with its default."""
    from redrive.replay._config import OPTION_DEFAULTS, RunOptions

    rows = _table("reference/configuration.md", "Options of `redrive.run`")
    assert set(rows) == set(RunOptions.__annotations__) == set(OPTION_DEFAULTS)
    for option, default in OPTION_DEFAULTS.items():
        if isinstance(default, str | int | float | bool) or default is None:
            assert rows[option][1] == f"`{default!r}`", (option, rows[option][1])


def test_configuration_page_lists_every_environment_variable() -> None:
    """Each ``REDRIVE_*`` variable the package reads is on the page, and each on the page or
    in the suite's table of docs/contributing.md is read somewhere."""
    read = set()
    for path in (ROOT / "redrive").rglob("*.py"):
        read |= set(re.findall(r"\bREDRIVE_[A-Z_]+\b", path.read_text()))
    documented = set(_table("reference/configuration.md", "Environment variables"))
    assert read <= documented, f"not on docs/reference/configuration.md: {read - documented}"
    suite = set(_table("contributing.md", "The test suite"))
    code = "".join(
        p.read_text()
        for folder in ("redrive", "tests", "benchmarks", "scripts")
        for p in (ROOT / folder).rglob("*")
        if p.is_file()
        and p.suffix in (".py", "")
        and "artifacts" not in p.parts
        # not a virtualenv or cache inside the checkout (scripts/bench makes benchmarks/.venv)
        and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    )
    for name in (documented | suite) - {"CI", "HYPOTHESIS_PROFILE"}:
        assert name in code, f"{name} is documented but nothing reads it"


def _prose(path: Path) -> str:
    """A page without its code blocks (code is not a link)."""
    return re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)


@pytest.mark.parametrize(
    "page",
    ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))],
)
def test_nothing_points_outside_the_repository(page: str) -> None:
    """No page sends a reader to a file outside the checkout (such as ../shared/DESIGN.md)."""
    text = _prose(ROOT / page)
    assert "shared/DESIGN.md" not in text
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in link or link.startswith("#"):
            continue
        target = (ROOT / page).parent / link.split("#")[0]
        assert ROOT in target.resolve().parents, f"{page} links outside the checkout: {link}"
