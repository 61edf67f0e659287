"""Every command says what it does (issue 25, item 8): a description per subcommand, a help
text per option and argument, and `export` shows which of its outputs is required."""

from __future__ import annotations

import argparse

import pytest

from redrive import cli
from redrive.cli._main import _parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_and_option_is_described() -> None:
    """Walk the parser: no subcommand without a description, no option without help."""
    missing = []
    for name, parser in sorted(_commands().items()):
        if not (parser.description or "").strip():
            missing.append(f"{name}: no description")
        for action in parser._actions:
            if action.help is None:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}: no help")
    assert missing == []


def test_export_shows_its_required_output(capsys: pytest.CaptureFixture[str]) -> None:
    """`export --help` shows -o / --otlp-json as required (one of them); without either the
    command says so (exit 2), as its usage line promised."""
    assert cli.main(["export", "--help"]) == cli.EXIT_OK
    text = capsys.readouterr().out
    assert "usage: redrive export RUN (-o FILE.rdj | --otlp-json FILE.json)" in text
    assert "required unless --otlp-json" in " ".join(text.split())
    assert cli.main(["--journal", ":memory:", "export", "r"]) == cli.EXIT_USAGE
    assert "-o FILE.rdj, --otlp-json FILE.json" in capsys.readouterr().err
