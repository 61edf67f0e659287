"""An Agents SDK run paused for tool approval and continued from a ``RunState`` the user stored.

The SDK's human-in-the-loop pattern under one redrive run id: the first
delivery stops at a ``needs_approval`` tool and stores
``result.to_state().to_string()``; a person approves on the stored state; a
later delivery loads it and calls ``Runner.run(agent, state)``. Before, the
first block ended the run ``succeeded`` with no output and the continuation
raised ``DivergenceError`` (the tool asked where the journal has the first
model call). The state owns the history up to its pause, the journal the
continuation (redrive/integrations/_agents_state.py). The kills between the
deliveries are the matrix's ``agents-approval-state`` cells.
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
from tests.integrations.fakeapi import FINAL, chat
from tests.integrations.matrix_child import PROMPT, Effects
from tests.sdkserver import serve


@pytest.fixture(autouse=True)
def _collect_the_sdks_loops() -> Iterator[None]:
    """Finalize the loops and clients ``run_sync`` leaves behind here (see the session guard)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _agent(base_url: str, effects: Path, approval: bool = True) -> tuple[Any, Any]:
    """An agent whose ``send_email`` needs approval (if ``approval``); each email is a line."""
    import agents
    import httpx
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    from redrive.integrations.openai_agents import function_tool

    log = Effects(str(effects))

    @function_tool(restart_safe=False, recover=log.recover, needs_approval=approval)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer."""
        return log.send(to, idempotency_key)

    agents.set_tracing_disabled(True)
    # no kept-alive connections: run_sync and asyncio.run each close their own loop
    limits: Any = httpx.Limits(max_keepalive_connections=0)
    http = DefaultAsyncHttpxClient(limits=limits)
    raw = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0, http_client=http)
    model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=redrive.wrap(raw))
    return agents, agents.Agent(name="s", instructions="Help.", model=model, tools=[send_email])


def _close_the_sdks_loop() -> None:
    """Close the thread's default loop ``run_sync`` made and leaves open (it warns unclosed)."""
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = policy.get_event_loop()
        except RuntimeError:  # run_sync made none (refused before it ran)
            return
    loop.close()
    policy.set_event_loop(None)


def _deliver(
    face: str, journal: Any, run_id: str, url: str, effects: Path, store: Path, **options: Any
) -> tuple[str, Any]:
    """One delivery: continue the stored state or start; store the state of a pause."""
    agents, agent = _agent(url, effects)
    given: Any = PROMPT
    if store.exists():
        given = asyncio.run(agents.RunState.from_string(agent, store.read_text()))

    def settle(run: redrive.Run, result: Any) -> Any:
        if result.interruptions:
            store.write_text(result.to_state().to_string())
            return None
        return run.finish(result.final_output)

    if face == "sync":
        try:
            with redrive.run(journal, run_id, **options) as run:
                out = settle(run, agents.Runner.run_sync(agent, given))
        finally:
            _close_the_sdks_loop()
        return run.status, out

    async def deliver() -> tuple[str, Any]:
        async with redrive.run(journal, run_id, **options) as run:
            if face == "streamed":
                result = agents.Runner.run_streamed(agent, given)
                async for _ in result.stream_events():
                    pass
            else:
                result = await agents.Runner.run(agent, given)
            out = settle(run, result)
        return run.status, out

    return asyncio.run(deliver())


def _approve(url: str, effects: Path, store: Path) -> None:
    agents, agent = _agent(url, effects)
    state = asyncio.run(agents.RunState.from_string(agent, store.read_text()))
    for item in state.get_interruptions():
        state.approve(item)
    store.write_text(state.to_string())


@pytest.mark.parametrize("face", ["sync", "async", "streamed"])
def test_a_stored_state_continues_the_run_once(face: str, tmp_path: Path) -> None:
    """Paused, approved on the stored state, continued once; each face (``run_streamed`` too)."""
    need("agents")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects, store = tmp_path / "effects.log", tmp_path / "state.json"
    stream = face == "streamed"
    with serve() as server:
        server.add(chat(False, stream), chat(True, stream))
        url = server.url + "/v1"
        # the first delivery stops for approval: suspended, not succeeded with no output
        assert _deliver(face, journal, "hitl:1", url, effects, store) == ("suspended", None)
        assert len(server.requests) == 1 and not effects.exists()
        _approve(url, effects, store)
        status, output = _deliver(face, journal, "hitl:1", url, effects, store)
        assert (status, output) == ("succeeded", FINAL)
        assert len(server.requests) == 2
        assert len(effects.read_text().splitlines()) == 1  # the approved tool ran once
        # the finished run replays offline from the same stored state: nothing asked, nothing run
        replayed = _deliver(face, journal, "hitl:1", url, effects, store, live=False)
        assert replayed == ("succeeded", FINAL)
        assert len(server.requests) == 2 and len(effects.read_text().splitlines()) == 1
    journal.close()


def test_finish_while_paused_ends_the_run_succeeded(tmp_path: Path) -> None:
    """``run.finish`` in a block whose Agents SDK run paused ends the run ``succeeded``."""
    need("agents")
    import agents

    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(chat(False))
        _, agent = _agent(server.url + "/v1", tmp_path / "effects.log")
        with redrive.run(journal, "hitl:2") as run:
            result = agents.Runner.run_sync(agent, PROMPT)
            _close_the_sdks_loop()
            assert result.interruptions
            run.finish("asked a person")
    assert run.status == "succeeded" and run.output == "asked a person"


