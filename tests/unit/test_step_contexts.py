"""The context blocks every tool step enters cost a class's ``__enter__``/``__exit__`` (issue 26
item 6), and keep what the generator blocks they replaced did on an exception.

``tool_open`` counts the step open and, on any exit, closed again (waking who
waits); ``adopting`` holds the run's lock and restores ``adoptable``;
``body_context`` sets the step's key and fence and resets them.
"""

from __future__ import annotations

import contextlib
import threading

import pytest

import redrive
from redrive.replay._tools import body_context
from redrive.storage import MemoryJournal


def test_the_per_step_blocks_restore_their_state_on_an_exception() -> None:
    with redrive.run(MemoryJournal(), "ctx") as run:
        state, appender = run._state, run._tools._appender
        with pytest.raises(KeyError), state.tool_open():
            assert state.open_tools == 1
            raise KeyError
        assert state.open_tools == 0
        before = state.adoptable
        with pytest.raises(KeyError), appender.adopting():
            assert state.adoptable == (state.config.on_busy == "wait")
            raise KeyError
        assert state.adoptable == before
        got: list[bool] = []

        def take() -> None:  # another thread gets the lock: adopting's exit released it
            got.append(state.lock.acquire(timeout=5))
            state.lock.release()

        other = threading.Thread(target=take)
        other.start()
        other.join()
        assert got == [True]
        with pytest.raises(KeyError), body_context("k", 7):
            assert redrive.idempotency_key() == "k" and redrive.fencing_token() == 7
            raise KeyError


def test_the_per_step_blocks_are_not_generator_context_managers() -> None:
    """Each costs a generator and its frame more when it is one (about 1 µs a step each)."""
    with redrive.run(MemoryJournal(), "ctx2") as run:
        blocks = [run._state.tool_open(), run._tools._appender.adopting(), body_context("k")]
        for block in blocks:
            assert not isinstance(block, contextlib._GeneratorContextManager)
