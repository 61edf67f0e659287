"""A tool that gains a parameter at its default keeps its recorded calls (issue 23, items 4, 5).

CONTRACT C1: a parameter added since the record that carries its declared
default (absent from the recorded arguments, its value now the tool's default)
does not change a call's identity; a changed default, a removed or renamed
parameter and a non-default value do. CONTRACT C10: ``what-changed``,
``check`` and the resume agree, and a refused step stops the resume before
any body runs.

Each scenario deploys a small application (a ``@redrive.durable`` entrypoint
calling a side-effecting ``send_invoice`` tool), records a finished run and an
interrupted one, deploys a changed tool, and asks all of them: the resume
(``redrive recover``'s path), ``check_run``, ``check --update`` and
``what_changed``. ``framework`` calls bind every parameter with its default,
as pydantic-ai and the OpenAI Agents SDK do (item 5); ``plain`` calls pass what
the caller wrote (item 4).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import tempfile
import types
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import ReplayPolicy
from redrive._update import update_run
from redrive.errors import DivergenceError
from redrive.storage import MemoryJournal
from redrive.storage.rdj import export_run

SOURCE = '''
import inspect
import redrive


@redrive.tool(restart_safe=False)
{define} send_invoice({params}) -> str:
    """{doc}"""
    SENT.append(order)
    return f"sent {{order}}"


def framework_call(tool, given):
    """What pydantic-ai and the Agents SDK do: every parameter of the schema, defaults bound."""
    bound = inspect.signature(tool).bind(**given)
    bound.apply_defaults()
    return tool(**bound.arguments)


@redrive.durable("unused.duckdb", run_id="invoice:{{order}}")
{define} handle(order: str) -> str:
    sent = {wait}{call}
    if CRASH:
        raise ConnectionError("the worker lost its database after the invoice")
    return sent
'''


class App:
    """An application module (defined in memory), redeployed with another tool."""

    def __init__(self, define: str) -> None:
        self.define = define
        self.name = f"invoices_{uuid.uuid4().hex[:8]}"
        self.sent: list[str] = []
        self.module: Any = None

    def deploy(
        self,
        params: str,
        given: str,
        *,
        style: str = "plain",
        doc: str = "Send an invoice.",
        crash: bool = False,
    ) -> None:
        """(Re)define the module: ``send_invoice(params)`` called with ``given`` (dict literal)."""
        call = (
            f"framework_call(send_invoice, {given})"
            if style == "framework"
            else f"send_invoice(**{given})"
        )
        source = SOURCE.format(
            define=self.define,
            params=params,
            doc=doc,
            wait="await " if self.define == "async def" else "",
            call=call,
        )
        module = types.ModuleType(self.name)
        module.__dict__.update(SENT=self.sent, CRASH=crash)
        sys.modules[self.name] = module
        exec(compile(source, f"<{self.name}>", "exec"), module.__dict__)
        self.module = module

    def record(self, journal: MemoryJournal, params: str, given: str, style: str) -> None:
        """Record run ``invoice:F`` (finished) and ``invoice:I`` (stopped after its invoice)."""
        self.deploy(params, given, style=style)
        self.module.handle.redrive_recover(journal, "invoice:F", [], {"order": "F"}, {})
        self.deploy(params, given, style=style, crash=True)
        with pytest.raises(ConnectionError):
            self.module.handle.redrive_recover(journal, "invoice:I", [], {"order": "I"}, {})
        assert self.sent == ["F", "I"]


def verdicts(app: App, journal: MemoryJournal, tmp: Path) -> dict[str, bool]:
    """Whether each of what-changed, check, check --update and the resume replays the record.

    Asserts that no invoice is sent again, whatever the verdict (a refused step
    stops the resume before the body).
    """
    fixture = tmp / f"F-{uuid.uuid4().hex[:6]}.rdj"
    export_run(journal, "invoice:F", fixture)
    found = {
        f"what-changed ({run})": not redrive.what_changed(journal, run).strict_replay_breaks
        for run in ("invoice:F", "invoice:I")
    }
    found |= {
        "check": redrive.check_run((journal, "invoice:F")).passed,
        "check --update": update_run(fixture).outcome == "unchanged",
    }
    try:
        app.module.handle.redrive_recover(journal, "invoice:I", [], {"order": "I"}, {})
        found["resume"] = True
    except DivergenceError:
        found["resume"] = False
    assert app.sent == ["F", "I"], "a recorded invoice was sent again"
    return found


#: (name, tool params then, call then, params now, call now, style, replays)
SCENARIOS = [
    # item 5: a framework binds the new parameter's default into the arguments
    ("add-default-framework", "order: str", "{'order': order}",
     "order: str, priority: str = 'normal'", "{'order': order}", "framework", True),
    ("add-default-passed", "order: str", "{'order': order}",
     "order: str, priority: str = 'normal'", "{'order': order, 'priority': 'normal'}", "plain",
     True),
    # item 4: the caller leaves it out (the key never changed; what-changed said otherwise)
    ("add-default-omitted", "order: str", "{'order': order}",
     "order: str, priority: str = 'normal'", "{'order': order}", "plain", True),
    ("add-param-other-value", "order: str", "{'order': order}",
     "order: str, priority: str = 'normal'", "{'order': order, 'priority': 'high'}", "plain",
     False),
    ("change-default-framework", "order: str, priority: str = 'low'", "{'order': order}",
     "order: str, priority: str = 'normal'", "{'order': order}", "framework", False),
    ("remove-param-framework", "order: str, note: str = ''", "{'order': order}",
     "order: str", "{'order': order}", "framework", False),
    ("rename-param-framework", "order: str, note: str = ''", "{'order': order}",
     "order: str, memo: str = ''", "{'order': order}", "framework", False),
    ("reorder-params", "order: str, copies: int = 1", "{'order': order, 'copies': 2}",
     "copies: int = 1, *, order: str", "{'order': order, 'copies': 2}", "plain", True),
]  # fmt: skip


@pytest.mark.parametrize("define", ["def", "async def"])
@pytest.mark.parametrize(
    ("before", "call_before", "after", "call_after", "style", "replays"),
    [pytest.param(*s[1:], id=s[0]) for s in SCENARIOS],
)
def test_resume_check_update_and_what_changed_agree(
    define: str,
    before: str,
    call_before: str,
    after: str,
    call_after: str,
    style: str,
    replays: bool,
    tmp_path: Path,
) -> None:
    """Exactly the changes that keep the call's meaning replay, and all four say the same."""
    app, journal = App(define), MemoryJournal()
    app.record(journal, before, call_before, style)
    app.deploy(after, call_after, style=style)
    found = verdicts(app, journal, tmp_path)
    assert found == dict.fromkeys(found, replays), found


