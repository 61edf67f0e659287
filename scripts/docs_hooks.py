"""MkDocs hooks: the reference pages generated from the code (the parser, the errors).

A page asks for a generated part with a marker line of its own:
``<!-- generated: cli -->`` becomes the command line reference, built from
the ``redrive`` argparse parser (each command's ``--help``), and
``<!-- generated: errors -->`` the error catalogue, built from the classes of
:mod:`redrive.errors` and the other public exceptions (each one's docstring:
what happened, its fields, what to do next). Nothing here is written by hand,
so the pages cannot disagree with the code. ``mkdocs.yml`` names this file
under ``hooks:``; it imports redrive from the checkout (``scripts/docs``
builds with ``PYTHONPATH`` set to it).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.M)

#: public modules whose ``__all__`` may export exceptions besides redrive.errors
PUBLIC_MODULES = (
    "redrive",
    "redrive.replay",
    "redrive.storage",
    "redrive.recorders",
    "redrive.recorders.cassettes",
    "redrive.queues",
    "redrive.testing",
    "redrive.pytest_plugin",
)

_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc):`~?([^`]+)`")


def _markdown(text: str) -> str:
    """Docstring markup (Sphinx roles, double backticks) as Markdown."""
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


def _parser() -> argparse.ArgumentParser:
    from redrive.cli._main import _parser as build

    return build()


def cli_reference() -> str:
    """The command line reference: ``redrive --help``, then each command's ``--help``."""
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: fix it
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = ["### redrive", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, command in sub.choices.items():
        out += [f"### {name}", "", "```text", command.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def public_exceptions() -> dict[type[BaseException], str]:
    """Every public exception class, mapped to the module users import it from."""
    found: dict[type[BaseException], str] = {}
    errors = importlib.import_module("redrive.errors")
    for name, value in vars(errors).items():
        if _is_error(value) and not name.startswith("_"):
            found.setdefault(value, "redrive.errors")
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if _is_error(value):
                found.setdefault(value, module_name)
    return found


def _is_error(value: Any) -> bool:
    return inspect.isclass(value) and issubclass(value, BaseException)


def errors_reference() -> str:
    """The error catalogue: the tree, then each class with its meaning, fields, next step."""
    errors = importlib.import_module("redrive.errors")
    out = ["```text", _tree(errors.__doc__ or ""), "```", ""]
    classes = public_exceptions()
    core = [c for c, m in classes.items() if m == "redrive.errors"]
    other = [c for c, m in classes.items() if m != "redrive.errors"]
    for cls in core:
        out += _error_section(cls, "redrive")
    out += [
        "## Raised elsewhere",
        "",
        "Public exceptions of other modules, imported from there:",
        "",
    ]
    for cls in other:
        out += _error_section(cls, classes[cls], level="###")
    return "\n".join(out)


def _tree(doc: str) -> str:
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("ReplayError"))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return "\n".join(line[4:] for line in lines[start:end])


def _error_section(cls: type[BaseException], module: str, level: str = "##") -> list[str]:
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    doc, todo = what_to_do(inspect.cleandoc(cls.__doc__ or ""))
    summary, _, rest = doc.partition("\n")
    out = [f"{level} {cls.__name__}", "", f"`{module}.{cls.__name__}`: subclass of `"]
    out[-1] += "`, `".join(bases) + "`."
    out += ["", _markdown(summary.strip()), ""]
    for title, body in _sections(rest):
        if title:
            out += [f"**{_TITLES.get(title, title)}:**", ""]
            out += [f"- `{name}`: {_markdown(text)}" for name, text in _items(body)]
            out.append("")
        elif body.strip():
            out += [_markdown(_paragraphs(body)), ""]
    if todo:
        out += ["**What to do:** " + _markdown(todo), ""]
    return out


_TITLES = {"Attributes": "Fields", "Args": "Arguments"}
_TODO = re.compile(r"^What to do: (.*?)(?:\n\n|\Z)", re.S | re.M)


def what_to_do(doc: str) -> tuple[str, str]:
    """Split a docstring into its text and its ``What to do:`` paragraph (``""``: none)."""
    match = _TODO.search(doc)
    if match is None:
        return doc, ""
    rest = (doc[: match.start()] + doc[match.end() :]).rstrip()
    return rest, " ".join(match.group(1).split())


def _sections(text: str) -> list[tuple[str, str]]:
    """The docstring body cut at Google-style section headers (``Attributes:``...)."""
    parts: list[tuple[str, str]] = [("", "")]
    for line in text.splitlines():
        header = re.fullmatch(r"([A-Z][A-Za-z ]+):", line.strip())
        if header and not line.startswith(" "):
            parts.append((header.group(1), ""))
        else:
            title, body = parts[-1]
            parts[-1] = (title, body + line + "\n")
    return parts


def _items(body: str) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    for line in inspect.cleandoc(body).splitlines():
        match = re.match(r"(\*{0,2}\w+)(?: \([^)]*\))?: (.*)", line)
        if match and not line.startswith(" "):
            items.append((match.group(1), match.group(2)))
        elif items:
            items[-1] = (items[-1][0], items[-1][1] + " " + line.strip())
    return items


def _paragraphs(body: str) -> str:
    """Join a docstring's wrapped lines into Markdown paragraphs; keep ``::`` blocks."""
    text = inspect.cleandoc(body)
    text = text.replace("::\n", ":\n")
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n") if p.strip())


GENERATED = {"cli": cli_reference, "errors": errors_reference}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: replace each ``<!-- generated: NAME -->`` line by its part."""

    def part(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATED:
            raise KeyError(f"{page.file.src_path}: no generated part named {name!r}")
        return GENERATED[name]()

    return MARKER.sub(part, markdown)
