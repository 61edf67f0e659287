"""A redrive error that a framework re-raises as its own still leaves the run resumable.

The OpenAI Agents SDK re-raises a tool's exception as ``UserError(...) from
err``; before, a blocked retry of an in-flight side effect reached the run
wrapped that way and ended it ``failed`` instead of resumable.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive


class FrameworkError(Exception):
    """Stands for a framework's own error type (agents.exceptions.UserError...)."""


WRAPPERS = st.lists(st.sampled_from([FrameworkError, RuntimeError, ValueError]), max_size=3)


def _raise_wrapped(inner: Exception, wrappers: list[type[Exception]]) -> None:
    error = inner
    for wrapper in wrappers:
        try:
            raise error
        except Exception as caught:
            try:
                raise wrapper(f"Error running tool: {caught}") from caught
            except Exception as wrapped:
                error = wrapped
    raise error


def _status(inner: Exception, wrappers: list[type[Exception]], is_async: bool) -> str:
    journal = redrive.open_journal(":memory:")
    if is_async:

        async def main() -> None:
            async with redrive.run(journal, "r1"):
                _raise_wrapped(inner, wrappers)

        with pytest.raises(Exception):  # noqa: B017 - whichever wrapper is outermost
            asyncio.run(main())
    else:
        with pytest.raises(Exception), redrive.run(journal, "r1"):  # noqa: B017
            _raise_wrapped(inner, wrappers)
    record = journal.get_run("r1")
    assert record is not None
    return record.status


@given(wrappers=WRAPPERS, is_async=st.booleans())
def test_a_wrapped_redrive_error_leaves_the_run_resumable(
    wrappers: list[type[Exception]], is_async: bool
) -> None:
    """However deep a redrive error sits in the ``__cause__`` chain, the run stays running."""
    blocked = redrive.ReplayMissError("run 'r1': no recorded step at seq 3")
    assert _status(blocked, wrappers, is_async) == "running"


@given(wrappers=WRAPPERS.filter(bool), is_async=st.booleans())
def test_a_wrapped_plain_error_still_fails_the_run(
    wrappers: list[type[Exception]], is_async: bool
) -> None:
    """The control: the same chains around a plain error end the run ``failed``."""
    assert _status(KeyError("order"), wrappers, is_async) == "failed"
