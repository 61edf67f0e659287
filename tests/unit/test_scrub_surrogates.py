"""A body whose JSON escapes a lone surrogate (``"\\ud83d"``) survives its scrubbing.

JSON (RFC 8259) lets a string escape a lone UTF-16 surrogate, and Python's
parser hands it back as a lone surrogate code point. A provider may send one
(half of an emoji cut between two tokens), inside signed content too: its
signature covers the text as sent. When the default rules mask something
else in the same body (a ``session_token``, a ``?key=``), the scrubber writes
the body again as JSON; written with its non-ASCII characters as they are, a
lone surrogate made a text no UTF-8 encoder takes, so recording the response
failed and the live call raised (``APIConnectionError``). The written text
keeps a lone surrogate escaped: it is UTF-8 and parses to the same value,
and the signed content in it comes back as the provider sent it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import anthropic
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive._jsontext import dumps
from redrive._scrub import DEFAULT, REDACTED, Scrubber
from redrive.recorders._secrets import redact_body
from tests.sdkserver import Reply, serve

#: text with lone surrogates among other code points (Hypothesis' text leaves them out), as
#: a JSON parser hands it back (an escaped high and low surrogate make one code point)
_WITH_SURROGATES = (
    st.lists(
        st.characters(categories=["Cs"]) | st.characters(codec="utf-8"), min_size=1, max_size=12
    )
    .map("".join)
    .map(lambda text: json.loads(json.dumps(text)))
)

THINKING = "Half an emoji \ud83d, then the link ?key=demo-7f3a9c21."


def _body(text: str) -> dict[str, Any]:
    """A Messages body: a signed thinking block holding ``text``, a token the rules mask."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": text, "signature": "EqQBCkgIARAB=="},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
        ],
        "container": {"id": "c_1", "session_token": "st-9c21f3a7e0b84d52a1"},
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 3},
    }


def _utf8(text: str) -> str:
    text.encode("utf-8")  # raises on a lone surrogate
    return text


@given(text=_WITH_SURROGATES)
def test_dumps_writes_utf8_json_of_the_same_value(text: str) -> None:
    """Any string, lone surrogates included: the text is UTF-8, compact, and parses back."""
    value = {"a": [text, {"é": text}], "n": 1.5}
    written = _utf8(dumps(value))
    assert json.loads(written) == value
    assert written == json.dumps(value, separators=(",", ":")) or "é" in written


@given(text=_WITH_SURROGATES)
def test_a_scrubbed_body_with_a_lone_surrogate_is_utf8_and_keeps_the_signed_text(
    text: str,
) -> None:
    """The token outside is masked; the thinking block (lone surrogates and all) is kept."""
    for scrubber in (DEFAULT, Scrubber((), names=("lookup_key",))):
        body = json.dumps(_body(text))
        written = _utf8(scrubber.value(body))
        parsed = json.loads(written)
        assert parsed["container"]["session_token"] == REDACTED
        assert parsed["content"][0] == _body(text)["content"][0]


@given(text=_WITH_SURROGATES)
def test_a_scrubbed_stream_with_a_lone_surrogate_is_utf8(text: str) -> None:
    """An event stream: the masked event is written as UTF-8, the thinking delta as sent."""
    delta = {"type": "content_block_delta", "index": 0}
    events = [
        {**delta, "delta": {"type": "thinking_delta", "thinking": text}},
        {"type": "message_delta", "session_token": "st-9c21f3a7e0b84d52a1", "note": text},
    ]
    chunks = [f"event: x\ndata: {json.dumps(e)}\n\n" for e in events]
    out = DEFAULT.value({"chunks": chunks})["chunks"]
    datas = [json.loads(_utf8(chunk).split("data: ", 1)[1]) for chunk in out]
    assert datas[0] == events[0]
    assert datas[1] == {**events[1], "session_token": REDACTED}


def test_a_redact_path_over_a_body_with_a_lone_surrogate_is_utf8() -> None:
    """The recorder's ``redact=`` pass over a JSON body writes it as UTF-8 too."""
    payload = {"status": 200, "body": json.dumps({"note": "\ud83d", "secret": "x"})}
    out = redact_body(payload, lambda v: {"body": {**v["body"], "secret": REDACTED}})
    assert json.loads(_utf8(out["body"])) == {"note": "\ud83d", "secret": REDACTED}


_MESSAGES = [{"role": "user", "content": "Where is order 7?"}]


def _digest(text: str) -> str:
    """What the loop saw, as a run output can hold it (valid Unicode, nothing to mask)."""
    return hashlib.sha256(text.encode("utf-16-le", "surrogatepass")).hexdigest()


def _sync_attempt(journal: Any, url: str, live: bool) -> Any:
    with anthropic.Anthropic(base_url=url, api_key="sk-ant-t", max_retries=0) as raw:
        client: Any = redrive.wrap(raw)
        with redrive.run(journal, "surrogate", live=live) as run:
            made = client.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=_MESSAGES
            )
            return run.finish(_digest(made.content[0].thinking))


def _async_attempt(journal: Any, url: str, live: bool) -> Any:
    async def main() -> Any:
        raw = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-t", max_retries=0)
        client: Any = redrive.wrap(raw)
        async with raw, redrive.run(journal, "surrogate", live=live) as run:
            made = await client.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=_MESSAGES
            )
            return run.finish(_digest(made.content[0].thinking))

    return asyncio.run(main())


@pytest.mark.parametrize("attempt", [_sync_attempt, _async_attempt], ids=["sync", "async"])
def test_a_lone_surrogate_in_signed_thinking_records_and_replays(attempt: Any) -> None:
    """Recorded live, replayed (the same run id, then offline): the text as the provider sent it.

    Before the fix the live call itself failed: recording its response raised
    ``UnicodeEncodeError``, which the SDK reported as ``APIConnectionError``.
    (The Anthropic SDK cannot send such a block back itself: its JSON encoder
    refuses a lone surrogate, wrapped or not.)
    """
    journal = redrive.open_journal(":memory:")
    with serve() as server:
        server.add(Reply(body=json.dumps(_body(THINKING)).encode()))
        assert attempt(journal, server.url, True) == _digest(THINKING)
        assert attempt(journal, server.url, True) == _digest(THINKING)
        assert attempt(journal, server.url, False) == _digest(THINKING)
        assert len(server.requests) == 1
