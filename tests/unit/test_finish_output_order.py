"""A finished run's recorded output keeps what the loop handed ``run.finish``.

Found while turning langgraph#6792 into an input (test_langgraph_task_reports.py):
a graph's state dict ``{"x": 1, "out": ...}`` handed to ``run.finish`` came back
from the replayed run as ``{"out": ..., "x": 1}``: the output was stored in the
canonical form (map keys sorted), so ``json.dumps`` of what the loop returns
differed between the live run and its replay (invariant 9). It is now stored as a
stored value (``redrive._stored``), as a step's result is: type, dict key order
and ``json.dumps`` kept, through every journal.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive

OUTPUT = {"x": 1, "out": "charged 1:yes", "b": [{"z": 0, "a": 1}]}


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("url", [":memory:", "duckdb"])
def test_a_replayed_run_returns_its_output_in_the_order_it_was_finished_with(
    face: str, url: str, tmp_path: Path
) -> None:
    journal = redrive.open_journal(":memory:" if url == ":memory:" else f"{tmp_path}/r.duckdb")

    def deliver() -> object:
        if face == "sync":
            with redrive.run(journal, "o:1") as run:
                return run.finish(dict(OUTPUT))

        async def go() -> object:
            async with redrive.run(journal, "o:1") as run:
                return run.finish(dict(OUTPUT))

        return asyncio.run(go())

    assert json.dumps(deliver()) == json.dumps(OUTPUT)
    assert json.dumps(deliver()) == json.dumps(OUTPUT)  # replayed: the recorded output
    journal.close()


_KEYS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None)
@given(output=st.dictionaries(_KEYS, _JSON, max_size=5))
def test_any_json_output_replays_with_the_same_json_dumps(output: dict[str, object]) -> None:
    """Any JSON object a loop finishes with comes back from the replayed run with the same
    ``json.dumps`` (key order included)."""
    journal = redrive.open_journal(":memory:")
    with redrive.run(journal, "p:1") as run:
        assert run.finish(output) is output
    with redrive.run(journal, "p:1") as again:
        assert json.dumps(again.finish(None)) == json.dumps(output)
        assert json.dumps(again.output) == json.dumps(output)
    journal.close()
