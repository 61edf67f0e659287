"""The code blocks of the README and of every documentation page, and who checks each.

:func:`blocks` finds every fenced and indented code block of ``README.md``
and ``docs/**/*.md`` (parsed as CommonMark, so a block inside a list item
counts). ``tests/unit/test_docs_blocks.py`` checks each one by its
language; a block that needs more than that generic check (a scripted
conversation, a framework, a queue, a database) is *claimed* in
:data:`CLAIMS` by the test that checks it, and that test finds its blocks with
:func:`claimed`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import attrs
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]


@attrs.frozen
class Block:
    """One code block of a page.

    Attributes:
        page: the page's path relative to the repository root (``docs/queues.md``).
        index: the block's position among the page's blocks (0-based).
        line: the line of its opening fence (1-based).
        lang: the fence's language (``""``: none; ``"indented"``: an indented block).
        title: the fence's ``title="..."`` attribute (a file name), or ``""``.
        code: the block's text.
    """

    page: str
    index: int
    line: int
    lang: str
    title: str
    code: str

    @property
    def where(self) -> str:
        """``page:line``, for messages."""
        return f"{self.page}:{self.line}"


@attrs.frozen
class Claim:
    """A test that checks the blocks it names, instead of the generic check.

    Attributes:
        page: the page (relative path), or ``"*"`` for a block found on any page.
        lang: the blocks' language.
        needle: a text every claimed block contains (``""``: every block of ``lang``).
        test: ``path::function`` of the test that checks them.
    """

    page: str
    lang: str
    needle: str
    test: str

    def matches(self, block: Block) -> bool:
        """Whether this claim covers ``block``."""
        return (
            self.page in ("*", block.page) and self.lang == block.lang and self.needle in block.code
        )


_UNIT = "tests/unit"
_QUEUES = "tests/queues/test_examples.py"
_EXAMPLES = f"{_UNIT}/test_docs_examples.py"

#: The blocks a test of their own checks; every other block gets the generic check.
CLAIMS = (
    Claim("*", "python", "def handle(job_id: str, email: str", f"{_EXAMPLES}::test_usage_example"),
    Claim("*", "python", "@pytest.mark.redrive", f"{_EXAMPLES}::test_pytest_plugin_example"),
    Claim("*", "python", "redrive.integrations.", f"{_EXAMPLES}::test_agent_framework_example"),
    Claim("*", "text", "diverged from its journal", f"{_EXAMPLES}::test_divergence_text"),
    Claim("*", "text", "diff=redrive", f"{_EXAMPLES}::test_gitattributes_block"),
    Claim("*", "text", "Run (_run)", f"{_EXAMPLES}::test_design_drawing"),
    Claim("*", "text", "recorders/", f"{_EXAMPLES}::test_design_rooms_and_layout"),
    Claim("docs/tutorials/incident.md", "sh", "", f"{_EXAMPLES}::test_incident_walkthrough"),
    Claim("docs/tutorials/incident.md", "python", "", f"{_EXAMPLES}::test_incident_walkthrough"),
    Claim("docs/scaling.md", "sql", "", f"{_EXAMPLES}::test_scaling_sql"),
    *(
        Claim(
            "docs/how-to/deploys.md",
            "sh",
            needle,
            "tests/unit/test_recover.py::test_docs_operating_commands_run_as_written",
        )
        for needle in ("what-changed refund:A", "recover --stale 0 --dry-run")
    ),
    Claim(
        "docs/how-to/deploys.md",
        "sh",
        " decide ",
        "tests/unit/test_cli_operate.py::test_docs_operator_commands",
    ),
    Claim(
        "docs/how-to/look-at-a-run.md",
        "sh",
        "redrive ",
        "tests/unit/test_view.py::test_docs_view_commands",
    ),
    *(
        Claim("docs/queues.md", lang, "", f"{_QUEUES}::test_every_docs_block_is_checked_here")
        for lang in ("python", "sh")
    ),
    Claim(
        "docs/reference/format.md",
        "text",
        "",
        f"{_UNIT}/test_format_spec.py::test_the_pages_layouts_are_what_the_readers_read",
    ),
    Claim(
        "docs/explanation/replay-cost.md",
        "python",
        "",
        f"{_UNIT}/test_docs_performance.py::test_every_block_runs",
    ),
    *(
        Claim(page, "python", "", f"{_UNIT}/test_docs_operating.py::test_every_block_runs")
        for page in ("docs/usage-and-budgets.md", "docs/timeline.md")
    ),
    Claim("docs/secrets.md", "python", "", f"{_UNIT}/test_docs_secrets.py::test_every_block_runs"),
    Claim(
        "docs/http-clients.md", "python", "", f"{_UNIT}/test_endpoints.py::test_the_docs_page_runs"
    ),
)


def pages() -> list[Path]:
    """The README and every Markdown page under ``docs/``, sorted."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


_TITLE = re.compile(r'title="([^"]*)"')


def page_blocks(path: Path) -> list[Block]:
    """The code blocks of one page, in order."""
    text = path.read_text(encoding="utf-8")
    page = path.relative_to(ROOT).as_posix()
    found = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type not in ("fence", "code_block"):
            continue
        info = token.info.strip() if token.type == "fence" else ""
        lang = info.split()[0] if info else ("" if token.type == "fence" else "indented")
        title = _TITLE.search(info)
        line = (token.map[0] if token.map else 0) + 1
        found.append(
            Block(page, len(found), line, lang, title.group(1) if title else "", token.content)
        )
    return found


def blocks() -> Iterator[Block]:
    """Every code block of every page."""
    for path in pages():
        yield from page_blocks(path)


def claims_of(block: Block) -> list[Claim]:
    """The claims that cover ``block``."""
    return [claim for claim in CLAIMS if claim.matches(block)]


def claimed(test: str) -> list[Block]:
    """The blocks claimed by ``test`` (``path::function``), in page order."""
    return [b for b in blocks() if any(c.test == test for c in claims_of(b))]
