"""Cases the thorough differential profile found under CONTRACT rules still off (C6, C7).

:mod:`tests.unit.test_differential` keeps them as ``@example`` s, which draw their
today-safe variant while their rule is off; here they run as found, whatever
:data:`tests.model.harness.IMPLEMENTED` says, so the fixes stay held.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.model import resume_model as m
from tests.model.harness import check

P, Q = m.Call("model", "chat", "p"), m.Call("model", "chat", "q")
E, A = m.Call("effect", "send", "a"), m.Call("read", "lookup", "a")
RETRYING = dataclasses.replace(E, retry_signal=True)
OK = m.Call("approval", "ok")


def _scenario(program: Any, changed: Any, how: str, crash: Any, policy: str, **kw: Any) -> Any:
    return {
        "program": program,
        "changed": changed,
        "how": how,
        "crash": crash,
        "policy": policy,
        "face": kw.get("face", "sync"),
        "duckdb": kw.get("duckdb", False),
    }


FOUND = {
    # lenient, a model step inserted before a batch of two identical ones: the inserted
    # call is no batch member; it goes live, each member replays its own record (I11)
    "lenient-inserted-before-identical-batch": _scenario(
        (m.Batch((P, P)), OK), (P, m.Batch((P, P)), OK), "insert", None, "lenient"
    ),
    # lenient, the second of two chat p dropped before a lookup: the last chat p (one turn
    # behind the record) takes the dropped one's record of its turn, not the one after the
    # lookup
    "lenient-identical-model-records-by-turn": _scenario(
        (P, P, A, P), (P, A, P), "drop", None, "lenient"
    ),
    # continue_live, async: a batch member's answer reaches the loop when its sibling diverges
    "async-batch-member-answered-before-sibling-diverges": _scenario(
        (E, m.Batch((A, P))),
        (m.Batch((A, P)),),
        "drop",
        ("m0", "tool_claimed", "kill"),
        "continue_live",
        face="async",
        duckdb=True,
    ),
    # continue_live: [chat p, lookup a] cut in flight at the lookup; the new code asks two
    # model steps in parallel: one supersedes chat p's record, the other was inserted (no
    # model record of its turn left): its reasked note carried step None, refused by the
    # frame check after the model call was made (JournalWriteError); both faces
    **{
        f"continue-live-inserted-model-member-{face}": _scenario(
            (P, A),
            (m.Batch((Q, m.Call("model", "chat", "r"))), A),
            "insert",
            ("m1", "tool_claimed", "kill"),
            "continue_live",
            face=face,
        )
        for face in ("sync", "async")
    },
    # warn, a lookup dropped before a retried send: chat q, the very request recorded after
    # the lookup, is out of order, not drifted: it diverges under warn as under strict
    "warn-same-request-out-of-order-diverges": _scenario(
        (P, A, RETRYING, Q, A),
        (P, RETRYING, Q, A),
        "drop",
        ("m4", "tool_claimed", "kill"),
        "warn",
        duckdb=True,
    ),
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_case_follows_the_model(name: str) -> None:
    """The library does what the model says on the case (harness :func:`check`)."""
    check(FOUND[name])
