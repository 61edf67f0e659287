"""Every code block of the README and of every page under docs/ is checked, by its language.

Pages are found, not listed, so a page someone adds is checked too. A block
claimed in ``tests/docblocks.py`` is checked by the test that claims it; every
other block gets the generic check of its language, run in a scratch
directory shared by the page's blocks, in order (docs/contributing.md has
the table): ``python`` runs (or, with ``title="file.py"``, becomes that file),
``sh``/``console`` lines run or are checked as commands, a ``text`` block
right after one of them is what it prints, ``toml``/``yaml``/``json`` parse.
A block no check covers fails.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.docblocks import CLAIMS, ROOT, Block, blocks, claims_of, page_blocks, pages
from tests.sdkserver import Received, Reply, chat_completion, serve

#: commands a sh block may run in the page's scratch directory
RUNNABLE = {"python", "redrive", "cat", "ls", "mkdir", "cp", "sed", "echo"}
PARSERS = {"toml": tomllib.loads, "json": json.loads}
GENERIC = {"python", "sh", "console", "text", "toml", "yaml", "json"}


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


def _pages_with_unclaimed_blocks() -> list[str]:
    """The pages the generic check runs on (a page whose blocks are all claimed has none)."""
    return [
        p.relative_to(ROOT).as_posix()
        for p in pages()
        if any(not claims_of(b) for b in page_blocks(p))
    ]


def test_blocks_are_found_on_every_page_that_has_them() -> None:
    """The README and the docs pages are read (a moved page or a changed fence would skip
    every block silently)."""
    found = list(blocks())
    assert sum(b.page == "README.md" for b in found) >= 4
    assert {"docs/tutorials/crash-resume.md", "docs/tutorials/ci-checks.md"} <= {
        b.page for b in found
    }
    assert len(found) >= 40


def test_every_block_has_a_check() -> None:
    """Each block is claimed by one test, or has a language the generic check runs; a ``text``
    block not claimed follows a block whose output it is."""
    unchecked = [problem for path in pages() for problem in _unchecked(page_blocks(path))]
    assert not unchecked, "\n".join(unchecked)


def test_a_block_without_a_check_is_reported() -> None:
    """An indented block, a block with no language, a lone text block: each is reported."""
    page = [
        Block("docs/x.md", 0, 1, "indented", "", "redrive runs\n"),
        Block("docs/x.md", 1, 5, "", "", "print(1)\n"),
        Block("docs/x.md", 2, 9, "text", "", "some output\n"),
        Block("docs/x.md", 3, 13, "python", "", "print(1)\n"),
        Block("docs/x.md", 4, 17, "text", "", "1\n"),
    ]
    assert [p.split(":")[1] for p in _unchecked(page)] == ["1", "5", "9"]


def _unchecked(page: list[Block]) -> list[str]:
    """What is wrong with the checks of one page's blocks (one line per block left unchecked)."""
    unchecked = []
    previous: Block | None = None
    for block in page:
        claims = claims_of(block)
        if len({c.test for c in claims}) > 1:
            unchecked.append(f"{block.where}: claimed by several tests {claims}")
        elif not claims and block.lang not in GENERIC:
            unchecked.append(
                f"{block.where}: a block in {block.lang or 'no language'} has no check "
                "(give it a language from docs/contributing.md, or claim it in "
                "tests/docblocks.py with the test that checks it)"
            )
        elif not claims and block.lang == "text" and not _runs(previous):
            unchecked.append(
                f"{block.where}: a text block is output: put it right after the python or "
                "sh block that prints it, or claim it with the test that produces it"
            )
        previous = block
    return unchecked


def _runs(block: Block | None) -> bool:
    return (
        block is not None
        and not claims_of(block)
        and block.lang in ("python", "sh", "console")
        and not block.title
    )


def test_every_claim_names_a_test_that_reads_its_page() -> None:
    """A claim covers at least one block, and names a test function that exists in a file
    that reads the claimed page (or finds its blocks through tests/docblocks.py)."""
    found = list(blocks())
    for claim in CLAIMS:
        assert any(claim.matches(b) for b in found), f"{claim} claims no block"
        file, _, function = claim.test.partition("::")
        source = (ROOT / file).read_text()
        names = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
        assert function in names, f"{claim.test} does not exist"
        page = Path(claim.page).name
        assert "docblocks" in source or page in source, f"{file} does not read {claim.page}"


def _respond(received: Received) -> Reply:
    """The scripted model of generic blocks: a short answer on any model endpoint."""
    if received.path.endswith("/messages"):
        return Reply(
            body={
                "id": "msg_docs",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "hello"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 3, "output_tokens": 1},
            }
        )
    return Reply(body=chat_completion("hello"))


def _shims(bin_dir: Path) -> None:
    bin_dir.mkdir()
    for name, command in {
        "python": f'exec "{sys.executable}" "$@"',
        "redrive": f'exec "{sys.executable}" -m redrive.cli "$@"',
    }.items():
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\n{command}\n")
        shim.chmod(0o755)


