"""Public reports about signed or encrypted model output, turned into small inputs against redrive.

Each test names the report it comes from. The provider (tests/integrations/signing_api.py)
signs what it hands out and answers its own 400 when the next request sends it
back altered, dropped or out of place. The shape of each test: the loop's
model call is recorded, a later call fails on a transient 503 (the run is
paused), the same run id is delivered again (the recorded call replayed from
the journal, the next one sent live and checked by the provider), then the
finished run is replayed offline. Invariant 16: what the loop received live,
it receives on replay, so what it sends back is accepted.
"""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.integrations import signing_api as api
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL
from tests.integrations.matrix_child import PROMPT, Effects
from tests.integrations.test_agents_run_state import _close_the_sdks_loop
from tests.sdkserver import Reply, serve

BUSY = Reply(status=503, body={"error": {"message": "overloaded", "type": "server_error"}})


@pytest.fixture(autouse=True)
def _collect_the_sdks_loops() -> Iterator[None]:
    """Finalize the loops and clients the SDKs leave behind here (see the session guard)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _sent_reasoning(body: bytes) -> list[dict[str, Any]]:
    return [i for i in json.loads(body)["input"] if i.get("type") == "reasoning"]


# --- openai/openai-agents-python#919, #2068; openai/openai-agents-js#326 -------------------------


def _agents_responses(url: str, effects: Path) -> tuple[Any, Any]:
    """An Agents SDK agent on the Responses API, ``store=False``, asking for encrypted reasoning."""
    import agents
    import httpx
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient
    from openai.types.shared import Reasoning

    from redrive.integrations.openai_agents import function_tool

    log = Effects(str(effects))

    @function_tool(restart_safe=False, recover=log.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer."""
        return log.send(to, idempotency_key)

    agents.set_tracing_disabled(True)
    limits: Any = httpx.Limits(max_keepalive_connections=0)
    raw = AsyncOpenAI(
        base_url=url,
        api_key="sk-test",
        max_retries=0,
        http_client=DefaultAsyncHttpxClient(limits=limits),
    )
    model = agents.OpenAIResponsesModel(model="o4-mini", openai_client=redrive.wrap(raw))
    settings = agents.ModelSettings(
        store=False,
        reasoning=Reasoning(effort="low", summary="auto"),
        response_include=["reasoning.encrypted_content"],
    )
    agent = agents.Agent(
        name="s", instructions="Help.", model=model, model_settings=settings, tools=[send_email]
    )
    return agents, agent


def _deliver_agent(
    face: str, journal: Any, run_id: str, url: str, effects: Path, **options: Any
) -> Any:
    agents, agent = _agents_responses(url, effects)
    if face == "sync":
        try:
            with redrive.run(journal, run_id, **options) as run:
                return run.finish(agents.Runner.run_sync(agent, PROMPT).final_output)
        finally:
            _close_the_sdks_loop()

    async def deliver() -> Any:
        async with redrive.run(journal, run_id, **options) as run:
            if face == "streamed":
                result = agents.Runner.run_streamed(agent, PROMPT)
                async for _ in result.stream_events():
                    pass
            else:
                result = await agents.Runner.run(agent, PROMPT)
            return run.finish(result.final_output)

    return asyncio.run(deliver())


@pytest.mark.parametrize("face", ["sync", "async", "streamed"])
def test_a_resumed_agents_run_sends_the_replayed_encrypted_reasoning_back_intact(
    face: str, tmp_path: Path
) -> None:
    """openai/openai-agents-python#919 (reasoning with ``store=False`` needs the encrypted
    content), #2068 (reasoning items replayed from storage), openai/openai-agents-js#326
    ("Item 'rs_...' of type 'reasoning' was provided without its required following item")."""
    need("agents")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects = tmp_path / "effects.log"
    stream = face == "streamed"
    with serve() as server:
        server.add(api.reasoned(False, stream), BUSY, api.reasoned(True, stream))
        url = server.url + "/v1"
        with pytest.raises(Exception, match=r"503|overloaded"):
            _deliver_agent(face, journal, "rs:1", url, effects)
        record = journal.get_run("rs:1")
        assert record is not None and record.status == "paused"
        # the same run again: the first turn replayed, its reasoning item sent back live
        assert _deliver_agent(face, journal, "rs:1", url, effects) == FINAL
        assert len(server.requests) == 3
        assert _sent_reasoning(server.requests[2].body) == _sent_reasoning(server.requests[1].body)
        assert _sent_reasoning(server.requests[2].body)[0]["encrypted_content"] == api.BLOB
        # the finished run replayed offline: nothing sent, the email sent once
        assert _deliver_agent(face, journal, "rs:1", url, effects, live=False) == FINAL
        assert len(server.requests) == 3
    assert len(effects.read_text().splitlines()) == 1
    journal.close()


