"""what-changed --no-replay compares the recorded system prompts with the current code
(issue 25, failure 6): a prompt edit is a change (exit 1), a prompt built at run time is not."""

from __future__ import annotations

import importlib
import itertools
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redrive import cli
from redrive._promptcheck import judge_prompts

APP = """
import redrive

JOURNAL = redrive.open_journal({url!r})
COMPANY = "ACME"
SYSTEM = "You are a support agent. Answer in one sentence, and politely."


@redrive.model
def ask(system: str, question: str) -> str:
    return "ok"


@redrive.durable(JOURNAL, run_id="support:{{question}}")
def support(question: str) -> str:
    first = ask(system=SYSTEM, question=question)
    billing = f"You are the billing assistant of {{COMPANY}}; never promise a refund."
    return first + ask(system=billing, question=question)
"""


DEDENTED = '''
import inspect
import textwrap

import redrive

JOURNAL = redrive.open_journal({url!r})
SYSTEM = textwrap.dedent("""
    You are a support agent for the shop.
    Answer in one sentence, and politely.
""").strip()


@redrive.model
def ask(system: str, question: str) -> str:
    return "ok"


@redrive.durable(JOURNAL, run_id="support:{{question}}")
def support(question: str) -> str:
    billing = inspect.cleandoc("""
        You are the billing assistant.
        Never promise a refund before the order is found.
    """)
    return ask(system=SYSTEM, question=question) + ask(system=billing, question=question)
'''


@pytest.fixture
def app(request: pytest.FixtureRequest, tmp_path: Path, journal_url: str) -> Iterator[Path]:
    """An application module on disk (``APP``, or the source given as the fixture's
    indirect parameter) that recorded run ``support:A-1``."""
    name = f"shop_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text(getattr(request, "param", APP).format(url=journal_url))
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
        module.support("A-1")
        module.JOURNAL.close()
        yield path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def _what_changed(url: str, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = ["--journal", url, "what-changed", "support:A-1", "--no-replay", "-I", str(path.parent)]
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(
    ("app", "edit", "seq"),
    [
        (APP, ("in one sentence", "in two sentences"), 1),
        # indented literals sent through textwrap.dedent / inspect.cleandoc: unchanged code
        # is no false prompt edit failing a CI; an edit of their words is a change
        (DEDENTED, ("before the order", "before the invoice"), 3),
    ],
    ids=["literal", "dedented"],
    indirect=["app"],
)
def test_a_system_prompt_edit_is_a_change(
    app: Path,
    edit: tuple[str, str],
    seq: int,
    journal_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Unchanged code: nothing changed (the f-string prompt's literal parts are in the code).
    After the system prompt is edited: a change naming the prompt and its seq, exit 1."""
    code, out = _what_changed(journal_url, app, capsys)
    assert code == cli.EXIT_OK, out
    assert "nothing changed" in out and "prompt:" not in out
    app.write_text(app.read_text().replace(*edit))
    code, out = _what_changed(journal_url, app, capsys)
    assert code == cli.EXIT_FAILED, out
    assert "changed prompt:" in out and f"first sent at seq {seq}" in out
    assert edit[1] in out
    argv = ["--json", "--journal", journal_url, "what-changed", "support:A-1", "--no-replay"]
    assert cli.main([*argv, "-I", str(app.parent)]) == cli.EXIT_FAILED
    document = json.loads(capsys.readouterr().out)
    (change,) = [c for c in document["changes"] if c["part"].startswith("prompt:")]
    assert change["counted"] is True and change["recorded"] in document["recorded"]["prompts"]


_WORDS = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "omega"]), min_size=3)


@given(words=_WORDS, value=st.text(min_size=1, max_size=6))
def test_prompts_built_from_unchanged_literals_are_the_same(words: list[str], value: str) -> None:
    """A prompt made of the code's literals and a value in between (an f-string) is unchanged;
    a constant prompt edited in the code is an edit; a prompt nothing in the code resembles
    is left to a replay (not compared), never called unchanged."""
    head = "You are an agent for " + " ".join(words) + " of "
    tail = "; answer briefly and never guess."
    sent = head + value + tail
    (same,) = judge_prompts([(1, "h", sent)], {head, tail})
    assert same.verdict == "same"
    constant = head + "the shop" + tail
    edited_code = constant.replace("You are an agent", "You are a careful agent")
    (edited,) = judge_prompts([(1, "h", constant)], {edited_code, "x"})
    assert (edited.verdict, edited.closest) == ("edited", edited_code)
    (unknown,) = judge_prompts([(1, "h", sent)], {"something else entirely", tail.upper()})
    assert unknown.verdict == "unchecked"


@given(
    words=_WORDS,
    indent=st.integers(0, 8),
    breaks=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_whitespace_layout_is_no_change(words: list[str], indent: int, breaks: list[bool]) -> None:
    """A prompt sent with its literal's whitespace laid out otherwise (dedented, stripped,
    lines joined) is the same; the same prompt with a word changed is an edit."""
    ends = itertools.cycle(["\n" if b else " " for b in breaks])
    literal = "\n" + "".join(" " * indent + w + next(ends) for w in [*words, "answer", "briefly"])
    sent = " ".join(literal.split())
    (same,) = judge_prompts([(1, "h", sent)], {literal, "x"})
    assert same.verdict == "same"
    (edited,) = judge_prompts([(1, "h", sent.replace("answer", "respond"))], {literal, "x"})
    assert (edited.verdict, edited.closest) == ("edited", literal)


def test_code_read_is_what_the_entrypoint_imports_not_what_the_process_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The code's prompts are the entrypoint's module and the package modules it imports
    (at the top or inside a function, absolute or relative), not every module of the package
    this process happens to have imported: another module holding the old prompt, imported by
    an earlier test or a tool, does not hide an edit (a `check --jobs` worker agrees with the
    process that started it)."""
    from redrive._promptcheck import code_strings

    top = f"pkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / top / "sub").mkdir(parents=True)
    (tmp_path / top / "__init__.py").write_text("")
    (tmp_path / top / "sub" / "__init__.py").write_text("")
    (tmp_path / top / "agent.py").write_text(
        "from . import tone\n"
        "def run():\n"
        f"    from {top}.sub.prompts import SYSTEM\n"
        "    return SYSTEM + tone.TONE\n"
    )
    (tmp_path / top / "tone.py").write_text('TONE = "Answer politely and in one sentence."\n')
    (tmp_path / top / "sub" / "prompts.py").write_text(
        'SYSTEM = "You are a refund assistant. Look the order up first."\n'
    )
    (tmp_path / top / "unrelated.py").write_text('OLD = "You are a refund assistant."\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module(f"{top}.agent")
        importlib.import_module(f"{top}.unrelated")  # in sys.modules, never imported by the agent
        strings = code_strings(f"{top}.agent:run")
        assert "You are a refund assistant. Look the order up first." in strings
        assert "Answer politely and in one sentence." in strings
        assert "You are a refund assistant." not in strings
        (verdict,) = judge_prompts([(1, "h", "You are a refund assistant. Be brief.")], strings)
        assert verdict.verdict == "edited"
    finally:
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
