"""Everything the CLI prints is data: no rich markup, no control characters, one row per record.

Issue 12 #12: ``redrive runs`` crashed with ``rich.errors.MarkupError`` on a run id
holding ``[/]``; ``redrive show`` on a tool argument holding ``[/INST]``; a
newline in a run id made a fake row in the tab-separated output.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive._runid import check_run_id
from redrive.cli._output import escaped
from tests.conftest import examples

#: An ANSI escape sequence as rich writes them (SGR colours, OSC hyperlinks).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\]8;[^\x1b]*\x1b\\")
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class _Terminal(io.StringIO):
    """A captured stdout that says it is a terminal (rich output)."""

    def isatty(self) -> bool:
        return True


def _cli(*argv: str, tty: bool = False) -> tuple[int, str]:
    stdout: io.StringIO = _Terminal() if tty else io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(list(argv))
    return code, stdout.getvalue()


def _record(url: str, run_id: str, text: str) -> None:
    """One run ``run_id`` whose tool argument, tool error, note and output are ``text``."""
    journal = redrive.open_journal(url)

    @redrive.tool(read_only=True)
    def echo(value: str) -> str:
        return value

    @redrive.tool(read_only=True)
    def fail(value: str) -> str:
        raise LookupError(value)

    try:
        with redrive.run(journal, run_id) as run:
            echo(text)
            with contextlib.suppress(LookupError):
                fail(text)
            run.finish(text)
    finally:
        journal.close()


_texts = st.text(st.characters(codec=None, exclude_characters="\x00"), max_size=30)


def _valid(run_id: str) -> bool:
    try:
        check_run_id(run_id)
    except ValueError:
        return False
    return True


# 13 CLI calls on a journal file an example: fewer examples than the profile's, the
# escaping itself is the cheap property below at the profile's full count
@settings(max_examples=examples(default=10, ci=25, thorough=300))
@given(run_id=_texts.map(lambda t: "r" + t).filter(_valid), text=_texts.filter(_valid))
@example(run_id="[/]", text="[/INST] hello [bold]")
@example(run_id="fake\nrow\tx", text="\x1b[31mred\r\u202etxt")
@example(run_id="a\\nb", text="\\")
# Textualize/rich#1157: a network device's progress "[\\] [|] [/] [-]" crashed rich's print
@example(run_id="copy [\\] [|] [/] [-]", text="Copying configuration: [/] \n[\\]")
# rehosting/penguin#576: a closing tag that is a path ('[/sys/devices/...]') in printed args
@example(run_id="dump", text="read [/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor]")
def test_listing_commands_print_values_as_data(run_id: str, text: str) -> None:
    """runs, show, verify, sql and diff print any run id, argument and error as data: piped,
    each row is one line of as many tab-separated fields as columns and unescapes to the
    value; on a terminal nothing crashes and no control character of the data reaches it;
    --json gives the values back exactly."""
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "runs.duckdb")
        _record(url, run_id, text)
        base = ("--journal", url)

        code, out = _cli(*base, "runs")
        assert code == 0
        lines = out.split("\n")[:-1]
        assert len(lines) == 2  # the header and the run's one row
        header, row = (line.split("\t") for line in lines)
        assert len(row) == len(header) and row[0] == escaped(run_id)

        code, out = _cli(*base, "sql", "select run_id, name, data from frames order by seq")
        assert code == 0
        rows = [line.split("\t") for line in out.split("\n")[1:-1]]
        assert all(len(r) == 3 for r in rows)
        assert {r[0] for r in rows} == {escaped(run_id)}

        for command in (
            ("runs",),
            ("show", run_id),
            ("verify", run_id),
            ("diff", run_id, run_id),
            ("sql", "select run_id, data from frames"),
        ):
            for tty in (False, True):
                code, out = _cli(*base, *command, tty=tty)
                assert code == 0, (command, out)
                seen = _ANSI.sub("", out) if tty else out.replace("\t", " ")  # TSV: tabs are ours
                assert not _CONTROL.search(seen), (command, tty, out)

        code, out = _cli(*base, "--json", "show", run_id)
        data: dict[str, Any] = json.loads(out)
        assert data["run"]["run_id"] == run_id
        assert [s["args"] for s in data["steps"]] == [{"value": text}, {"value": text}]
        assert data["info"]["end"]["output"] == text
        code, out = _cli(*base, "--json", "runs")
        assert [r["run_id"] for r in json.loads(out)["runs"]] == [run_id]


def test_escaping_is_reversible_and_leaves_no_break() -> None:
    """escaped() turns backslash, tab, newline and other controls into backslash escapes."""
    assert escaped("a\tb\nc\\d\x1be\u202e") == "a\\tb\\nc\\\\d\\x1be\\u202e"
    assert escaped("plain [/] text") == "plain [/] text"


_ESCAPE = re.compile(r"\\(\\|t|n|r|x[0-9a-f]{2}|u[0-9a-f]{4})")


def _unescaped(text: str) -> str:
    """The inverse of :func:`escaped` (the linear TSV convention it documents)."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        simple = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
        return simple[code] if code in simple else chr(int(code[1:], 16))

    return _ESCAPE.sub(one, text)


@given(text=st.text(st.characters(codec=None)))
def test_any_text_escapes_to_one_printable_cell_and_back(text: str) -> None:
    """Property: escaped(text) holds no tab, line break or control character, and unescapes
    back to text (what every listing command prints each value through)."""
    cell = escaped(text)
    assert not _CONTROL.search(cell) and "\n" not in cell, cell
    assert _unescaped(cell) == text
