"""Every code block of docs/plan-and-pause.md runs and its assertions hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plan-and-pause.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_page_has_blocks() -> None:
    """The page is read (a moved page or a changed fence would skip every block silently)."""
    assert len(BLOCKS) == 3


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_block_runs(block: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each block runs on its own, in a fresh namespace; the plan prints as the page shows."""
    exec(compile(block, str(PAGE), "exec"), {"__name__": "docs_plan_and_pause"})
    printed = capsys.readouterr().out
    if "plan.summary()" in block:
        shown = PAGE.read_text(encoding="utf-8").split("```text\n", 1)[1].split("```", 1)[0]
        for want, got in zip(shown.splitlines(), printed.splitlines(), strict=True):
            assert got.startswith(want.removesuffix("...")), (want, got)
