"""Streams that fail in-band or end early, through the real SDKs (sync and async faces).

An SSE stream that carries an error after its ``200`` is classified as the
same error sent as an HTTP status: a transient one (overloaded, rate limit,
server error) is not a finished step (not journaled; the exception the loop
gets carries ``retryable = True``; a resume asks again), a permanent one is
recorded and replays as the same SDK exception. A stream the server ends
without its final event is not a finished step either.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.recorders._provider import stream_error
from redrive.recorders._sse import parse_event
from redrive.storage import Journal
from tests.sdkserver import Reply, ScriptServer, serve
from tests.unit.test_sdk_anthropic import MESSAGES as ANTHROPIC_MESSAGES
from tests.unit.test_sdk_anthropic import STREAM as ANTHROPIC_STREAM
from tests.unit.test_sdk_openai import MESSAGES as CHAT_MESSAGES
from tests.unit.test_sdk_openai import STREAM as CHAT_STREAM

APIS = ("anthropic", "chat", "responses")
FACES = ("sync", "async")
_RUN_IDS = itertools.count()


def _responses_event(kind: str, seq: int, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': seq, **data})}\n\n"


_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "gpt-4o",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "status": "in_progress",
    "error": None,
}
_MESSAGE_ITEM = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress"}
RESPONSES_STREAM = [
    _responses_event("response.created", 0, response=_RESPONSE),
    _responses_event("response.in_progress", 1, response=_RESPONSE),
    _responses_event(
        "response.output_text.delta",
        2,
        item_id="msg_1",
        output_index=0,
        content_index=0,
        delta="Hel",
        logprobs=[],
    ),
    _responses_event(
        "response.output_text.delta",
        3,
        item_id="msg_1",
        output_index=0,
        content_index=0,
        delta="lo",
        logprobs=[],
    ),
    _responses_event(
        "response.completed",
        4,
        response={
            **_RESPONSE,
            "status": "completed",
            "output": [
                {
                    **_MESSAGE_ITEM,
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
                }
            ],
        },
    ),
]
#: Each API's complete stream; the events before its final one are the body.
STREAMS = {"anthropic": ANTHROPIC_STREAM, "chat": CHAT_STREAM, "responses": RESPONSES_STREAM}


def _error_event(api: str, kind: str, seq: int, *, failed: bool = False) -> str:
    """The API's in-band error event of type (or code) ``kind``, in its documented form."""
    if api == "anthropic":
        error = {"type": "error", "error": {"type": kind, "message": f"{kind} happened"}}
        return f"event: error\ndata: {json.dumps(error)}\n\n"
    if api == "chat":
        return f"data: {json.dumps({'error': {'type': kind, 'message': f'{kind} happened'}})}\n\n"
    if failed:
        response = {**_RESPONSE, "status": "failed", "error": {"code": kind, "message": "failed"}}
        return _responses_event("response.failed", seq, response=response)
    return _responses_event("error", seq, code=kind, message=f"{kind} happened", param=None)


#: In-band error kinds of each API: (kind, transient).
KINDS = {
    "anthropic": [
        ("overloaded_error", True),
        ("rate_limit_error", True),
        ("api_error", True),
        ("invalid_request_error", False),
        ("permission_error", False),
    ],
    "chat": [
        ("server_error", True),
        ("rate_limit_exceeded", True),
        ("invalid_request_error", False),
    ],
    "responses": [
        ("server_error", True),
        ("rate_limit_exceeded", True),
        ("invalid_prompt", False),
    ],
}


def _client(api: str, url: str, face: str) -> Any:
    if api == "anthropic":
        cls: Any = anthropic.AsyncAnthropic if face == "async" else anthropic.Anthropic
        return redrive.wrap(cls(api_key="sk-ant-test", base_url=url, max_retries=0))
    cls = openai.AsyncOpenAI if face == "async" else openai.OpenAI
    return redrive.wrap(cls(api_key="sk-test", base_url=url + "/v1", max_retries=0))


