"""Every code block of docs/usage-and-budgets.md and docs/timeline.md runs and its asserts hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = {"usage-and-budgets.md": 3, "timeline.md": 1}
BLOCKS = [
    (name, block)
    for name in PAGES
    for block in re.findall(
        r"```python\n(.*?)```", (DOCS / name).read_text(encoding="utf-8"), re.DOTALL
    )
]


def test_the_pages_have_their_blocks() -> None:
    """Each page is read (a moved page or a changed fence would skip every block silently)."""
    for name, count in PAGES.items():
        assert sum(1 for page, _ in BLOCKS if page == name) == count, name


@pytest.mark.parametrize(
    "page,block", BLOCKS, ids=[f"{name}-{i}" for i, (name, _) in enumerate(BLOCKS)]
)
def test_every_block_runs(
    page: str, block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block runs on its own, in a fresh namespace, from an empty folder."""
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(DOCS / page), "exec"), {"__name__": "docs_operating"})
