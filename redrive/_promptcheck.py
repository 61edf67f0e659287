"""A run's system prompts against the current code, without replaying it.

What ``redrive what-changed --no-replay`` (:func:`redrive.what_changed` with
``replay=False``) compares: the fingerprint holds the hashes of the system
prompts the run's model steps sent (:func:`redrive.replay.recorded_prompts`);
the current code's prompts are the string literals of the entrypoint's
module and of every module of its top-level package that it imports,
directly or through others (the import statements of the source on disk,
those inside functions included), each compiled again from the file on disk
so an edit since the import counts. What else the process happens to have
imported does not count: a worker process and the process that started it
give the same answer. Each recorded prompt is then:

- ``same``: a literal of the code equals it, or literals of the code cover at
  least half of it (a prompt built at run time from literals and values,
  such as an f-string, whose literal parts are unchanged);
- ``edited``: neither, and a literal of the code is close to it
  (:class:`difflib.SequenceMatcher` ratio at least :data:`CLOSE`): the prompt
  in the code was changed;
- ``unchecked``: neither, and nothing in the code resembles it (built at run
  time, or read from a file): only a replay compares it.

Whitespace is not compared: each run of it counts as one space on both
sides, so a prompt written as an indented triple-quoted literal and sent
through :func:`textwrap.dedent`, :func:`inspect.cleandoc` or ``str.strip``
is the literal it came from (and an edit of its words is an edit).

A heuristic by nature (the code is not run): a replay (the default) compares
every request exactly, whitespace included.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import sys
from collections.abc import Iterable
from types import CodeType
from typing import Any, Final, Literal

import attrs

from .frames import Frame, fingerprint
from .replay import recorded_prompts, short

__all__ = ["CLOSE", "PromptVerdict", "code_strings", "judge_prompts", "prompt_changes"]

#: The least similarity (0 to 1) at which a literal of the code is the recorded prompt, edited.
CLOSE: Final = 0.6
#: Literals shorter than this are not evidence that a prompt was built from them.
_MIN_PART: Final = 8


@attrs.frozen(kw_only=True)
class PromptVerdict:
    """What became of one recorded system prompt in the current code.

    Attributes:
        seq: the first model step that sent it.
        hash: its fingerprint hash (16 hex).
        text: the prompt's text.
        verdict: ``"same"``, ``"edited"`` or ``"unchecked"`` (see the module docstring).
        closest: for ``edited``, the literal of the code closest to it; else None.
    """

    seq: int
    hash: str
    text: str
    verdict: Literal["same", "edited", "unchecked"]
    closest: str | None = None


def _literals(code: CodeType) -> Iterable[str]:
    stack = [code]
    while stack:
        current = stack.pop()
        for const in current.co_consts:
            if isinstance(const, str):
                yield const
            elif isinstance(const, CodeType):
                stack.append(const)
            elif isinstance(const, tuple | frozenset):
                yield from (c for c in const if isinstance(c, str))


def _source(name: str) -> str | None:
    """The path of module ``name``'s ``.py`` source file, or None (none, or not found)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None) if module is not None else None
    if path is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            return None
        path = spec.origin if spec is not None else None
    return path if isinstance(path, str) and path.endswith(".py") else None