# --- pydantic/pydantic-ai#7185, #4608 -----------------------------------------------------------


def _pydantic_responses(url: str, effects: Path) -> Any:
    """A pydantic-ai agent on the Responses API with a reasoning model (encrypted reasoning on)."""
    import httpx
    import pydantic_ai
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from redrive.integrations.pydantic_ai import tool

    log = Effects(str(effects))

    @tool(restart_safe=False, recover=log.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer."""
        return log.send(to, idempotency_key)

    limits: Any = httpx.Limits(max_keepalive_connections=0)
    raw = AsyncOpenAI(
        base_url=url,
        api_key="sk-test",
        max_retries=0,
        http_client=DefaultAsyncHttpxClient(limits=limits),
    )
    model = OpenAIResponsesModel(
        "o4-mini", provider=OpenAIProvider(openai_client=redrive.wrap(raw))
    )
    return pydantic_ai.Agent(model, instructions="Help.", tools=[send_email])


def _thinking(messages: list[Any]) -> list[tuple[Any, ...]]:
    from pydantic_ai.messages import ModelResponse, ThinkingPart

    return [
        (part.id, part.content, part.signature, part.provider_name)
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ThinkingPart)
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
def test_pydantic_ai_history_from_a_replayed_run_continues_with_its_encrypted_reasoning(
    stream: bool, tmp_path: Path
) -> None:
    """pydantic/pydantic-ai#7185 (a streamed run's ``new_messages()`` as the next run's history
    fails with ``invalid_encrypted_content``), #4608 (the encrypted content is bound to its
    origin: it must come back as issued)."""
    need("pydantic")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects = tmp_path / "effects.log"

    def deliver(run_id: str, history: Any = None, **options: Any) -> list[Any]:
        agent = _pydantic_responses(url, effects)

        async def go() -> list[Any]:
            async with redrive.run(journal, run_id, **options) as run:
                if stream:
                    async with agent.run_stream(PROMPT, message_history=history) as streamed:
                        output = await streamed.get_output()
                        messages = streamed.new_messages()
                else:
                    result = await agent.run(PROMPT, message_history=history)
                    output, messages = result.output, result.new_messages()
                run.finish(output)
                assert output == FINAL
                return list(messages)

        return asyncio.run(go())

    with serve() as server:
        server.add(api.reasoned(False, stream), BUSY, api.reasoned(True, stream))
        url = server.url + "/v1"
        with pytest.raises(Exception, match=r"503|overloaded"):
            deliver("pa:1")
        live = deliver("pa:1")  # the first turn replayed, its reasoning sent back and checked
        assert len(server.requests) == 3
        assert _thinking(live) == [("rs_1", api.SUMMARY, api.BLOB, "openai")]
        replayed = deliver("pa:1", live=False)
        assert len(server.requests) == 3 and _thinking(replayed) == _thinking(live)
        # the replayed run's history continues: the provider verifies its reasoning item
        server.add(api.reasoned(True, stream))
        deliver("pa:2", history=replayed)
        assert len(server.requests) == 4
        assert _sent_reasoning(server.requests[3].body)[0]["encrypted_content"] == api.BLOB
    assert len(effects.read_text().splitlines()) == 1
    journal.close()


# --- pydantic/pydantic-ai#7597, #5532; anthropics/anthropic-sdk-python#1598 ---------------------


def _pydantic_anthropic(url: str, effects: Path) -> Any:
    """A pydantic-ai agent on Anthropic with extended thinking (it streams its requests)."""
    import httpx
    import pydantic_ai
    from anthropic import AsyncAnthropic, DefaultAsyncHttpxClient
    from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from redrive.integrations.pydantic_ai import tool

    log = Effects(str(effects))

    @tool(restart_safe=False, recover=log.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an email to a customer."""
        return log.send(to, idempotency_key)

    limits: Any = httpx.Limits(max_keepalive_connections=0)
    raw = AsyncAnthropic(
        base_url=url,
        api_key="sk-ant-test",
        max_retries=0,
        http_client=DefaultAsyncHttpxClient(limits=limits),
    )
    model = AnthropicModel(
        "claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=redrive.wrap(raw))
    )
    settings = AnthropicModelSettings(anthropic_thinking={"type": "enabled", "budget_tokens": 1024})
    return pydantic_ai.Agent(
        model, instructions="Help.", tools=[send_email], model_settings=settings
    )