def test_a_docstring_change_keeps_calls_replayable_and_what_changed_says_so(
    tmp_path: Path,
) -> None:
    """A docstring-only change is listed, with the recorded calls still replaying."""
    app, journal = App("def"), MemoryJournal()
    app.record(journal, "order: str", "{'order': order}", "plain")
    app.deploy("order: str", "{'order': order}", doc="Send an invoice (by email).")
    report = redrive.what_changed(journal, "invoice:I")
    assert {c.part: c.detail for c in report.changes}["tool:send_invoice"] == (
        "docstring changed (its recorded calls still replay)"
    )
    assert not report.steps and not report.strict_replay_breaks
    assert all(verdicts(app, journal, tmp_path).values())


def test_what_changed_does_not_advise_a_fork_for_an_added_default(tmp_path: Path) -> None:
    """Item 4: seq 1 was called unreplayable, with a fork that would send the invoice again."""
    app, journal = App("def"), MemoryJournal()
    app.record(journal, "order: str", "{'order': order}", "plain")
    app.deploy("order: str, priority: str = 'normal'", "{'order': order}")
    report = redrive.what_changed(journal, "invoice:I")
    text = report.summary()
    assert "unreplayable" not in text and "fork" not in text, text
    assert [c.detail for c in report.changes if c.part == "tool:send_invoice"] == [
        "signature changed"
    ]
    assert not report.steps


