"""Provider knowledge in the recorders: transient errors marked ``retryable``, SSE framing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import redrive
from redrive.recorders._provider import (
    is_transient,
    mark_retryable,
    marking_retryable,
    set_retryable,
)
from redrive.recorders._sse import is_terminal_event, parse_event, split_events, sse_data


class StatusError(Exception):
    """An SDK-like status error: ``status_code`` and ``response.headers``."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"status {status}")
        self.status_code = status
        self.response = type("R", (), {"headers": headers or {}})()


class APIConnectionError(Exception):
    """Named like the SDKs' connection error (matched by name, no SDK imported)."""


class APITimeoutError(APIConnectionError):
    """Named like the SDKs' timeout error."""


class Slotted(Exception):
    """An exception that refuses new attributes."""

    __slots__ = ()


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (StatusError(408), True),
        (StatusError(409), True),
        (StatusError(429), True),
        (StatusError(500), True),
        (StatusError(529), True),
        (StatusError(400, {"x-should-retry": "true"}), True),
        (StatusError(400), False),
        (StatusError(401), False),
        (StatusError(404), False),
        (APIConnectionError("refused"), True),
        (APITimeoutError("slow"), True),
        (ValueError("a bug"), None),
    ],
)
def test_mark_retryable_decides_from_status_class_and_cause(exc: Exception, expected: Any) -> None:
    """Transient statuses, connection and timeout errors are retryable; other statuses are not."""
    assert mark_retryable(exc) is exc
    assert getattr(exc, "retryable", None) is expected


def test_an_error_raised_from_a_marked_transport_error_is_retryable() -> None:
    """An SDK error whose cause the transport marked retryable is retryable too."""
    cause = OSError("connection reset")
    cause.retryable = True  # type: ignore[attr-defined]
    try:
        raise RuntimeError("wrapped") from cause
    except RuntimeError as exc:
        assert getattr(mark_retryable(exc), "retryable", None) is True


def test_a_flag_already_set_is_kept() -> None:
    """A replayed 500 (retryable=False) stays so; the engine's own errors are left alone."""
    replayed = StatusError(500)
    replayed.retryable = False  # type: ignore[attr-defined]
    assert getattr(mark_retryable(replayed), "retryable", None) is False
    divergence = redrive.DivergenceError("drift", run_id="r", seq=1)
    assert not hasattr(mark_retryable(divergence), "retryable")
    set_retryable(Slotted(), True)  # refuses the attribute: left as it is, no error


def test_marking_retryable_marks_what_leaves_a_sync_or_async_block() -> None:
    """The context manager marks the exception and lets it go, around a call or an await."""
    with pytest.raises(StatusError) as info, marking_retryable():
        raise StatusError(503)
    assert getattr(info.value, "retryable", None) is True

    async def call() -> None:
        with marking_retryable():
            await asyncio.sleep(0)
            raise APIConnectionError("refused")

    with pytest.raises(APIConnectionError) as ainfo:
        asyncio.run(call())
    assert getattr(ainfo.value, "retryable", None) is True


def test_is_transient_reads_the_should_retry_header() -> None:
    """408/409/429/5xx are transient; a 4xx is only with x-should-retry: true; success never."""
    assert [is_transient(s, {}) for s in (200, 400, 408, 409, 429, 500)] == [
        False,
        False,
        True,
        True,
        True,
        True,
    ]
    assert is_transient(422, {"x-should-retry": "true"})
    assert not is_transient(200, {"x-should-retry": "true"})


def test_parse_event_reads_name_and_joined_data() -> None:
    """The event name and the data lines (one leading space dropped) joined by newlines."""
    event = parse_event(b'event: delta\r\ndata: {"a":\r\ndata:  1}\r\n: comment\r\n\r\n')
    assert (event.name, event.data) == ("delta", '{"a":\n 1}')
    assert event.json() == {"a": 1}
    assert parse_event(": keep-alive\n\n").data is None


def test_a_line_separator_inside_json_does_not_cut_the_data_line() -> None:
    """Only CR, LF and CRLF end a line: U+2028 in model text stays inside the JSON."""
    chunk = 'data: {"text": "a\u2028b"}\n\n'
    assert sse_data([chunk]) == [(None, {"text": "a\u2028b"})]


def test_sse_data_skips_done_and_non_json() -> None:
    """``[DONE]`` and data that is not JSON leave no pair; ``null`` data is a pair."""
    chunks = ["data: [DONE]\n\n", "data: not json\n\n", "data: null\n\n", b"event: x\ndata: 2\n\n"]
    assert sse_data(chunks) == [(None, None), ("x", 2)]


@pytest.mark.parametrize(
    ("event", "terminal"),
    [
        (b"data: [DONE]\n\n", True),
        (b"event: message_stop\ndata: {}\n\n", True),
        (b'data: {"type": "response.completed"}\n\n', True),
        (b'data: {"type": "response.output_text.delta"}\n\n', False),
        (b'data: {"choices": []}\n\n', False),
        (b"data: {broken\n\n", False),
    ],
)
def test_terminal_events(event: bytes, terminal: bool) -> None:
    """The final event of OpenAI chat, Responses and Anthropic streams ends a stream."""
    assert is_terminal_event(event) is terminal


