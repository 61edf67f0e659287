"""Two tools of one name in one process: the reports judge an in-flight step by the most
careful declaration, whatever the order they were declared in.

A worker hosting two agents, or a test session, may declare ``open_ticket`` twice, once
restart-safe (it dedupes on the idempotency key) and once not. The engine resumes a run
with the tool its loop calls; the reports made without the loop (``redrive runs --status
blocked``, ``redrive plan``, ``redrive recover``'s list) read the declarations of their
process. Found by the procrastinate queue test: an earlier test module in the same test
process had declared a restart-safe ``open_ticket``, and the parked run was not listed as
blocked.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive import Recovery
from redrive._resumable import blocked_step, in_flight
from redrive.replay import declared_spec
from redrive.storage import MemoryJournal


def _unknown(args: dict[str, Any], key: str) -> Recovery:
    return Recovery.unknown("asked the ticket system: no answer")


def _not_done(args: dict[str, Any], key: str) -> Recovery:
    return Recovery.not_done()


#: how one declaration of a tool behaves on resume: (restart_safe, read_only, recover)
Declaration = tuple[bool, bool, Any]

DECLARATIONS = st.tuples(st.booleans(), st.booleans(), st.sampled_from([None, _unknown, _not_done]))


def _declare(name: str, declaration: Declaration) -> Any:
    restart_safe, read_only, recover = declaration

    @redrive.tool(name=name, restart_safe=restart_safe, read_only=read_only, recover=recover)
    def twin(subject: str) -> str:
        return subject

    return twin


def _expected(declared: list[Declaration]) -> tuple[bool, Any]:
    """(safe to re-run, the recover hook) the most careful reading of ``declared`` gives."""
    safe = all(restart_safe or read_only for restart_safe, read_only, _ in declared)
    hooks = {recover for _, _, recover in declared}
    return safe, hooks.pop() if len(hooks) == 1 else None


@given(st.lists(DECLARATIONS, min_size=1, max_size=5))
def test_the_most_careful_declaration_decides_in_any_order(declared: list[Declaration]) -> None:
    """Every order of the same declarations gives one answer: safe only when all are safe,
    a recover hook only when all share it."""
    safe, hook = _expected(declared)
    answers = set()
    for order in itertools.islice(itertools.permutations(declared), 6):
        name = f"twin_{uuid.uuid4().hex}"
        for declaration in order:
            _declare(name, declaration)
        spec = declared_spec(name)
        assert spec is not None
        answers.add((spec.restart_safe or spec.read_only, spec.recover))
    assert answers == {(safe, hook)}


def test_a_safe_twin_declared_later_leaves_the_run_blocked() -> None:
    """open_ticket (not restart-safe) dies mid-body; then a restart-safe open_ticket of another
    agent is declared in the same process: the run is still listed blocked at its seq."""
    name = f"open_ticket_{uuid.uuid4().hex}"
    journal = MemoryJournal()

    @redrive.tool(name=name, restart_safe=False)
    def open_ticket(subject: str) -> str:
        raise KeyboardInterrupt  # the worker dies inside the body

    with pytest.raises(KeyboardInterrupt), redrive.run(journal, "support:1") as run:
        run.finish(open_ticket("damaged order"))
    record = journal.get_run("support:1")
    assert record is not None
    blocked = blocked_step(journal, record)
    assert blocked is not None and in_flight(blocked) == ("block", True)

    _declare(name, (True, False, None))  # the other agent's twin, declared later
    _declare(name, (False, True, _not_done))
    again = blocked_step(journal, record)
    assert again is not None and again.seq == blocked.seq
    assert in_flight(again) == ("block", True)