def _create(client: Any, api: str) -> Any:
    if api == "anthropic":
        return client.messages.create(
            model="claude-test-model", max_tokens=100, messages=ANTHROPIC_MESSAGES, stream=True
        )
    if api == "chat":
        return client.chat.completions.create(model="gpt-4o", messages=CHAT_MESSAGES, stream=True)
    return client.responses.create(model="gpt-4o", input="hi", stream=True)


class Attempt:
    """What one attempt of a run that makes one streamed call saw."""

    def __init__(self) -> None:
        self.events: list[Any] | None = None
        self.error: BaseException | None = None
        self.live_steps = -1


def attempt(
    server: ScriptServer,
    journal: Journal,
    api: str,
    face: str,
    run_id: str,
    *,
    retryable: tuple[type[BaseException], ...] = (),
) -> Attempt:
    """Run ``run_id`` once on the given face: one streamed call, read to its end."""
    out = Attempt()
    options: dict[str, Any] = {"retryable": retryable} if retryable else {}
    if face == "sync":
        client = _client(api, server.url, face)
        try:
            with redrive.run(journal, run_id, **options) as run:
                out.events = [event.model_dump() for event in _create(client, api)]
        except Exception as exc:
            out.error = exc
        finally:
            client.close()
        out.live_steps = run.live_steps
        return out

    async def main() -> None:
        client = _client(api, server.url, face)
        try:
            async with redrive.run(journal, run_id, **options) as run:
                stream = await _create(client, api)
                out.events = [event.model_dump() async for event in stream]
        except Exception as exc:
            out.error = exc
        finally:
            await client.close()
        out.live_steps = run.live_steps

    asyncio.run(main())
    return out


def _model_frames(journal: Journal, run_id: str) -> list[Any]:
    return [f for f in journal.frames(run_id) if f.kind.startswith("model")]


def check_transient(
    server: ScriptServer, journal: Journal, api: str, face: str, broken: list[str]
) -> None:
    """A transient in-band failure: not journaled, retryable, resumed live once, then replayed."""
    run_id = f"r{next(_RUN_IDS)}"
    server.add(Reply(chunks=broken), Reply(chunks=STREAMS[api]))
    first = attempt(server, journal, api, face, run_id)
    assert first.error is not None, "a transient failure reaches the loop as an exception"
    assert getattr(first.error, "retryable", None) is True
    record = journal.get_run(run_id)
    assert record is not None and record.status == "paused"
    assert _model_frames(journal, run_id) == []
    resumed = attempt(server, journal, api, face, run_id)
    assert resumed.error is None and resumed.events
    assert resumed.live_steps == 1
    assert len([f for f in _model_frames(journal, run_id) if f.kind == "model_response"]) == 1
    replayed = attempt(server, journal, api, face, run_id)
    assert replayed.events == resumed.events
    assert replayed.live_steps == 0
    assert len(server.requests) == 2


_SDK_ERRORS = (anthropic.APIError, openai.APIError)


def check_permanent(
    server: ScriptServer, journal: Journal, api: str, face: str, broken: list[str]
) -> None:
    """A permanent in-band failure is the step's outcome: recorded, replayed as the same."""
    run_id = f"r{next(_RUN_IDS)}"
    server.add(Reply(chunks=broken))
    first = attempt(server, journal, api, face, run_id, retryable=_SDK_ERRORS)
    frames = _model_frames(journal, run_id)
    assert [f.kind for f in frames] == ["model_request", "model_response"]
    assert frames[1].data()["response"]["chunks"] == broken
    assert frames[1].data()["view"]["error"], "the view names the recorded error"
    if api == "responses":  # the SDK hands the failure to the loop as an event
        assert first.error is None and first.events
    else:
        assert first.error is not None
        assert getattr(first.error, "retryable", None) is False
    replayed = attempt(server, journal, api, face, run_id, retryable=_SDK_ERRORS)
    assert type(replayed.error) is type(first.error)
    assert str(replayed.error) == str(first.error)
    assert replayed.events == first.events
    assert replayed.live_steps == 0
    assert len(server.requests) == 1