def test_split_events_keeps_the_rest() -> None:
    """Complete events keep their blank line; bytes after the last boundary are the rest."""
    assert split_events(b"data: 1\n\ndata: 2\r\n\r\ndata: 3") == (
        [b"data: 1\n\n", b"data: 2\r\n\r\n"],
        b"data: 3",
    )


OPENAI_CHAT = {
    "method": "POST",
    "path": "/chat/completions",
    "query": {},
    "body": {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "call_A", "type": "function", "function": {"name": "w", "arguments": ""}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_A", "content": "sunny"},
        ],
    },
}
OPENAI_RESPONSES = {
    "method": "POST",
    "path": "/responses",
    "query": {},
    "body": {
        "model": "gpt-4o",
        "input": [
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_A", "name": "w"},
            {"type": "function_call_output", "call_id": "call_A", "output": "sunny"},
        ],
    },
}
ANTHROPIC = {
    "method": "POST",
    "path": "/v1/messages",
    "query": {},
    "body": {
        "model": "claude",
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "let me look"},
                    {"type": "tool_use", "id": "toolu_A", "name": "w", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "sunny"}],
            },
        ],
    },
}


@pytest.mark.parametrize(
    ("provider", "request_"), [("openai", OPENAI_CHAT), ("anthropic", ANTHROPIC)]
)
def test_model_id_paths_drop_what_the_engine_drops_by_key_name(
    provider: str, request_: dict[str, Any]
) -> None:
    """The providers' id paths, given as ignore data, leave out exactly the model-minted ids."""
    from redrive.recorders._provider import MODEL_ID_PATHS
    from redrive.replay._policy import compile_paths, match_view

    by_name = match_view(request_, kind="model")  # today: the engine knows the key names
    as_data = match_view(request_, compile_paths(MODEL_ID_PATHS[provider]), kind="tool")
    assert as_data == by_name
    assert as_data != match_view(request_, kind="tool")  # something was dropped


def test_marks_retryable_wraps_sync_and_async_model_callables() -> None:
    """A wrapped model callable raises the same exception, marked; its result is unchanged."""
    from redrive.recorders._provider import marks_retryable

    def flaky(status: int) -> int:
        if status >= 400:
            raise StatusError(status)
        return status

    async def aflaky(status: int) -> int:
        return flaky(status)

    marked, amarked = marks_retryable(flaky), marks_retryable(aflaky)
    assert marked(200) == 200 and asyncio.run(amarked(200)) == 200
    assert marked.__name__ == "flaky" and asyncio.iscoroutinefunction(amarked)
    with pytest.raises(StatusError) as info:
        marked(429)
    assert getattr(info.value, "retryable", None) is True
    with pytest.raises(StatusError) as ainfo:
        asyncio.run(amarked(400))
    assert getattr(ainfo.value, "retryable", None) is False


def test_a_marked_model_callable_leaves_its_run_resumable() -> None:
    """redrive.model over a marked callable: a 503 it raises keeps the run resumable, a 400 not."""
    from redrive.recorders._provider import marks_retryable

    journal = redrive.open_journal(":memory:")

    @redrive.model
    @marks_retryable
    def complete(prompt: str, status: int) -> str:
        raise StatusError(status)

    for status, expected in ((503, "paused"), (400, "failed")):
        with pytest.raises(StatusError) as info, redrive.run(journal, f"r{status}"):
            complete("hi", status)
        assert getattr(info.value, "retryable", None) is (status == 503)
        assert journal.get_run(f"r{status}").status == expected  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("provider", "request_"),
    [("openai", OPENAI_CHAT), ("openai", OPENAI_RESPONSES), ("anthropic", ANTHROPIC)],
)
def test_model_id_paths_keep_the_match_keys_of_existing_journals(
    provider: str, request_: dict[str, Any]
) -> None:
    """The id paths a recorder passes never change a key the generic rule made.

    A Responses ``function_call`` item's ``id`` has no path of its own (a path
    cannot say "of function_call items only", and the ids of message and
    reasoning items were always matched): the engine's generic rule, kept as
    the fallback, drops it.
    """
    from redrive.frames import call_key
    from redrive.recorders._provider import MODEL_ID_PATHS
    from redrive.replay._policy import compile_paths, match_view

    paths = compile_paths(MODEL_ID_PATHS[provider])
    before = call_key("openai:POST /x", match_view(request_, kind="model"))
    assert call_key("openai:POST /x", match_view(request_, paths, kind="model")) == before
    with_reasoning = {
        **request_,
        "body": {**request_["body"], "input": [{"type": "reasoning", "id": "rs_1"}]},
    }
    assert match_view(with_reasoning, paths, kind="model") == match_view(
        with_reasoning, kind="model"
    )
