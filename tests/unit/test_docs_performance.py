"""Every code block of docs/explanation/replay-cost.md runs and its assertions hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "replay-cost.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_page_has_blocks() -> None:
    """The page is read (a moved page or a changed fence would skip every block silently)."""
    assert len(BLOCKS) == 1


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_block_runs(block: str) -> None:
    """Each block runs on its own, in a fresh namespace."""
    exec(compile(block, str(PAGE), "exec"), {"__name__": "docs_performance"})
