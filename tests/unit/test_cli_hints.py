"""Every command the CLI suggests in its messages works when run as printed.

A hint such as "list runs with `redrive runs`" printed by a command given
``--journal other.duckdb`` would list another journal; a run id with a space or
a placeholder (``RUN``) would not run at all.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

import redrive
from redrive import cli

_HINT = re.compile(r"`(redrive [^`]+)`")


def _cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue() + err.getvalue()


@pytest.fixture
def journal_url(tmp_path: Path) -> str:
    """A DuckDB journal at a path with a space, holding a suspended and a blocked run."""
    url = str(tmp_path / "my runs.duckdb")
    journal = redrive.open_journal(url)

    @redrive.tool(restart_safe=False)
    def refund(order: str) -> str:
        raise KeyboardInterrupt  # the worker dies inside the body

    with redrive.run(journal, "wait for it") as run:
        run.finish(redrive.await_approval("pay out", {"amount": 3}))
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "job 7"):
        refund("o-1")
    journal.close()
    return url


def test_every_printed_hint_runs(journal_url: str, tmp_path: Path) -> None:
    """Each `redrive ...` hint in the messages of failing commands exits 0 when run as printed."""
    j = ("--journal", journal_url)
    failing = [
        (*j, "show", "no such run"),
        (*j, "verify", "no such run"),
        (*j, "export", "no such run", "-o", str(tmp_path / "x.rdj")),
        (*j, "cancel", "no such run", "--reason", "r"),
        (*j, "decide", "no such run", "x", "--approve"),
        (*j, "decide", "wait for it", "no such approval", "--approve"),
        (*j, "resolve", "no such run", "1", "--not-done", "--reason", "r"),
        (*j, "resolve", "job 7", "0", "--not-done", "--reason", "r"),
        (*j, "resolve", "job 7", "99", "--not-done", "--reason", "r"),
        (*j, "diff", "no such run", "job 7"),
    ]
    hints: set[str] = set()
    for argv in failing:
        for as_json in ((), ("--json",)):
            code, text = _cli(*as_json, *argv)
            assert code != 0, argv
            found = _HINT.findall(text.replace("\\`", "`"))
            assert found, (argv, text)  # each of these failures suggests what to do
            hints.update(found)
    assert len(hints) >= 3
    for hint in sorted(hints):
        words = shlex.split(hint)
        assert words[0] == "redrive"
        code, text = _cli(*words[1:])
        assert code == 0, (hint, text)
