"""The real library held to the reference model of the resume contract (issue 23).

Hypothesis draws an agent program (model steps, side-effecting and read-only tools, value
steps, approvals, parallel batches from asyncio tasks or threads with identical requests),
a crash of its first attempt at a step boundary, a code change before the next attempt
(insert, drop, reorder, rename, change an argument, add a defaulted parameter, change a
prompt), a replay policy and a face (``tests/model/scenarios.py``). It runs the attempts
through the real library (``tests/model/driver.py``) and through
``tests/model/resume_model.py`` and compares, attempt by attempt: the tool bodies that
ran (an outside ledger), the answer each caller got (recorded: whose; or live), the
error class and where, the run's status. On every
example it also checks, independently of the model: a side-effecting body runs at most
once per idempotency key; a proposed fork re-runs no side effect; what-changed and a
strict resume agree (CONTRACT C10). An error's first next step is taken (C5) and the run
compared again.

Rules of CONTRACT.md not implemented yet are off in :data:`IMPLEMENTED`: their
generators draw nothing that needs them, and ``test_contract_rule_is_on`` skips, naming
the rule, for each one that is off. Flip a rule on when its fix lands (or try them all:
``REDRIVE_CONTRACT_RULES=C1,C2,C3,C4,C5,C6,C7,C8,C10,C1-order pytest ...``). The kept
``@example`` of an off rule draws its today-safe variant until the rule is on.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings

from tests.conftest import hypothesis_profile
from tests.model import resume_model as m
from tests.model.harness import RULES, check, on
from tests.model.scenarios import scenarios

#: Examples per profile: the default one fits the edit-test loop (~30 s here), ``ci`` is
#: derandomized, ``thorough`` draws 10x more at random.
EXAMPLES = {"default": 30, "ci": 60, "thorough": 1000}[hypothesis_profile()]


@pytest.fixture(autouse=True, scope="module")
def _heap_frozen() -> Iterator[None]:
    """The heap of the test session so far is frozen while this module runs.

    The driver (tests/model/driver.py) runs a full ``gc.collect()`` after every attempt,
    so that an abandoned run lets go of its in-process hold. In a whole-suite session
    that collection walked every object the earlier tests left (most of this module's
    cost in CI). Frozen (``gc.freeze``), those are skipped; what an attempt leaves is
    created after the freeze and is collected as before. Unfrozen after the module.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


P, Q = m.Call("model", "chat", "p"), m.Call("model", "chat", "q")
E, R = m.Call("effect", "send", "a"), m.Call("read", "lookup", "b")