def test_a_thinking_stream_cut_mid_block_is_asked_again_and_its_signature_sent_back_whole(
    tmp_path: Path,
) -> None:
    """pydantic/pydantic-ai#7597 (a stream interrupted mid-thinking leaves ``signature=""``; the
    saved history then gets ``400 Invalid signature in thinking block`` forever), #5532 (the same
    through an aborted UI stream), anthropics/anthropic-sdk-python#1598 (blocks re-serialized
    between the response and the next request)."""
    need("pydantic")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects = tmp_path / "effects.log"
    first = api.thought(False, stream=True)
    cut = Reply(chunks=first.chunks, cut_after=3)  # message_start, the block's start, one delta

    def deliver(**options: Any) -> Any:
        agent = _pydantic_anthropic(url, effects)

        async def go() -> Any:
            async with redrive.run(journal, "th:1", **options) as run:
                return run.finish((await agent.run(PROMPT)).output)

        return asyncio.run(go())

    with serve() as server:
        server.add(cut, first, api.thought(True, stream=True))
        url = server.url
        with pytest.raises(Exception):  # noqa: B017 - the SDK's error for a dropped connection
            deliver()
        record = journal.get_run("th:1")
        assert record is not None and record.status == "paused"
        # the cut turn was not kept: the same run asks it again, live, and goes on
        assert deliver() == FINAL
        assert len(server.requests) == 3 and server.requests[1].body == server.requests[0].body
        assert deliver(live=False) == FINAL
        assert len(server.requests) == 3
    assert len(effects.read_text().splitlines()) == 1
    journal.close()


# --- BerriAI/litellm#8961; openai/openai-agents-python#4155 --------------------------------------


