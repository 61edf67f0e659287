"""A brief model outage leaves the run resumable through every integration (issue 27, 7 and 3).

Before, a connection error, 503 or 429 raised through pydantic-ai (or litellm)
ended the run ``failed``: the framework raises its own error *from* the SDK's,
and the run read only the outermost exception, so the redelivered job got
``TerminalRunError`` with the email sent and the answer never given.

For each integration (the bare OpenAI and Anthropic SDKs, the OpenAI Agents
SDK, pydantic-ai, LangGraph on ``ChatOpenAI``, litellm), each face (sync and
async) and each fault of a brief outage (a dropped connection, 429, 503, 529
overloaded, a timeout), with the real packages against a scripted server: the
model asks for ``send_email`` (a line in a file outside the loop), then the
next model call fails. The run is left resumable (``running``, not
``failed``); once the server recovers, a second attempt with the same run id
finishes, replaying the first model call and the tool (one request goes out,
the email is not sent again). The control: a permanent error (400, 401) ends
the run ``failed``, and a redelivery gets ``TerminalRunError`` without calling
the model or the tool again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive.storage import Journal
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, HoldingServer
from tests.integrations.outage import FAULTS, LOOPS, PERMANENT, TURNS, fault, serve

#: litellm imports some of its modules at its first call; pydantic warns about one of their
#: TypedDicts (``ReadOnly`` items), a matter between those two packages
pytestmark = pytest.mark.filterwarnings("ignore:.* using the `ReadOnly` qualifier:UserWarning")

RUN_ID = "support:outage"
FACES = ("sync", "async")


def _attempt(
    journal: Journal, loop: Callable[[str, str], Any], face: str, url: str, log: Path
) -> Any:
    """One delivery of the job: the loop inside ``redrive.run`` on the given face."""
    if face == "async":

        async def main() -> Any:
            async with redrive.run(journal, RUN_ID, input={"job": 1}) as run:
                return run.finish(await loop(url, str(log)))

        return asyncio.run(main())
    with redrive.run(journal, RUN_ID, input={"job": 1}) as run:
        return run.finish(loop(url, str(log)))


def _status(journal: Journal) -> str:
    record = journal.get_run(RUN_ID)
    assert record is not None
    return record.status


def _emails(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _loop(integration: str, face: str) -> tuple[Callable[[str, str], Any], bool]:
    family, sync_loop, async_loop, anthropic = LOOPS[integration]
    if family:
        need(family)
    return (async_loop if face == "async" else sync_loop), anthropic


def _first_delivery(
    integration: str, face: str, fault_kind: str, server: HoldingServer, journal: Journal, log: Path
) -> tuple[Callable[[str, str], Any], str, BaseException]:
    """The tool call goes through, then ``fault_kind`` ends the attempt; returns what it raised."""
    loop, anthropic = _loop(integration, face)
    first, _last = TURNS[anthropic]
    server.add(first, fault(fault_kind, anthropic))
    with pytest.raises(Exception) as failed:
        _attempt(journal, loop, face, server.url + "/v1", log)
    raised = f"{type(failed.value).__name__}: {failed.value}"
    assert _emails(log) == ["email to ada@example.com"], raised
    assert server.count() == 2, raised  # the tool call, then the failed call (no SDK retries)
    return loop, raised, failed.value


@pytest.mark.parametrize("fault_kind", FAULTS)
@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("integration", sorted(LOOPS))
def test_a_brief_outage_leaves_the_run_resumable_and_the_next_delivery_finishes(
    integration: str, face: str, fault_kind: str, tmp_path: Path
) -> None:
    """The call after the tool fails transiently: paused (a 429 as a rate limit, through
    every framework's own error); the retry finishes, emails once."""
    log, journal = tmp_path / "emails.log", redrive.open_journal(":memory:")
    with serve() as server:
        loop, raised, error = _first_delivery(integration, face, fault_kind, server, journal, log)
        assert not isinstance(error, redrive.ReplayError), raised
        assert _status(journal) == "paused", raised  # resumable, with why
        pause = redrive.paused_reason(journal, RUN_ID)
        kind = "rate_limit" if fault_kind == "429" else "retries_exhausted"
        assert pause is not None and pause.kind == kind and pause.retry, (pause, raised)

        server.add(TURNS[LOOPS[integration][3]][1])  # the provider is back: the final answer
        assert _attempt(journal, loop, face, server.url + "/v1", log) == FINAL
        assert server.count() == 3  # only the failed call is asked again
    assert _status(journal) == "succeeded"
    assert _emails(log) == ["email to ada@example.com"]  # the side effect ran once


@pytest.mark.parametrize("status", PERMANENT)
@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("integration", sorted(LOOPS))
def test_a_permanent_provider_error_still_ends_the_run_failed(
    integration: str, face: str, status: str, tmp_path: Path
) -> None:
    """The control: a 400 is the request's answer; the redelivery is refused, nothing re-runs."""
    log, journal = tmp_path / "emails.log", redrive.open_journal(":memory:")
    with serve() as server:
        loop, raised, _error = _first_delivery(integration, face, status, server, journal, log)
        assert _status(journal) == "failed", raised
        with pytest.raises(redrive.TerminalRunError):
            _attempt(journal, loop, face, server.url + "/v1", log)
        assert server.count() == 2
    assert _emails(log) == ["email to ada@example.com"]
