"""Public reports on record/replay tools' replay mismatches, as small inputs against redrive.

Each test names the report it comes from; the loop is the OpenAI SDK's (wrapped
by ``redrive.wrap``) against an in-process transport standing in for the
network, and a cassette where the report is about cassettes:

- Kludex/cassetter#38 and allejo/php-vcr-sanitizer#22: interactions are scrubbed
  when written, but replay matched the raw request, so a request holding a
  secret never matched its own recording (and then went live). Here a request
  holds an ``sk-`` key shape and a ``?token=`` in its body and a ``key=`` query
  parameter (Gemini's style): recorded live or imported from a cassette that
  holds them raw, the run replays strictly with nothing sent.
- kevin1024/vcrpy#842, #929, #516: identical requests replay in the order they
  were recorded, each answer once; one more identical request than recorded is
  a ``ReplayMissError`` naming it (vcrpy's "no matchers failed" message).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

import redrive
from redrive.recorders.cassettes import import_cassette

SECRET_TEXT = (
    "My old key sk-proj-Zx81LmQ0aPq7RtYw4vBn2KcD leaked; the webhook is "
    "https://hooks.example/cb?token=t0k3n-991 ."
)
QUERY = {"key": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"}


def _chat(content: str, n: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": n,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


class Server:
    """The network: answers each chat request with the next scripted answer; keeps requests."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.sent: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        if not self.answers:
            return httpx2.Response(500, json={"error": {"message": "script exhausted"}})
        answer = self.answers.pop(0)
        return httpx2.Response(200, json=_chat(answer, len(self.sent)))


def _client(server: Server, face: str) -> Any:
    options: dict[str, Any] = {
        "base_url": "https://generativelanguage.googleapis.com/v1beta/openai/",
        "api_key": "sk-test",
        "max_retries": 0,
        "default_query": QUERY,
    }
    if face == "sync":
        http: Any = httpx2.Client(transport=httpx2.MockTransport(server))
        return redrive.wrap(openai.OpenAI(http_client=http, **options))
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(server))
    return redrive.wrap(openai.AsyncOpenAI(http_client=http, **options))


def _ask_times(
    journal: Any, run_id: str, server: Server, face: str, times: int, **options: Any
) -> list[str | None]:
    """Ask the same question ``times`` times in one run; the answers, in order."""
    client = _client(server, face)
    asked = {"model": "gpt-4o", "messages": [{"role": "user", "content": SECRET_TEXT}]}
    if face == "sync":
        with redrive.run(journal, run_id, **options) as run:
            got = [client.chat.completions.create(**asked) for _ in range(times)]
            answers = [r.choices[0].message.content for r in got]
            run.finish(answers)  # an imported run has no output of its own
            return answers

    async def go() -> list[str | None]:
        async with redrive.run(journal, run_id, **options) as run:
            got = [await client.chat.completions.create(**asked) for _ in range(times)]
            answers = [r.choices[0].message.content for r in got]
            run.finish(answers)
            return answers

    return asyncio.run(go())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_request_holding_secrets_replays_strictly_against_its_own_recording(face: str) -> None:
    """Kludex/cassetter#38, allejo/php-vcr-sanitizer#22 (scrubbed on write, matched raw)."""
    journal = redrive.open_journal(":memory:")
    server = Server("noted")
    assert _ask_times(journal, "sec:1", server, face, 1) == ["noted"]
    stored = json.dumps([frame.payload for frame in journal.frames("sec:1")], default=str)
    assert "Zx81LmQ0aPq7RtYw4vBn2KcD" not in stored and "t0k3n-991" not in stored
    assert "AIzaSyD-9tSrke72PouQMnMX" not in stored
    assert _ask_times(journal, "sec:1", server, face, 1, live=False) == ["noted"]
    assert len(server.sent) == 1


def _cassette(path: Path, body: dict[str, Any], answers: list[str]) -> None:
    """A classic vcrpy cassette (YAML, gzip bodies as ``!!binary``), the request sent raw."""
    yaml = pytest.importorskip("yaml")
    uri = (
        "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions?key="
        + (QUERY["key"])
    )
    interactions = [
        {
            "request": {
                "body": json.dumps(body),
                "headers": {"authorization": ["Bearer sk-test"]},
                "method": "POST",
                "uri": uri,
            },
            "response": {
                "body": {"string": gzip.compress(json.dumps(_chat(answer, n)).encode())},
                "headers": {
                    "Content-Type": ["application/json"],
                    "Content-Encoding": ["gzip"],
                },
                "status": {"code": 200, "message": "OK"},
            },
        }
        for n, answer in enumerate(answers, 1)
    ]
    path.write_text(yaml.safe_dump({"interactions": interactions, "version": 1}))


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_cassette_holding_the_raw_secrets_replays_strictly(face: str, tmp_path: Path) -> None:
    """Kludex/cassetter#38 (a cassette whose requests hold secrets, imported, then replayed)."""
    body = {"messages": [{"role": "user", "content": SECRET_TEXT}], "model": "gpt-4o"}
    _cassette(tmp_path / "c.yaml", body, ["noted"])
    journal = redrive.open_journal(":memory:")
    import_cassette(tmp_path / "c.yaml", journal, "cas:1")
    server = Server()
    assert _ask_times(journal, "cas:1", server, face, 1, live=False) == ["noted"]
    assert server.sent == []


@pytest.mark.parametrize("face", ["sync", "async"])
def test_identical_requests_replay_in_recorded_order_and_one_more_is_a_miss(
    face: str, tmp_path: Path
) -> None:
    """kevin1024/vcrpy#842 (identical requests must replay in order), #929 and #516 (asking once
    more than recorded gives "no matchers failed")."""
    body = {"messages": [{"role": "user", "content": SECRET_TEXT}], "model": "gpt-4o"}
    _cassette(tmp_path / "c.yaml", body, ["bar", "whee"])
    journal = redrive.open_journal(":memory:")
    import_cassette(tmp_path / "c.yaml", journal, "same:1")
    server = Server("third")
    assert _ask_times(journal, "same:1", server, face, 2, live=False) == ["bar", "whee"]
    with pytest.raises(redrive.ReplayMissError) as caught:
        _ask_times(journal, "same:1", server, face, 3, live=False)
    told = str(caught.value)
    assert caught.value.name == "openai:POST /chat/completions"
    assert "identical model steps at seqs 1, 3 were already replayed" in told
    assert "the record has this call 2 times, the code now makes it a 3rd time" in told
    assert server.sent == []
    # recorded live: the same order on replay
    server = Server("one", "two")
    assert _ask_times(journal, "same:2", server, face, 2) == ["one", "two"]
    assert _ask_times(journal, "same:2", server, face, 2, live=False) == ["one", "two"]
    assert len(server.sent) == 2
