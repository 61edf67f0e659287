"""Hypothesis strategies shared by the tests."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from hypothesis import strategies as st

#: Unicode text without lone surrogates (they are not valid Unicode, and refused).
_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
text = st.text(st.characters(exclude_categories=_SURROGATES), max_size=20)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False),
    text,
    st.binary(max_size=20),
    st.datetimes(timezones=st.just(dt.UTC)),
    st.datetimes(),
    st.dates(),
    st.uuids().map(lambda u: uuid.UUID(str(u))),
)

#: Plain values that decode(encode(x)) returns equal (lists, str-keyed dicts).
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(text, children, max_size=5),
    ),
    max_leaves=25,
)


# -- loop programs for the engine's stateful test -------------------------------------------

#: How a crash leaves a run: abandoned unexited (a SIGKILL), SystemExit through the run's
#: exit (a deploy), or an exception the run was told is resumable (``retryable=``).
CRASH_HOWS = ("abandon", "exit", "resumable")

#: Where a crash hits a step: before its body/call, inside the body after its side effect,
#: after the body or call returned (outcome not yet journaled), after its outcome is durable.
CRASH_WHERES = ("before", "in_body", "after_effect", "after_outcome")


@st.composite
def loop_steps(draw: st.DrawFn) -> tuple[str, ...]:
    """One step of a loop program: ``("model",)``, ``("value", "now"|"uuid4"|"random")`` or
    ``("tool", "safe"|"read_only"|"unsafe", recover: "yes"|"no")``."""
    kind = draw(st.sampled_from(("model", "tool", "tool", "value")))
    if kind == "model":
        return ("model",)
    if kind == "value":
        return ("value", draw(st.sampled_from(("now", "uuid4", "random"))))
    return (
        "tool",
        draw(st.sampled_from(("safe", "read_only", "unsafe", "unsafe"))),
        draw(st.sampled_from(("yes", "no"))),
    )


#: JSON-shaped values (None, bools, 64-bit ints, finite floats, text, lists, str-keyed dicts).
json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        text,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(text, children, max_size=4),
    ),
    max_leaves=10,
)


@st.composite
def loop_programs(
    draw: st.DrawFn,
    max_steps: int = 6,
    results: st.SearchStrategy[Any] = json_values,
    max_crashes: int = 3,
) -> dict[str, Any]:
    """A loop program and the crashes of its executions, first to last.

    Args:
        max_steps: the most steps in the program (at least one).
        results: what the tools and models answer (one value per step).
        max_crashes: the most crashes (0: the program runs once, live).

    Returns:
        ``{"steps": [step...], "results": [value per step], "crashes": [(step index,
        where, how)...]}``; a crash whose step is replayed, or not reached, does not happen.
    """
    steps = draw(st.lists(loop_steps(), min_size=1, max_size=max_steps))
    answers = draw(st.lists(results, min_size=len(steps), max_size=len(steps)))
    crash = st.tuples(
        st.integers(min_value=0, max_value=len(steps) - 1),
        st.sampled_from(CRASH_WHERES),
        st.sampled_from(CRASH_HOWS),
    )
    crashes = draw(st.lists(crash, max_size=max_crashes))
    return {"steps": steps, "results": answers, "crashes": crashes}