@settings(max_examples=EXAMPLES)
@given(scenario=scenarios())
@example(  # C10 bug: a finished run, new code asks one more model step at the end:
    # what-changed says "nothing changed", check says went_live, the resume ReplayMissError
    scenario={
        "program": (m.Call("value", "now"),),
        "changed": (m.Call("value", "now"), P),
        "how": "insert",
        "crash": None,
        "policy": "strict",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # C4 (issue 23 #1): lenient tools, a new side effect inserted before a finished one
    scenario={
        "program": (P, E),
        "changed": (P, m.Call("effect", "refund", "b"), E),
        "how": "insert",
        "crash": ("m1", "tool_recorded", "kill"),
        "policy": "lenient_tool" if on("C4") else "strict",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # C1-order: strict resumes a program whose model step moved before the batch of
    # tool calls that preceded it: the batch's records, of turn 0, were replayed in turn 1
    scenario={
        "program": (m.Batch((R, R)), P, Q),
        "changed": (P, m.Batch((R, R)), Q) if on("C1-order") else (m.Batch((R, R)), P, Q),
        "how": "reorder",
        "crash": ("m1", "model_before", "kill"),
        "policy": "strict",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # C1-order, side effects: the members went live past their flow's record while
    # the root's turn-0 records of the same sends waited (each send ran a second time)
    scenario={
        "program": (m.Batch((E, E)), P, Q),
        "changed": (P, m.Batch((E, E)), Q) if on("C1-order") else (m.Batch((E, E)), P, Q),
        "how": "reorder",
        "crash": ("m1", "model_before", "kill"),
        "policy": "strict",
        "face": "async",
        "duckdb": False,
    },
)
@example(  # C1-order (thorough profile): a strict resume after inserting a model step
    # before a batch of identical ones: the inserted call gets batch member 0's recorded
    # answer, member 0 gets member 1's, member 1 goes live (same (parent, occ) position)
    scenario={
        "program": (m.Batch((P, P)), P),
        "changed": (P, m.Batch((P, P)), P) if on("C1-order") else (m.Batch((P, P)), P),
        "how": "insert",
        "crash": ("m0", "model_before", "kill"),
        "policy": "strict",
        "face": "sync",
        "duckdb": True,
    },
)
@example(  # C7 (issue 23 #9): a retry signal from a tool not declared restart-safe
    scenario={
        "program": (P, dataclasses.replace(E, retry_signal=on("C7")), R),
        "changed": (P, dataclasses.replace(E, retry_signal=on("C7")), R),
        "how": "none",
        "crash": ("m2", "tool_claimed", "kill"),
        "policy": "strict",
        "face": "async",
        "duckdb": False,
    },
)
@example(  # C8 (threads, warm, seen once in ~200): three identical model requests from
    # redrive.executor() threads; on replay one caller got another thread's recorded answer
    scenario={
        "program": (m.Call("approval", "ok"), m.Call("value", "uuid4"), m.Batch((Q, Q, Q)), Q),
        "changed": (m.Call("approval", "ok"), m.Call("value", "uuid4"), m.Batch((Q, Q, Q)), Q),
        "how": "none",
        "crash": None,
        "policy": "strict",
        "face": "sync" if on("C8") else "async",
        "duckdb": True,
    },
)
@example(  # C6 (thorough profile): a model step inserted before a side effect cut in flight,
    # lenient model rule: the library's send found its in-flight record of turn 0 (blocked)
    # where the model diverges (R7); the person's resume, then resolve --not-done, re-runs
    # the send in its place (A11)
    scenario={
        "program": (E, P),
        "changed": (P, E, P),
        "how": "insert",
        "crash": ("m0", "tool_claimed", "kill"),
        "policy": "lenient_model" if on("C6") else "strict",
        "face": "sync",
        "duckdb": True,
    },
)
@example(  # warn-drift (thorough profile): two model steps swapped in a finished run,
    # replayed under warn: the library handed each the other's record; chat p, whose own
    # record was replayed already, now diverges (A8)
    scenario={
        "program": (P, Q),
        "changed": (Q, P) if on("warn-drift") else (P, Q),
        "how": "reorder",
        "crash": None,
        "policy": "warn",
        "face": "sync",
        "duckdb": True,
    },
)
@example(  # approvals on a fork (thorough profile): strict diverges at the inserted model
    # step, the advice forks before the first recorded step; the approval decided for the
    # original run is asked again in the fork (a decision is the run's, resume_model A5)
    scenario={
        "program": (P, m.Call("approval", "ok"), P, P),
        "changed": (Q, P, m.Call("approval", "ok"), P, P),
        "how": "insert",
        "crash": None,
        "policy": "strict",
        "face": "sync",
        "duckdb": True,
    },
)
@example(  # continue_live past a waiting tool step (thorough profile): the model re-asked
    # chat p live beside the finished lookup's record of its turn; the library diverges
    # before it, as ReplayPolicy documents (resume_model A12)
    scenario={
        "program": (R, P),
        "changed": (P, R) if on("C6") else (R, P),
        "how": "reorder",
        "crash": ("m1", "model_before", "kill"),
        "policy": "continue_live" if on("C6") else "strict",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # the same with a side effect waiting: no live model call, no send re-run
    scenario={
        "program": (E, P),
        "changed": (P, E) if on("C6") else (E, P),
        "how": "reorder",
        "crash": ("m1", "model_before", "kill"),
        "policy": "continue_live" if on("C6") else "strict",
        "face": "async",
        "duckdb": False,
    },
)
@example(  # C6 (a) (thorough profile): lenient, a model step dropped after a read-only
    # step cut in flight: the engine kept the in-flight lookup as a leftover (it superseded
    # only finished read-only ones) and diverged at the end; a read-only body changes
    # nothing and its outcome was never seen: superseded (R8)
    scenario={
        "program": (P, m.Call("read", "lookup", "a"), P),
        "changed": (P, P),
        "how": "drop",
        "crash": ("m1", "tool_claimed", "kill"),
        "policy": "lenient",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # C6 (b) (thorough profile): a send dropped before a read-only step cut in
    # flight: what-changed said "nothing changed" (its dry replay stopped where the resume
    # re-runs the lookup live) while the send's record waits; now it says it cannot tell
    scenario={
        "program": (m.Call("value", "now"), E, m.Call("read", "lookup", "a")),
        "changed": (m.Call("value", "now"), m.Call("read", "lookup", "a")),
        "how": "drop",
        "crash": ("m2", "tool_claimed", "kill"),
        "policy": "lenient_model",
        "face": "async",
        "duckdb": False,
    },
)
@example(  # C10 (default profile, seed 117559340341482539206366892311309413258): a model
    # step inserted before a recorded `now` of a paused run: the dry replay stopped where
    # the resume goes live, the value's record unreplayed, and said "nothing changed"
    scenario={
        "program": (P, m.Call("value", "now"), P, P, P),
        "changed": (P, P, m.Call("value", "now"), P, P, P),
        "how": "insert",
        "crash": ("m2", "model_before", "retryable"),
        "policy": "strict",
        "face": "sync",
        "duckdb": True,
    },
)
@example(  # C7 (d) (thorough profile): a send and its retrying twin swapped in a finished
    # run: the plain send now replays the recorded retry signal, which its loop does not
    # catch: the loop raises (the model took it as an answer); check fails the run, and
    # what-changed said nothing changed (it counted the raise as the code failing)
    scenario={
        "program": (E, dataclasses.replace(E, retry_signal=True)),
        "changed": (dataclasses.replace(E, retry_signal=True), E),
        "how": "reorder",
        "crash": None,
        "policy": "strict",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # live_tools (c): a send moved before a batch, resolved not done and re-run: the
    # batch's model member diverges while its lookup sibling, started with it, replays and
    # re-runs its body (live_tools by design); the model stops at the first member (A4)
    scenario={
        "program": (m.Call("read", "lookup", "a"), m.Batch((P, m.Call("read", "lookup", "a"))), E),
        "changed": (E, m.Batch((P, m.Call("read", "lookup", "a"))), m.Call("read", "lookup", "a")),
        "how": "reorder",
        "crash": ("m1", "tool_claimed", "kill"),
        "policy": "live_tools",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # frontier (thorough profile, seed 44): the first model step dropped before a batch
    # of sends: the members went live past the root's waiting model step (their starter's
    # record at the point it started them) and each send ran again under a new key (I15)
    scenario={
        "program": (P, m.Batch((E, E)), P, P),
        "changed": (m.Batch((E, E)), P, P),
        "how": "drop",
        "crash": ("m1", "model_before", "kill"),
        "policy": "strict",
        "face": "sync",
        "duckdb": True,
    },
)
@example(  # C6 (e) (thorough profile, seed 11): lenient, a model step inserted before a
    # batch of two identical ones: the lenient fallback handed the inserted call batch
    # member 0's record (a flow it starts: never its own, C8, invariant 11), the members
    # shifted and the last went live; now the inserted call goes live, each member replays
    scenario={
        "program": (m.Batch((P, P)), m.Call("approval", "ok")),
        "changed": (P, m.Batch((P, P)), m.Call("approval", "ok"))
        if on("C6")
        else (m.Batch((P, P)), m.Call("approval", "ok")),
        "how": "insert",
        "crash": None,
        "policy": "lenient" if on("C6") else "strict",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # C6 (f) (thorough profile): lenient, a finished [chat p, chat p, lookup a, chat p]
    # replayed with the second chat p dropped: the last chat p took the record after the
    # lookup (its position, one turn ahead, recorded after the unreplayed chat p); a model
    # record answers only once the steps recorded before it replayed (R3): the dropped one's
    scenario={
        "program": (P, P, m.Call("read", "lookup", "a"), P),
        "changed": (P, m.Call("read", "lookup", "a"), P)
        if on("C6")
        else (P, P, m.Call("read", "lookup", "a"), P),
        "how": "drop",
        "crash": None,
        "policy": "lenient" if on("C6") else "strict",
        "face": "sync",
        "duckdb": False,
    },
)
@example(  # C6 (thorough profile, seed 11): continue_live, a send cut in flight dropped before
    # a batch (lookup a, chat p), async: the chat diverges (the send waits) after the lookup
    # answered its caller; the async driver lost that answer (gather raised at once)
    scenario={
        "program": (E, m.Batch((m.Call("read", "lookup", "a"), P))),
        "changed": (m.Batch((m.Call("read", "lookup", "a"), P)),)
        if on("C6")
        else (E, m.Batch((m.Call("read", "lookup", "a"), P))),
        "how": "drop",
        "crash": ("m0", "tool_claimed", "kill"),
        "policy": "continue_live" if on("C6") else "strict",
        "face": "async",
        "duckdb": True,
    },
)
@example(  # C7 (thorough profile, seed 33): warn, [chat p, lookup a, send a(retry), chat q,
    # lookup a] cut in flight at the last lookup, the first lookup dropped: chat q's record,
    # same request, follows the unreplayed lookup; the model replayed it as drift, the library
    # diverges: the arguments did not drift, the order did (warn relaxes arguments only, R5)
    scenario={
        "program": (
            P,
            m.Call("read", "lookup", "a"),
            dataclasses.replace(E, retry_signal=on("C7")),
            Q,
            m.Call("read", "lookup", "a"),
        ),
        "changed": (
            P,
            dataclasses.replace(E, retry_signal=on("C7")),
            Q,
            m.Call("read", "lookup", "a"),
        ),
        "how": "drop",
        "crash": ("m4", "tool_claimed", "kill"),
        "policy": "warn",
        "face": "sync",
        "duckdb": True,
    },
)
@example(  # I15 (thorough profile, found under C6; strict, async): [chat q, Batch(chat q,
    # send a, send a), chat p, send a] cut in flight at the last send, the first chat q
    # dropped: member chat q took the root's chat q record, and both sends went live past
    # "their flow's record", each running again under a new key while its record (the same
    # members, started from the root's later point) waited. Now a waiting side effect of the
    # caller's own flow recorded from a later point of its starter holds it, a sibling's
    # does not (_frontier._own_effect_waits; LangGraph's parallel calls go on)
    scenario={
        "program": (Q, m.Batch((Q, E, E)), P, E),
        "changed": (m.Batch((Q, E, E)), P, E),
        "how": "drop",
        "crash": ("m2", "tool_claimed", "kill"),
        "policy": "strict",
        "face": "async",
        "duckdb": False,
    },
)
def test_the_library_follows_the_model(scenario: dict[str, Any]) -> None:
    """Random programs, crashes, code changes and policies: the library does what the model
    says (bodies, answers, errors, statuses), and the invariants hold."""
    check(scenario)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_contract_rule_is_on(rule: str) -> None:
    """Each CONTRACT rule the generators need is on; an off rule is a visible skip."""
    if not on(rule):
        pytest.skip(
            f"CONTRACT {rule} (issue 23) not implemented yet: off in IMPLEMENTED: {RULES[rule]}"
        )
