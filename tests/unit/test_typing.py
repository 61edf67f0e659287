"""mypy --strict rejects misuses of the public API (the snippets of tests/typecheck_rejects.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .test_static import ROOT, _tool, tool_env

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