def test_a_state_this_run_never_paused_at_is_refused(tmp_path: Path) -> None:
    """A stored state of another pause is refused before anything is sent or run."""
    need("agents")
    import agents

    from redrive.integrations.openai_agents import ForeignRunStateError

    journal = redrive.open_journal(":memory:")
    effects, store = tmp_path / "effects.log", tmp_path / "state.json"
    with serve() as server:
        server.add(chat(False))
        url = server.url + "/v1"
        # another conversation (its own run) paused; its state is stored
        assert _deliver("sync", journal, "hitl:other", url, effects, store)[0] == "suspended"
        # this run paused too, but on a model reply with another call id
        other = chat(False)
        other.body["choices"][0]["message"]["tool_calls"][0]["id"] = "call_9"
        server.add(other)
        mine = tmp_path / "mine.json"
        assert _deliver("sync", journal, "hitl:3", url, effects, mine)[0] == "suspended"
        asked = len(server.requests)
        _approve(url, effects, store)
        _, agent = _agent(url, effects)
        state = asyncio.run(agents.RunState.from_string(agent, store.read_text()))
        with pytest.raises(ForeignRunStateError) as caught, redrive.run(journal, "hitl:3"):
            try:
                agents.Runner.run_sync(agent, state)
            finally:
                _close_the_sdks_loop()
        assert len(server.requests) == asked and not effects.exists()  # nothing sent, nothing run
    message = str(caught.value)
    assert "run 'hitl:3'" in message and "send_email (call_1)" in message
    assert "new run id" in message


def test_a_streamed_run_left_early_leaves_the_run_to_continue(tmp_path: Path) -> None:
    """A block left before its streamed run ended is ``suspended``, and the next delivery finishes.

    The consumer stops at the first event and leaves the block while the
    SDK's loop still runs in its task: the run did not finish (before, it
    ended ``succeeded`` with no output and could never be continued). The
    next delivery re-drives it to its pause, a person approves on the stored
    state, and the delivery after continues it: the tool runs once.
    """
    need("agents")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects, store = tmp_path / "effects.log", tmp_path / "state.json"
    with serve() as server:
        # by what was asked, not in order: the first attempt's request may or may not go out
        server.respond = lambda asked: chat(b'"role":"tool"' in asked.body.replace(b" ", b""), True)
        url = server.url + "/v1"
        agents, agent = _agent(url, effects)

        async def leave_early() -> str:
            async with redrive.run(journal, "hitl:early") as run:
                result = agents.Runner.run_streamed(agent, PROMPT)
                async for _ in result.stream_events():
                    break
            result.cancel()  # the SDK's loop would go on; its next step is refused anyway
            return run.status

        assert asyncio.run(leave_early()) == "suspended"
        assert not store.exists() and not effects.exists()
        paused = _deliver("streamed", journal, "hitl:early", url, effects, store)
        assert paused == ("suspended", None) and store.exists()
        _approve(url, effects, store)
        done = _deliver("streamed", journal, "hitl:early", url, effects, store)
        assert done == ("succeeded", FINAL)
        assert len(effects.read_text().splitlines()) == 1
        paid = sum(1 for f in journal.frames("hitl:early") if f.kind == "model_response")
        assert len(server.requests) <= paid + 1  # at most the call cut by leaving is asked again
    journal.close()


@pytest.mark.parametrize("mode", ["after_turn", "immediate"])
def test_a_streamed_run_cancelled_leaves_the_run_to_continue(mode: str, tmp_path: Path) -> None:
    """A streamed run cancelled in either mode is ``suspended``; the next delivery finishes it.

    openai-agents-python#574 / docs PR #2710: ``result.cancel(mode="after_turn")``
    lets the current turn finish (its tool runs) and stops before the next one:
    the SDK's loop task ends cleanly, with no final output. Before, that clean
    end was read as a finished run: the block ended it ``succeeded`` with no
    output, and the next delivery under the run id raised ``ReplayMissError``.
    """
    need("agents")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects = tmp_path / "effects.log"
    with serve() as server:
        server.respond = lambda asked: chat(b'"role":"tool"' in asked.body.replace(b" ", b""), True)
        url = server.url + "/v1"

        async def deliver(cancel: bool) -> tuple[str, Any]:
            agents, agent = _agent(url, effects, approval=False)
            async with redrive.run(journal, "hitl:cancel") as run:
                result = agents.Runner.run_streamed(agent, PROMPT)
                async for _ in result.stream_events():
                    if cancel:
                        result.cancel(mode=mode)  # and consume on, as the SDK asks
                        cancel = False
                if result.final_output is not None:
                    run.finish(result.final_output)
            return run.status, run.output

        assert asyncio.run(deliver(True)) == ("suspended", None)
        assert asyncio.run(deliver(False)) == ("succeeded", FINAL)
        sent = effects.read_text().splitlines()
        assert len(sent) == 1  # the tool of the cancelled turn is not run again
    journal.close()
