"""Provider knowledge reaches the engine as data: a model step's error carries ``retryable``.

``redrive.model`` marks what its callable raises (``recorders._provider``); the
run ends resumable or failed from that mark alone (the engine knows no SDK).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive.storage.memory import MemoryJournal
from tests.conftest import Drive, Loop


class APIStatusError(Exception):
    """An SDK-like status error (``status_code`` and ``response.headers``)."""

    def __init__(self, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code
        self.response = type("Response", (), {"headers": headers})()


class APIConnectionError(Exception):
    """An SDK-like connection error (known by its class name)."""


def _transient(status: int, headers: dict[str, str]) -> bool:
    """The rule both SDKs share, written out here on its own."""
    return status in (408, 409, 429) or status >= 500 or headers.get("x-should-retry") == "true"


ERRORS = st.one_of(
    st.builds(
        APIStatusError,
        st.integers(400, 599),
        st.sampled_from([{}, {"x-should-retry": "true"}, {"x-should-retry": "false"}]),
    ),
    st.builds(APIConnectionError, st.just("reset")),
    st.builds(ValueError, st.just("a plain bug")),
)


def _expected(exc: Exception) -> str:
    if isinstance(exc, APIStatusError):
        return "paused" if _transient(exc.status_code, exc.response.headers) else "failed"
    return "paused" if isinstance(exc, APIConnectionError) else "failed"


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(error=ERRORS)
def test_a_model_steps_error_decides_the_runs_status_by_its_mark(
    drive: Drive, error: Exception
) -> None:
    """On either face, a transient model error leaves the run running; any other fails it."""
    journal = MemoryJournal()

    @drive.model
    def ask(prompt: str) -> Any:
        raise error

    def loop(run: redrive.Run) -> Loop:
        return (yield ask("hi"))

    with pytest.raises(type(error)):
        drive.run(journal, "r", loop)
    assert journal.get_run("r").status == _expected(error)  # type: ignore[union-attr]


def test_an_unmarked_sdk_error_raised_in_the_run_itself_fails_it() -> None:
    """The engine has no SDK knowledge: a 503 raised outside any model step fails the run."""
    journal = MemoryJournal()
    with pytest.raises(APIStatusError), redrive.run(journal, "r"):
        raise APIStatusError(503, {})
    assert journal.get_run("r").status == "failed"  # type: ignore[union-attr]