# litellm's stream chunks make pydantic build a schema over litellm's TypedDicts
# (``ReadOnly`` items) the first time in a process; the warning it gives is a matter between
# those two packages, raised as an error under ``filterwarnings = error`` (litellm then
# reports it as a mid-stream APIConnectionError), as in test_provider_outage.py
@pytest.mark.filterwarnings("ignore:.* using the `ReadOnly` qualifier:UserWarning")
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
def test_litellm_thinking_blocks_replayed_go_back_to_anthropic_unchanged(
    stream: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BerriAI/litellm#8961 (thinking blocks, signatures included, passed back to Anthropic in
    function calling), openai/openai-agents-python#4155 (a signature-only ``thinking`` block and
    a ``redacted_thinking`` block must replay unchanged in the tool-use continuation). litellm
    calls Anthropic through its own httpx client (an aiohttp transport), handed in as
    ``client=`` with that client wrapped by ``redrive.wrap``."""
    need("litellm")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    from tests.integrations.matrix_bare import SCHEMA

    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects = Effects(str(tmp_path / "effects.log"))

    @redrive.tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        return effects.send(to, idempotency_key)

    def deliver(**options: Any) -> Any:
        handler = AsyncHTTPHandler()
        redrive.wrap(handler.client, provider="anthropic")

        async def ask(messages: list[dict[str, Any]]) -> Any:
            asked = {
                "model": "anthropic/claude-sonnet-4-5",
                "messages": messages,
                "tools": [SCHEMA],
                "api_base": url,
                "api_key": "sk-ant-test",
                "client": handler,
                "thinking": {"type": "enabled", "budget_tokens": 1024},
            }
            if not stream:
                return (await litellm.acompletion(**asked)).choices[0].message
            chunks = [chunk async for chunk in await litellm.acompletion(stream=True, **asked)]
            return litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message

        async def go() -> Any:
            async with redrive.run(journal, "ll:1", **options) as run:
                messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
                try:
                    while (message := await ask(messages)).tool_calls:
                        messages.append(message.model_dump(exclude_none=True))
                        for call in message.tool_calls:
                            sent = send_email(**json.loads(call.function.arguments))
                            messages.append(
                                {"role": "tool", "tool_call_id": call.id, "content": sent}
                            )
                    return run.finish(message.content)
                finally:
                    await handler.close()

        return asyncio.run(go())

    with serve() as server:
        server.add(api.thought(False, stream), BUSY, api.thought(True, stream))
        url = server.url
        with pytest.raises(Exception, match=r"503|overloaded"):
            deliver()
        assert deliver() == FINAL  # the first turn replayed, its thinking blocks sent back
        assert len(server.requests) == 3
        assert deliver(live=False) == FINAL
        assert len(server.requests) == 3
    assert len(effects.path and Path(effects.path).read_text().splitlines()) == 1
    journal.close()


# --- langchain-ai/langchain#37347 (Gemini thought signatures over the OpenAI endpoint) ----------


@pytest.mark.parametrize(
    ("face", "stream"), [("sync", False), ("sync", True), ("async", False), ("async", True)]
)
def test_gemini_thought_signatures_replayed_go_back_on_their_tool_calls(
    face: str, stream: bool, tmp_path: Path
) -> None:
    """langchain-ai/langchain#37347 ("ChatOpenAI fails to provide thought signatures on
    multi-turn conversations when used with Gemini models"), crmne/ruby_llm#591: Gemini's
    OpenAI-compatible endpoint puts the signature on each tool call
    (``extra_content.google.thought_signature``) and refuses a function call sent back without
    it. The loop is the bare OpenAI SDK's (langchain-openai 1.8 drops the field itself, with or
    without redrive)."""
    from openai import AsyncOpenAI, OpenAI

    from tests.integrations.matrix_bare import SCHEMA

    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects = Effects(str(tmp_path / "effects.log"))

    @redrive.tool(restart_safe=False, recover=effects.recover)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        return effects.send(to, idempotency_key)

    def turn(message: Any, messages: list[dict[str, Any]]) -> Any:
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            sent = send_email(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": sent})
        return None

    asked: dict[str, Any] = {"model": "gemini-3-pro-preview", "tools": [SCHEMA]}

    def deliver(**options: Any) -> Any:
        base = url + "/v1beta/openai/"
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
        if face == "sync":
            client = redrive.wrap(OpenAI(base_url=base, api_key="k", max_retries=0))
            with redrive.run(journal, "gm:1", **options) as run:
                while True:
                    if stream:
                        with client.chat.completions.stream(messages=messages, **asked) as s:
                            message = s.get_final_completion().choices[0].message
                    else:
                        reply = client.chat.completions.create(messages=messages, **asked)
                        message = reply.choices[0].message
                    if (done := turn(message, messages)) is not None:
                        return run.finish(done)

        async def go() -> Any:
            aclient = redrive.wrap(AsyncOpenAI(base_url=base, api_key="k", max_retries=0))
            async with redrive.run(journal, "gm:1", **options) as run:
                while True:
                    if stream:
                        async with aclient.chat.completions.stream(messages=messages, **asked) as s:
                            message = (await s.get_final_completion()).choices[0].message
                    else:
                        reply = await aclient.chat.completions.create(messages=messages, **asked)
                        message = reply.choices[0].message
                    if (done := turn(message, messages)) is not None:
                        return run.finish(done)

        return asyncio.run(go())

    with serve() as server:
        server.add(api.gemini_chat(False, stream), BUSY, api.gemini_chat(True, stream))
        url = server.url
        with pytest.raises(Exception, match=r"503|overloaded"):
            deliver()
        assert deliver() == FINAL  # the signed tool call replayed, sent back, checked
        assert len(server.requests) == 3
        assert deliver(live=False) == FINAL
        assert len(server.requests) == 3
    assert len(Path(effects.path).read_text().splitlines()) == 1
    journal.close()


def test_a_session_resumed_holds_the_encrypted_reasoning_once_and_the_next_run_sends_it(
    tmp_path: Path,
) -> None:
    """openai/openai-agents-python#2068 (reasoning items saved to a session and sent back by a
    later run), openai/openai-agents-js#929 ("Item 'rs_...' of type 'reasoning' was provided
    without its required following item" after several turns of a stored conversation)."""
    need("agents")
    import agents

    from redrive.integrations.openai_agents import RecordedSession

    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects, db = tmp_path / "effects.log", str(tmp_path / "chats.db")

    def deliver(run_id: str, said: str, **options: Any) -> Any:
        _, agent = _agents_responses(url, effects)
        session = RecordedSession(agents.SQLiteSession("conv-1", db))

        async def go() -> Any:
            async with redrive.run(journal, run_id, **options) as run:
                result = await agents.Runner.run(agent, said, session=session)
                return run.finish(result.final_output)

        return asyncio.run(go())

    def stored() -> list[dict[str, Any]]:
        return list(asyncio.run(agents.SQLiteSession("conv-1", db).get_items()))

    with serve() as server:
        server.add(api.reasoned(False), BUSY, api.reasoned(True))
        url = server.url + "/v1"
        with pytest.raises(Exception, match=r"503|overloaded"):
            deliver("rs:1", PROMPT)
        assert deliver("rs:1", PROMPT) == FINAL
        reasoning = [item for item in stored() if item.get("type") == "reasoning"]
        assert [item.get("encrypted_content") for item in reasoning] == [api.BLOB]
        # the next message of the conversation sends the stored reasoning back, checked
        server.add(api.reasoned(True))
        assert deliver("rs:2", "Thanks. Anything else?") == FINAL
        assert len(server.requests) == 4
        assert _sent_reasoning(server.requests[3].body) == _sent_reasoning(server.requests[2].body)
        assert deliver("rs:2", "Thanks. Anything else?", live=False) == FINAL
        assert len(server.requests) == 4
    assert len(effects.read_text().splitlines()) == 1
    journal.close()