def _imported(tree: ast.AST, name: str, is_package: bool) -> Iterable[str]:
    """The module names the import statements of module ``name`` (parsed as ``tree``) name."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                keep = len(parts) - (node.level - 1)
                if keep <= 0:
                    continue
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            elif node.module:
                base = node.module
            else:
                continue
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def code_strings(entrypoint: str) -> set[str]:
    """The string literals of ``entrypoint``'s module and the modules of its package it imports.

    Args:
        entrypoint: ``"package.module:function"``.

    Returns:
        Every literal (docstrings included) of the entrypoint's module and of
        each module of the same top-level package reached from it through
        import statements (anywhere in a module's source, inside functions
        too), read from the source files as they are on disk now; a module
        without a readable ``.py`` source, or that does not parse, is skipped.
        The answer depends on the code on disk only, not on what else this
        process has imported.
    """
    first = entrypoint.partition(":")[0]
    top = first.split(".")[0]
    found: set[str] = set()
    seen: set[str] = set()
    todo = [first]
    while todo:
        name = todo.pop()
        if name in seen or (name != top and not name.startswith(top + ".")):
            continue
        seen.add(name)
        path = _source(name)
        if path is None:
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            tree = ast.parse(text, path)
            code = compile(tree, path, "exec", dont_inherit=True)
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            continue
        found.update(_literals(code))
        todo.extend(_imported(tree, name, path.endswith("__init__.py")))
    return found


def _text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "".join(p for p in prompt if isinstance(p, str))
    return str(prompt)


def _squash(text: str) -> str:
    """``text`` with each run of whitespace one space, and none at either end."""
    return " ".join(text.split())


def _covered(text: str, strings: Iterable[str]) -> int:
    """How many characters of ``text`` lie inside an occurrence of one of ``strings``."""
    marks = bytearray(len(text))
    for part in strings:
        if len(part) < _MIN_PART or len(part) > len(text):
            continue
        at = text.find(part)
        while at != -1:
            marks[at : at + len(part)] = b"\x01" * len(part)
            at = text.find(part, at + 1)
    return sum(marks)


def _closest(text: str, strings: Iterable[str]) -> str | None:
    best, score = None, CLOSE
    for candidate in strings:
        if not len(text) / 3 <= len(candidate) <= len(text) * 3:
            continue
        matcher = difflib.SequenceMatcher(None, text, candidate, autojunk=False)
        if matcher.real_quick_ratio() < score or matcher.quick_ratio() < score:
            continue
        ratio = matcher.ratio()
        if ratio >= score:
            best, score = candidate, ratio
    return best


def judge_prompts(
    recorded: Iterable[tuple[int, str, Any]], strings: set[str]
) -> list[PromptVerdict]:
    """Judge each recorded prompt against the code's literals (see the module docstring).

    Args:
        recorded: ``(seq, hash, prompt)`` as :func:`redrive.replay.recorded_prompts` gives them.
        strings: the current code's literals (:func:`code_strings`).

    Returns:
        One :class:`PromptVerdict` per recorded prompt, in the order given.
    """
    squashed: dict[str, str] = {}  # a literal, whitespace squashed -> the literal
    for literal in sorted(strings):
        squashed.setdefault(_squash(literal), literal)
    out = []
    for seq, digest, prompt in recorded:
        text = _text(prompt)
        flat = _squash(text)
        if not flat or flat in squashed or 2 * _covered(flat, squashed) >= len(flat):
            out.append(PromptVerdict(seq=seq, hash=digest, text=text, verdict="same"))
            continue
        near = _closest(flat, squashed)
        closest = None if near is None else squashed[near]
        verdict: Literal["edited", "unchecked"] = "edited" if closest is not None else "unchecked"
        out.append(PromptVerdict(seq=seq, hash=digest, text=text, verdict=verdict, closest=closest))
    return out


def prompt_changes(frames: Iterable[Frame], run_id: str, entrypoint: str) -> list[dict[str, Any]]:
    """The fields of each ``what_changed`` change the run's system prompts make.

    Args:
        frames: the run's frames.
        run_id: the run.
        entrypoint: its entrypoint, imported already.

    Returns:
        ``{"part", "recorded", "current", "detail", "counted"}`` per edited
        prompt (counted) and per prompt only a replay can compare (not counted).

    Raises:
        JournalCorruptError: as :func:`redrive.replay.recorded_prompts`.
    """
    out: list[dict[str, Any]] = []
    for v in judge_prompts(recorded_prompts(run_id, frames), code_strings(entrypoint)):
        sent = f"the system prompt first sent at seq {v.seq} ({short(v.text)})"
        if v.verdict == "edited" and v.closest is not None:
            detail = (
                f"{sent} is not in the current code, which has {short(v.closest)}: a prompt "
                f"edit (model steps from seq {v.seq} on would drift; run without --no-replay "
                "to see the first one)"
            )
            current: str | None = fingerprint(v.closest)[:16]
        elif v.verdict == "unchecked":
            detail = (
                f"{sent} is built at run time or read from elsewhere: only a replay compares "
                "it (run without --no-replay)"
            )
            current = None
        else:
            continue
        out.append(
            {
                "part": f"prompt:{v.hash}",
                "recorded": v.hash,
                "current": current,
                "detail": detail,
                "counted": v.verdict == "edited",
            }
        )
    return out
