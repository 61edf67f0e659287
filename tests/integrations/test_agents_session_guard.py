"""A bare Agents SDK session under a redrive run is refused when the run starts, not at resume.

Issue 27, failure 1: a ``SQLiteSession`` under a run that is killed and
resumed sends its stored items plus the input again (``DivergenceError`` at
the resume, after the first attempt paid and acted). The Runner's calls pass
through redrive's :class:`~redrive.integrations._agents_runner.SessionGuard`:
under a run, a session redrive does not own is refused before any model
call, on every face (``run``, ``run_sync``, ``run_streamed``), and the store is
left untouched; a ``RecordedSession`` runs; outside a run a bare session runs.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.integrations.conftest import need
from tests.sdkserver import Reply, serve

ANSWER = "Hello there."


@pytest.fixture(autouse=True)
def _collect_the_sdks_loops() -> Iterator[None]:
    """Finalize the event loops and clients the SDK's ``run_sync`` leaves behind, here.

    Left to a later garbage collection, their ``__del__`` (a ResourceWarning) can run
    inside CPython 3.11's AST constructor while pytest rewrites a module another test
    imports, which then fails with "AST constructor recursion depth mismatch".
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _chat() -> Reply:
    return Reply(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    )


def _agent(base_url: str) -> Any:
    import agents
    import httpx
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    agents.set_tracing_disabled(True)
    # no kept-alive connections: run_sync and asyncio.run each close their own loop
    http = DefaultAsyncHttpxClient(limits=httpx.Limits(max_keepalive_connections=0))
    raw = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0, http_client=http)
    model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=redrive.wrap(raw))
    return agents.Agent(name="a", instructions="Be brief.", model=model)


@pytest.mark.parametrize("face", ["run", "run_sync", "run_streamed"])
def test_a_bare_session_is_refused_before_any_model_call(face: str, tmp_path: Path) -> None:
    need("agents")
    import agents

    from redrive.integrations.openai_agents import UnrecordedSessionError

    session = agents.SQLiteSession("conv-1", str(tmp_path / "conv.db"))
    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(_chat())
        agent = _agent(server.url + "/v1")

        async def streamed() -> Any:
            result = agents.Runner.run_streamed(agent, "hi", session=session)
            async for _ in result.stream_events():
                pass
            return result.final_output

        with pytest.raises(UnrecordedSessionError) as caught, redrive.run(journal, "conv:bare"):
            if face == "run":
                asyncio.run(agents.Runner.run(agent, "hi", session=session))
            elif face == "run_sync":
                agents.Runner.run_sync(agent, "hi", session=session)
            else:
                asyncio.run(streamed())
        assert server.requests == []  # nothing was sent
    assert asyncio.run(session.get_items()) == []  # nothing was stored
    message = str(caught.value)
    assert "run 'conv:bare'" in message and "SQLiteSession" in message
    assert "RecordedSession" in message
    # the advice, followed: the same run id with the session wrapped runs
    from redrive.integrations.openai_agents import RecordedSession

    with serve() as server:
        server.add(_chat())
        agent = _agent(server.url + "/v1")
        with redrive.run(journal, "conv:bare") as run:
            result = agents.Runner.run_sync(agent, "hi", session=RecordedSession(session))
            run.finish(result.final_output)
        assert len(server.requests) == 1
    assert result.final_output == ANSWER
    assert [i.get("role") for i in asyncio.run(session.get_items())] == ["user", "assistant"]


def test_outside_a_run_a_bare_session_is_the_sdks(tmp_path: Path) -> None:
    need("agents")
    import agents

    session = agents.SQLiteSession("conv-2", str(tmp_path / "conv.db"))
    with serve() as server:
        server.add(_chat())
        agent = _agent(server.url + "/v1")
        result = agents.Runner.run_sync(agent, "hi", session=session)
    assert result.final_output == ANSWER
    assert len(asyncio.run(session.get_items())) == 2