def _broken(api: str, kind: str, position: int, failed: bool) -> list[str]:
    body = STREAMS[api][:-1]
    position = min(position, len(body))
    return [*body[:position], _error_event(api, kind, position, failed=failed)]


@pytest.fixture
def server() -> Any:
    with serve() as srv:
        yield srv


@pytest.fixture
def journal() -> Journal:
    return redrive.open_journal(":memory:")


@pytest.mark.parametrize("face", FACES)
def test_anthropic_overload_mid_stream_leaves_the_run_resumable(
    server: ScriptServer, journal: Journal, face: str
) -> None:
    """message_start, a text delta, then ``event: error`` overloaded: as HTTP 529 (issue 16)."""
    check_transient(
        server, journal, "anthropic", face, _broken("anthropic", "overloaded_error", 3, False)
    )


@pytest.mark.parametrize("transient", [True, False], ids=["transient", "permanent"])
@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("api", APIS)
def test_each_api_in_band_error_as_its_http_status(
    server: ScriptServer, journal: Journal, api: str, face: str, transient: bool
) -> None:
    """Transient: not journaled, retryable, asked again; permanent: recorded, replayed the same."""
    kind = next(kind for kind, flag in KINDS[api] if flag is transient)
    check = check_transient if transient else check_permanent
    check(server, journal, api, face, _broken(api, kind, 2, api == "responses"))


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("api", APIS)
def test_a_stream_ended_without_its_final_event_is_asked_again(
    server: ScriptServer, journal: Journal, api: str, face: str
) -> None:
    """No ``message_stop`` / ``[DONE]`` / ``response.completed``: not a finished step (issue 16)."""
    check_transient(server, journal, api, face, STREAMS[api][:-1])


@given(
    api=st.sampled_from(APIS),
    face=st.sampled_from(FACES),
    data=st.data(),
    failed=st.booleans(),
    truncated=st.booleans(),
)
def test_in_band_errors_behave_as_their_http_status(
    api: str, face: str, data: st.DataObject, failed: bool, truncated: bool
) -> None:
    """Any provider, API, error kind (or none: cut short), position and face: one rule with HTTP."""
    kind, transient = data.draw(st.sampled_from(KINDS[api]), label="kind")
    position = data.draw(st.integers(0, len(STREAMS[api]) - 1), label="position")
    broken = _broken(api, kind, position, failed and api == "responses")
    if truncated:  # the server ends the stream there, without an error or a final event
        broken, transient = broken[:-1], True
    check: Callable[..., None] = check_transient if transient else check_permanent
    with serve() as server:
        check(server, redrive.open_journal(":memory:"), api, face, broken)


@pytest.mark.parametrize(
    ("event", "kind", "status", "transient"),
    [
        (_error_event("anthropic", "overloaded_error", 0), "overloaded_error", 529, True),
        (
            _error_event("anthropic", "invalid_request_error", 0),
            "invalid_request_error",
            400,
            False,
        ),
        (_error_event("chat", "server_error", 0), "server_error", 500, True),
        (_error_event("responses", "rate_limit_exceeded", 0), "rate_limit_exceeded", 429, True),
        (_error_event("responses", "invalid_prompt", 0, failed=True), "invalid_prompt", 400, False),
        ('data: {"error": {"code": 502, "message": "bad gateway"}}\n\n', "", 502, True),
        ("event: error\ndata: not json\n\n", "", 400, False),
    ],
)
def test_stream_error_maps_each_grammar_to_its_http_status(
    event: str, kind: str, status: int, transient: bool
) -> None:
    """The documented error events of each API map to the status the same error has over HTTP."""
    error = stream_error(parse_event(event))
    assert error is not None
    assert (error.kind, error.status, error.transient) == (kind, status, transient)


@pytest.mark.parametrize("api", APIS)
def test_ordinary_events_are_not_errors(api: str) -> None:
    """No event of a complete stream is taken for an in-band error."""
    assert [stream_error(parse_event(event)) for event in STREAMS[api]] == [None] * len(
        STREAMS[api]
    )
