"""pydantic-ai ``message_history`` kept by the user: the rule docs/framework-state.md states.

The user's store owns the conversation before a run; the run's new messages
go back to the store only after ``run.finish``. A store written by an
attempt that did not finish gives the resumed run a longer history than its
journal: the resume raises ``DivergenceError`` and asks the model nothing; the
error names the grown history and says to put the store back and write it
only after ``run.finish``.
Following the advice (the store as the run started) the run resumes and
finishes, the email sent once. The crash-at-every-boundary version is the
``pydantic-history`` row of the conformance matrix.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, HoldingServer, chat, serve
from tests.sdkserver import Reply

BUSY = Reply(status=503, body={"error": {"message": "overloaded", "type": "server_error"}})


@pytest.fixture
def server() -> Iterator[HoldingServer]:
    with serve() as running:
        yield running


def test_a_history_stored_before_finish_is_refused_and_the_advice_resumes(
    server: HoldingServer, tmp_path: Path
) -> None:
    need("pydantic")
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from tests.integrations import matrix_drivers, matrix_more

    job = {
        "base_url": server.url + "/v1",
        "effects": str(tmp_path / "effects.log"),
        "workdir": str(tmp_path),
        "scenario": "pydantic-history",
    }
    store = tmp_path / "history.json"
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    server.add(chat(False), BUSY)

    async def attempt() -> Any:
        history = matrix_more._history(store)
        async with redrive.run(journal, "ticket-7") as run:
            agent = matrix_drivers._pydantic_agent(job)
            try:
                result = await agent.run("Email Ada.", message_history=history)
            finally:
                await agent.model.client.close()  # no socket left to the collector
            return run.finish(result.output)

    with pytest.raises(Exception, match=r"503|overloaded"):
        asyncio.run(attempt())
    started = store.read_bytes()
    record = journal.get_run("ticket-7")
    assert record is not None and record.status not in ("failed", "succeeded")

    # the mistake: the attempt that did not finish wrote its turn to the store
    earlier = json.loads(started)
    store.write_bytes(json.dumps(earlier + earlier).encode())
    asked = len(server.requests)
    with pytest.raises(redrive.DivergenceError, match="different arguments") as caught:
        asyncio.run(attempt())
    assert len(server.requests) == asked  # the model was asked nothing
    # the error says what happened (the stored history grew) and what to do
    told = str(caught.value)
    assert "$.body.messages holds the 4 recorded items, in order, and 2 more" in told
    assert "message_history" in told and "written by an attempt of this run" in told
    assert "only after run.finish" in told

    # the advice: the store as the run started; the resume finishes, the email sent once
    store.write_bytes(started)
    server.add(chat(True))
    assert asyncio.run(attempt()) == FINAL
    assert len((tmp_path / "effects.log").read_text().splitlines()) == 1
    assert ModelMessagesTypeAdapter.validate_json(store.read_bytes())
    journal.close()
