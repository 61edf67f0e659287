"""redrive's own errors reach the caller of a wrapped SDK client as themselves, at once.

The Anthropic SDK wraps every exception its transport raises (retrying
first) into ``APIConnectionError``; the OpenAI SDK passes them through. Either
way a ``ReplayMissError`` or ``DivergenceError`` of a replay-only run reaches
the caller as itself, after one step lookup and no retry (issue 16, item 7).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

import redrive
from redrive.errors import DivergenceError, ReplayMissError
from redrive.recorders._recorder import HttpRecorder
from redrive.storage import Journal
from tests.sdkserver import Reply, ScriptServer, serve
from tests.unit.test_sdk_anthropic import MESSAGE
from tests.unit.test_sdk_openai import CHAT

SDKS = ("anthropic", "openai")
FACES = ("sync", "async")
_RUN_IDS = itertools.count()


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serve() as srv:
        yield srv


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the model steps the wrapped clients looked up, in order."""
    seen: list[str] = []
    begin, abegin = HttpRecorder.begin, HttpRecorder.abegin

    def counted(self: HttpRecorder, run: Any, request: Any) -> Any:
        seen.append(str(request.url))
        return begin(self, run, request)

    async def acounted(self: HttpRecorder, run: Any, request: Any) -> Any:
        seen.append(str(request.url))
        return await abegin(self, run, request)

    monkeypatch.setattr(HttpRecorder, "begin", counted)
    monkeypatch.setattr(HttpRecorder, "abegin", acounted)
    return seen


def _client(sdk: str, url: str, face: str) -> Any:
    """A wrapped client with the SDK's default retry budget (it retries what it catches)."""
    if sdk == "anthropic":
        cls: Any = anthropic.AsyncAnthropic if face == "async" else anthropic.Anthropic
        return redrive.wrap(cls(api_key="sk-ant-test", base_url=url))
    cls = openai.AsyncOpenAI if face == "async" else openai.OpenAI
    return redrive.wrap(cls(api_key="sk-test", base_url=url + "/v1"))


def _call(client: Any, sdk: str, prompt: str) -> Any:
    messages = [{"role": "user", "content": prompt}]
    if sdk == "anthropic":
        return client.messages.create(model="claude-test-model", max_tokens=10, messages=messages)
    return client.chat.completions.create(model="gpt-4o", messages=messages)


def attempt(
    server: ScriptServer,
    journal: Journal,
    sdk: str,
    face: str,
    run_id: str,
    *prompts: str,
    **options: Any,
) -> BaseException | None:
    """Run ``run_id`` once, one model call per prompt; return what was raised, or None."""
    if face == "sync":
        client = _client(sdk, server.url, face)
        try:
            with redrive.run(journal, run_id, **options):
                for prompt in prompts:
                    _call(client, sdk, prompt)
        except BaseException as exc:
            return exc
        finally:
            client.close()
        return None

    async def main() -> BaseException | None:
        client = _client(sdk, server.url, face)
        try:
            async with redrive.run(journal, run_id, **options):
                for prompt in prompts:
                    await _call(client, sdk, prompt)
        except BaseException as exc:
            return exc
        finally:
            await client.close()
        return None

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("prompts", "expected", "looked_up"),
    [
        (("hi", "again"), ReplayMissError, 2),  # the recorded call, then the unrecorded one
        (("hello",), DivergenceError, 1),  # the recorded call, drifted
    ],
    ids=["unrecorded", "drifted"],
)
@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("sdk", SDKS)
def test_replay_errors_reach_the_caller_as_themselves_at_once(
    server: ScriptServer,
    lookups: list[str],
    sdk: str,
    face: str,
    prompts: tuple[str, ...],
    expected: type[BaseException],
    looked_up: int,
) -> None:
    """Replay-only: an unrecorded call (ReplayMissError) or a drift (DivergenceError), no retry."""
    journal = redrive.open_journal(":memory:")
    run_id = f"r{next(_RUN_IDS)}"
    server.add(Reply(body=MESSAGE if sdk == "anthropic" else CHAT))
    assert attempt(server, journal, sdk, face, run_id, "hi") is None
    del lookups[:]
    error = attempt(server, journal, sdk, face, run_id, *prompts, live=False)
    assert type(error) is expected
    assert len(lookups) == looked_up  # each step looked up once: the SDK did not retry
    assert len(server.requests) == 1


@pytest.mark.parametrize("face", FACES)
def test_a_plain_transport_raises_replay_errors_as_themselves(face: str) -> None:
    """Without an SDK entry to turn them back, the transport raises ReplayErrors unwrapped."""
    import httpx2

    from redrive.recorders.http import RecordingTransport

    transport: Any = RecordingTransport(
        httpx2.MockTransport(lambda request: httpx2.Response(200, json={})),
        HttpRecorder(provider="api"),
    )
    journal = redrive.open_journal(":memory:")
    with redrive.run(journal, "r1"):
        pass  # a recorded run without steps
    if face == "sync":
        with pytest.raises(ReplayMissError), redrive.run(journal, "r1", live=False):
            httpx2.Client(transport=transport).post("http://api.test/x", json={})
        return

    async def main() -> None:
        async with redrive.run(journal, "r1", live=False):
            await httpx2.AsyncClient(transport=transport).post("http://api.test/x", json={})

    with pytest.raises(ReplayMissError):
        asyncio.run(main())
