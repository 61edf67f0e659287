"""What the README promises: the two set-up commands, a short text, links into the site.

Its code blocks run with every other page's (``tests/unit/test_docs_blocks.py``
and the claims of ``tests/docblocks.py``); this file checks what is special to
the README: ``scripts/test`` is what CI runs, ``scripts/demo``'s job passes its
own account, the README stays short, and every link stays inside the
repository and lands on a page of the site.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.docblocks import ROOT, page_blocks

README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_setup_commands_are_what_ci_runs_and_the_demo_passes(tmp_path: Path) -> None:
    """``scripts/test`` is what .ci/run runs; ``scripts/demo``'s job passes its own account."""
    shell = [b.code.strip() for b in page_blocks(README) if b.lang == "sh"]
    assert shell == ["scripts/demo", "scripts/test"]
    assert re.search(r"^scripts/test\b", (ROOT / ".ci/run").read_text(), re.M)
    demo = (ROOT / "scripts/demo").read_text()
    assert "-m redrive.demo" in demo
    # the demo the script runs, as it runs it (a temp dir), without re-installing
    result = subprocess.run(
        [sys.executable, "-m", "redrive.demo"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "All checks held." in result.stdout
    # its advice names commands on the temp journal, gone now: it says so and how to keep it
    assert "redrive --journal" in result.stdout
    assert not list(tmp_path.glob("redrive-demo-*"))
    said = " ".join(result.stdout.split())  # as wrapped to the terminal's width
    assert "run `redrive demo --keep` (or `--dir DIR`) to try them" in said


def test_the_readme_is_short_and_says_what_it_must() -> None:
    """About 200 lines: what redrive is for, set-up, one example, its guarantees, the site."""
    text = README.read_text()
    assert len(text.splitlines()) <= 220
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == [
        "Set-up (fresh machine, Python 3.11+)",
        "Example",
        "What it guarantees",
        "Documentation",
    ]
    assert [b.lang for b in page_blocks(README)].count("python") == 1


def test_every_link_stays_in_the_repository_and_lands_on_a_site_page() -> None:
    """No link leaves the checkout (no URL, no ``../``); each names a page the site builds."""
    import yaml

    nav = json.dumps(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    prose = re.sub(r"^```.*?^```$", "", README.read_text(), flags=re.S | re.M)
    links = LINK.findall(prose)
    assert len(links) >= 20
    for link in links:
        target = link.split("#")[0]
        assert "://" not in link and not target.startswith(("..", "/")), link
        assert (ROOT / target).is_file(), f"the README links to a missing file {link}"
        assert target.startswith("docs/") and f'"{target.removeprefix("docs/")}"' in nav, link
    assert "shared/" not in README.read_text()