def _logical_lines(code: str) -> list[str]:
    """The commands of a sh block: continuation lines joined, blank lines and comments dropped."""
    joined = code.replace("\\\n", " ")
    lines = [line.strip() for line in joined.splitlines()]
    return [line.removeprefix("$ ") for line in lines if line and not line.startswith("#")]


def _check_command(line: str, extras: set[str]) -> bool:
    """Check a command that does not run here; return whether it is to be run instead."""
    words = shlex.split(line, comments=True)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]  # VAR=value prefixes
    assert words, line
    command = words[0]
    if command in RUNNABLE:
        return True
    if command.startswith("scripts/"):
        script = ROOT / command
        assert script.is_file() and os.access(script, os.X_OK), f"{command} is not a script"
        return False
    if words[:2] == ["pip", "install"]:
        for word in words[2:]:
            for extra in re.findall(r"\[([^\]]*)\]", word):
                unknown = set(extra.split(",")) - extras
                assert not unknown, f"{line}: no extra named {sorted(unknown)} in pyproject.toml"
        return False
    if words[:2] == ["git", "config"]:
        return False
    raise AssertionError(f"{line!r}: no generic check runs {command!r} (claim the block)")


@pytest.mark.parametrize("page", _pages_with_unclaimed_blocks())
def test_page_blocks_run(page: str, tmp_path: Path) -> None:
    """The page's unclaimed blocks run in order in one scratch directory: python blocks exit 0,
    sh commands exit as annotated (``# exit N``), a text block after either is its output."""
    _run_page([b for b in page_blocks(ROOT / page) if not claims_of(b)], tmp_path)


@pytest.mark.parametrize(
    ("lang", "code", "output"),
    [
        ("python", "print('hello')\n", "goodbye\n"),  # another output than shown
        ("python", "raise SystemExit(3)\n", None),  # a script that fails
        ("sh", "redrive runs --no-such-flag\n", None),  # a flag the parser does not have
        ("sh", "ls  # exit 1\n", None),  # an exit code other than annotated
        ("sh", "scripts/no-such-script\n", None),  # a script that does not exist
        ("sh", "pip install 'redrive[no-such-extra]'\n", None),  # an extra that does not exist
        ("sh", "curl https://example.com\n", None),  # a command no generic check runs
    ],
)
def test_a_drifted_block_fails(lang: str, code: str, output: str | None, tmp_path: Path) -> None:
    """The generic check fails on a block that no longer does what the page says."""
    page = [Block("docs/x.md", 0, 1, lang, "", code)]
    if output is not None:
        page.append(Block("docs/x.md", 1, 5, "text", "", output))
    with pytest.raises(AssertionError):
        _run_page(page, tmp_path)


def _run_page(page: list[Block], tmp_path: Path) -> None:
    """Run one page's unclaimed blocks in order in ``tmp_path`` (AssertionError on drift)."""
    extras = _extras()
    _shims(tmp_path / ".bin")
    with serve() as server:
        server.respond = _respond
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("REDRIVE_")},
            "PATH": f"{tmp_path / '.bin'}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
            "OPENAI_BASE_URL": server.url + "/v1",
            "OPENAI_API_KEY": "sk-docs",
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-docs",
        }
        printed: str | None = None
        for block in page:
            where = block.where
            if block.lang == "text":
                assert printed is not None, f"{where}: nothing printed before this text block"
                assert _lines(printed) == _lines(block.code), (
                    f"{where}: the block above printed\n{printed}"
                )
                printed = None
            elif block.lang == "python" and block.title:
                target = tmp_path / block.title
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.code)
                printed = None
            elif block.lang == "python":
                done = subprocess.run(
                    [sys.executable, "-c", block.code],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert done.returncode == 0, f"{where}:\n{done.stdout}\n{done.stderr[-3000:]}"
                printed = done.stdout
            elif block.lang in ("sh", "console"):
                printed = ""
                for line in _logical_lines(block.code):
                    if not _check_command(line, extras):
                        continue
                    expected = re.search(r"#\s*exit (\d+)", line)
                    done = subprocess.run(
                        ["bash", "-c", line],
                        cwd=tmp_path,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=300,
                    )
                    want = int(expected.group(1)) if expected else 0
                    code = done.returncode if done.returncode >= 0 else 128 - done.returncode
                    assert code == want, (
                        f"{where}: {line}\nexit {code}\n{done.stdout}\n{done.stderr}"
                    )
                    printed += done.stdout
            elif block.lang == "yaml":
                import yaml

                yaml.safe_load(block.code)
                printed = None
            elif block.lang in PARSERS:
                PARSERS[block.lang](block.code)
                printed = None
            else:
                raise AssertionError(f"{where}: no check for a {block.lang or 'bare'} block")


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]