def test_a_removed_argument_is_unreplayable_where_the_replay_stops_earlier(
    tmp_path: Path,
) -> None:
    """A recorded argument that is no parameter now never replays; what-changed says so for a
    step its dry replay did not reach (replay=False here), and the resume refuses it."""
    app, journal = App("def"), MemoryJournal()
    app.record(journal, "order: str, note: str = ''", "{'order': order}", "framework")
    app.deploy("order: str", "{'order': order}", style="framework")
    report = redrive.what_changed(journal, "invoice:I", replay=False)
    assert [(s.seq, s.blocking) for s in report.steps] == [(1, True)]
    assert "'note' are no longer among its parameters" in report.steps[0].why
    hint = report.summary().split("What to do: ")[1]
    assert hint.startswith("a recorded tool call (send_invoice) no longer replays")
    assert "cannot change that" in hint
    assert not any(verdicts(app, journal, tmp_path).values())


# -- the property: random signatures, recorded calls and signature changes ---------------------

NAMES = ("a", "b", "c", "d")
VALUES = st.sampled_from([0, 1, "x", "y", None, True])


@st.composite
def signatures(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Parameters after ``order``: (name, default), the default ``...`` for none."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    out: list[tuple[str, Any]] = []
    for name in names:  # required ones first, as Python wants
        out.append((name, draw(st.one_of(st.just(...), VALUES))))
    return sorted(out, key=lambda p: p[1] is not ...)


def _params(sig: list[tuple[str, Any]]) -> str:
    return ", ".join(["order"] + [n if d is ... else f"{n}={d!r}" for n, d in sig])


def _given(passed: dict[str, Any]) -> str:
    return "{'order': order" + "".join(f", {n!r}: {v!r}" for n, v in passed.items()) + "}"


CHANGES = ("add-default", "change-default", "remove", "rename", "docstring", "reorder")


@given(
    sig=signatures(),
    data=st.data(),
    style=st.sampled_from(["plain", "framework"]),
    change=st.sampled_from(CHANGES),
)
def test_exactly_the_meaning_preserving_signature_changes_replay(
    sig: list[tuple[str, Any]], data: st.DataObject, style: str, change: str
) -> None:
    """resume, check, check --update and what-changed agree on every change, and a call
    replays exactly when its identity is kept: the arguments it passes (a framework passes
    every parameter, defaults bound) are the recorded ones, up to a parameter added at its
    default. (A changed default of a parameter a plain call leaves out is not an argument
    change: like a body change, it is not part of what a call recorded.)"""
    passed = {
        n: data.draw(VALUES, label=f"value of {n}")
        for n, d in sig
        if d is ... or data.draw(st.booleans(), label=f"pass {n}")
    }
    new_sig, new_passed = list(sig), dict(passed)
    defaulted = [n for n, d in sig if d is not ...]
    explicit = set(passed) if style == "plain" else {n for n, _ in sig}
    if change == "add-default":
        name = data.draw(st.sampled_from([n for n in NAMES if n not in dict(sig)] or ["e"]))
        new_sig.append((name, data.draw(VALUES, label="its default")))
        keeps = True
    elif change == "change-default" and defaulted:
        name = data.draw(st.sampled_from(defaulted))
        old = dict(sig)[name]
        new = data.draw(VALUES.filter(lambda v: repr(v) != repr(old)), label="new default")
        new_sig = [(n, new if n == name else d) for n, d in sig]
        keeps = name in passed or style == "plain"
    elif change in ("remove", "rename"):
        name = data.draw(st.sampled_from([n for n, _ in sig]))
        default = dict(sig)[name]
        new_sig = [(n, d) for n, d in sig if n != name]
        if change == "rename":
            new_sig.append(("renamed", default))
        new_passed.pop(name, None)
        if change == "rename" and name in passed:
            new_passed["renamed"] = passed[name]
        keeps = name not in explicit
    elif change == "reorder":  # calls pass arguments by name, so their order is no part of it
        new_sig = sig[::-1]
        keeps = True
    else:  # a docstring change (or a default change where no parameter has one)
        keeps = True
    new_sig = sorted(new_sig, key=lambda p: p[1] is not ...)
    app, journal = App("def"), MemoryJournal()
    app.record(journal, _params(sig), _given(passed), style)
    app.deploy(
        _params(new_sig),
        _given(new_passed),
        style=style,
        doc="Send an invoice, changed." if change == "docstring" else "Send an invoice.",
    )
    with tempfile.TemporaryDirectory() as tmp:
        found = verdicts(app, journal, Path(tmp))
    assert found == dict.fromkeys(found, keeps), (found, sig, passed, new_sig, new_passed)


# -- parallel calls and the other rules ---------------------------------------------------------


def _invoice_tool(params: str, sent: list[str]) -> Any:
    """An async side-effecting ``send_invoice(order{params})`` whose results tell calls apart."""
    scope: dict[str, Any] = {"SENT": sent, "redrive": redrive}
    exec(
        "@redrive.tool(restart_safe=False)\n"
        f"async def send_invoice(order: str{params}) -> str:\n"
        "    SENT.append(order)\n"
        "    return f'sent {order} as number {len(SENT)}'\n",
        scope,
    )
    return scope["send_invoice"]


async def _bound(tool: Any, **given: Any) -> Any:
    """Call ``tool`` as a framework does: every parameter, defaults bound in."""
    bound = inspect.signature(tool).bind(**given)
    bound.apply_defaults()
    return await tool(**bound.arguments)


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(ReplayPolicy(), id="strict"),
        pytest.param(ReplayPolicy(tool="lenient"), id="lenient-tools"),
        pytest.param(ReplayPolicy(on_drift="continue_live"), id="continue_live"),
    ],
)
def test_parallel_calls_with_an_added_default_each_get_their_own_record(
    policy: ReplayPolicy,
) -> None:
    """A parallel batch recorded before the parameter existed: on resume each call, now with
    the parameter bound at its default, gets its own recorded result and no body runs (under
    a lenient rule for tools the call used to match nothing and send the invoice again)."""
    journal, sent = MemoryJournal(), list[str]()
    orders = ["A", "B", "C"]

    async def batch(tool: Any, **options: Any) -> list[Any]:
        async with redrive.run(journal, "batch", **options):
            results = await asyncio.gather(*(_bound(tool, order=o) for o in orders))
        return list(results)

    recorded = asyncio.run(batch(_invoice_tool("", sent)))
    assert sorted(sent) == orders
    again = _invoice_tool(", priority: str = 'normal'", sent)
    assert asyncio.run(batch(again, live=False, replay=policy)) == recorded
    assert sorted(sent) == orders, "a recorded invoice was sent again"


def test_an_in_flight_call_with_an_added_default_is_rerun_under_its_recorded_key() -> None:
    """Live, after a crash inside a restart-safe body: the call, now with the parameter at its
    default, is the recorded in-flight call; it runs again under the same idempotency key
    (on main it diverged, and the run could not be resumed under the new code)."""
    journal, keys = MemoryJournal(), list[str]()

    def define(params: str, crash: bool) -> Any:
        scope: dict[str, Any] = {"redrive": redrive, "KEYS": keys, "CRASH": crash}
        exec(
            "@redrive.tool(restart_safe=True)\n"
            f"def send_invoice(order: str{params}, idempotency_key: str = '') -> str:\n"
            "    KEYS.append(idempotency_key)\n"
            "    if CRASH:\n"
            "        raise KeyboardInterrupt  # the worker dies inside the body\n"
            "    return f'sent {order}'\n",
            scope,
        )
        return scope["send_invoice"]

    tool = define("", crash=True)
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "inflight"):
        tool(order="A")
    tool = define(", priority: str = 'normal'", crash=False)
    with redrive.run(journal, "inflight"):
        assert tool(order="A", priority="normal") == "sent A"
    assert keys == ["inflight:1:send_invoice"] * 2
