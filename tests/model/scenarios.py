"""The differential test's generators (issue 23): Hypothesis strategies for an agent
program (model steps, side-effecting and read-only tools, value steps, approvals,
parallel batches), its first attempt's crash, a code change, a policy, a face and a
journal. Only what the CONTRACT rules switched on (:func:`tests.model.harness.on`) is
drawn. ``tests/unit/test_differential.py`` runs the scenarios."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from tests.model import resume_model as m
from tests.model.harness import NAMES, POLICIES, RELAXED, on

ARGS = ("a", "b")


def _call(kind: str, draw: Any) -> m.Call:
    if kind == "model":
        return m.Call("model", "chat", draw(st.sampled_from(("p", "q"))))
    if kind in NAMES:
        retry = kind == "effect" and on("C7") and draw(st.integers(0, 5)) == 0
        name = draw(st.sampled_from(NAMES[kind]))
        return m.Call(kind, name, draw(st.sampled_from(ARGS)), retry_signal=retry)  # type: ignore[arg-type]
    if kind == "value":
        return m.Call("value", draw(st.sampled_from(("now", "uuid4"))))
    return m.Call("approval", "ok")


@st.composite
def programs(draw: Any) -> tuple[m.Item, ...]:
    """1-5 items: single calls of the main flow, or batches of 2-3 (identical ones common)."""
    items: list[m.Item] = []
    approvals = 0
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.integers(0, 3)) == 0:
            pool = [_call(draw(st.sampled_from(("model", "read", "effect"))), draw)]
            pool.append(draw(st.sampled_from([pool[0], _call("model", draw)])))
            calls = tuple(draw(st.sampled_from(pool)) for _ in range(draw(st.integers(2, 3))))
            items.append(m.Batch(tuple(dataclasses.replace(c, retry_signal=False) for c in calls)))
            continue
        kinds = ["model", "effect", "read", "value"] + (["approval"] if approvals == 0 else [])
        call = _call(draw(st.sampled_from(kinds)), draw)
        approvals += call.kind == "approval"
        items.append(call)
    return tuple(items)


CHANGES = ("none", "insert", "drop", "reorder", "rename", "arg", "prompt", "add_default")
RENAME = {"send": "refund", "refund": "send", "lookup": "search", "search": "lookup"}


def change(items: tuple[m.Item, ...], how: str, pos: int, new: m.Call) -> tuple[m.Item, ...]:
    """``items`` with one code change at the ``pos``-th main-flow call (modulo).

    Value steps and approvals are never moved, added, dropped or renamed: the contract
    does not say where a value step waits (resume_model A8).
    """
    mains = [
        i
        for i, item in enumerate(items)
        if isinstance(item, m.Call) and item.kind not in ("value", "approval")
    ]
    out = list(items)
    if how == "insert":
        out.insert(pos % (len(items) + 1), new)
        return tuple(out)
    if how == "none" or not mains:
        return items
    at = mains[pos % len(mains)]
    call = out[at]
    assert isinstance(call, m.Call)
    if how == "drop":
        del out[at]
    elif how == "reorder" and len(mains) > 1:
        other = mains[(pos + 1) % len(mains)]
        out[at], out[other] = out[other], out[at]
    elif how == "rename" and call.name in RENAME and call.kind in NAMES:
        out[at] = dataclasses.replace(call, name=RENAME[call.name])
    elif how == "arg" and call.kind in NAMES:
        out[at] = dataclasses.replace(call, arg="c" if call.arg != "c" else "a")
    elif how == "prompt" and call.kind == "model":
        out[at] = dataclasses.replace(call, arg=call.arg + "!")
    elif how == "add_default" and call.kind in NAMES:
        out[at] = dataclasses.replace(call, added_default=True)
    return tuple(out)


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    """A program, its first attempt's crash, a code change, a policy, a face, a journal."""
    program = draw(programs())
    face = draw(st.sampled_from(("sync", "async")))
    changes = [c for c in CHANGES if c != "add_default" or on("C1")]
    if any(isinstance(item, m.Batch) for item in program) and not on("C1-order"):
        # a code change next to a parallel batch meets the C1-order bug (see the examples:
        # a main-flow call and the batch's first member share one issue position)
        changes = ["none"]
    how = draw(st.sampled_from(changes))
    retries = any(call.retry_signal for _c, _f, call in m.callers(program))
    policies = [
        p
        for p in POLICIES
        if (p != "live_tools" or not retries)  # resume_model A10
        and (
            how == "none"
            or (p == "warn" and on("warn-drift"))
            or (p not in RELAXED and p != "warn")
            or (
                on("C2")
                and on("C4")
                and on("C6")
                and (face == "sync" or on("C3") or p != "continue_live")
            )
        )
    ]
    # a crash is aimed at the n-th passage of a step name's boundary: a retry-signalling
    # call passes its boundaries twice, where the model's caller ids count it once
    signalled = {call.name for _c, _f, call in m.callers(program) if call.retry_signal}
    crashable = [
        (caller, call)
        for caller, flow, call in m.callers(program)
        if flow == "m" and call.kind in ("model", "effect", "read") and call.name not in signalled
    ]
    crash = None
    if crashable and draw(st.integers(0, 3)) != 0:  # an unfinished run: resumed live
        caller, call = draw(st.sampled_from(crashable))
        bounds = m.MODEL_BOUNDARIES if call.kind == "model" else m.TOOL_BOUNDARIES
        crash = (
            caller,
            draw(st.sampled_from(bounds)),
            draw(st.sampled_from(("kill", "retryable"))),
        )
    new = _call(draw(st.sampled_from(("model", "effect", "read"))), draw)
    pos = draw(st.integers(0, 9))
    policy = draw(st.sampled_from(policies))
    if policy == "live_tools":  # nor a code change that inserts a retry signal (A10)
        new = dataclasses.replace(new, retry_signal=False)
    return {
        "program": program,
        "changed": change(program, how, pos, new),
        "how": how,
        "crash": crash,
        "policy": policy,
        "face": face,
        "duckdb": draw(st.integers(0, 9)) == 0,
    }
