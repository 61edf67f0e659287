"""Issue 24 items 1-2 and issue 27 item 9b: credentials by name in every wire form, across chunks.

The real OpenAI SDK against the scripted server: credential query
parameters and response headers (item 1), a key streamed in two deltas
(item 2), logprob tokens (27.9b). The properties of the kind are in
``test_secret_properties.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

import redrive
from redrive._scrub import REDACTED
from tests.sdkserver import Reply, serve
from tests.unit.test_secrets import CHAT

#: not shaped like a JWT, a key or a token: only the parameter's name says it is secret
PLAIN = {
    "jwt": "plainjwtvalue01",
    "bearer": "plainbearer02",
    "code": "plaincode03",
    "access_key": "plainaccess04",
}
COOKIE2 = "sessionid=plaincookie05"
AMZ = "plainamztoken06"


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def _client(url: str) -> openai.OpenAI:
    return redrive.wrap(openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0))


def test_credential_query_parameters_and_headers_are_not_stored(tmp_path: Path) -> None:
    """Item 1: ``jwt``, ``bearer``, ``code``, ``access_key`` queries and ``Cookie2`` are masked."""
    headers = {"Cookie2": COOKIE2, "Set-Cookie2": COOKIE2, "X-Amz-Security-Token": AMZ}
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    with serve() as server:
        server.add(Reply(body=CHAT, headers=headers))
        client = _client(server.url)
        try:
            with redrive.run(journal, "forms") as run:
                client.chat.completions.create(
                    model="gpt-4o",
                    messages=[{"role": "user", "content": "a"}],
                    extra_query=PLAIN,
                )
                url = "https://files.example/f?" + "&".join(f"{k}={v}" for k, v in PLAIN.items())
                run.note("link", {"url": url, "text": f"see {url}"})
                run.finish("ok")
        finally:
            client.close()
            journal.close()
        assert all(v in server.requests[0].path for v in PLAIN.values())  # the test is live
    written = _all_bytes(tmp_path)
    for secret in [*PLAIN.values(), "plaincookie05", AMZ]:
        assert secret.encode() not in written, secret


def chat_chunk(text: str) -> str:
    """One OpenAI Chat Completions stream event carrying ``text`` as its delta."""
    delta = {"content": text}
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return "data: " + json.dumps({**body, "choices": [choice]}) + "\n\n"


KEY = "sk-proj-Zq3vT8rL1mN5bX0cW7yK2hJ4gF6dS9aP"
TOKEN = "tok9Hq7Lw2Nx4Rt"


@pytest.mark.parametrize(
    "deltas",
    [
        ["Your key is " + KEY[:9], KEY[9:] + " keep it."],
        ["Header: Bea", "rer " + TOKEN + " done"],
        ["a ", KEY[:3], KEY[3:20], KEY[20:], "!"],
    ],
)
def test_a_secret_split_across_stream_chunks_is_never_stored_or_replayed(
    tmp_path: Path, deltas: list[str]
) -> None:
    """Item 2: the assembled stream is masked; the stored events and the replayed text hold none."""
    secret = KEY if KEY[:3] in "".join(deltas) else TOKEN
    chunks = [chat_chunk(d) for d in deltas] + ["data: [DONE]\n\n"]
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    texts = []
    with serve() as server:
        server.add(Reply(chunks=chunks))
        client = _client(server.url)
        try:
            for _ in range(2):  # recorded, then replayed
                with redrive.run(journal, "split") as run:
                    stream = client.chat.completions.create(
                        model="gpt-4o", messages=[{"role": "user", "content": "a"}], stream=True
                    )
                    text = "".join(c.choices[0].delta.content or "" for c in stream)
                    texts.append(text)
                    run.finish("ok")
        finally:
            client.close()
            journal.close()
    assert secret in texts[0]  # live: the loop got what the model said
    assert secret not in texts[1] and REDACTED in texts[1]
    assert secret.encode() not in _all_bytes(tmp_path)


def test_logprob_tokens_replay_as_received() -> None:
    """27.9b: a logprob's ``token`` is no credential: the replay hands back every token."""
    tokens = ["Bea", "rer", " token", "api"]
    logprobs = {
        "content": [
            {
                "token": t,
                "logprob": -0.5,
                "bytes": list(t.encode()),
                "top_logprobs": [{"token": t, "logprob": -0.5, "bytes": list(t.encode())}],
            }
            for t in tokens
        ]
    }
    body = json.loads(json.dumps(CHAT))
    body["choices"][0]["logprobs"] = logprobs
    journal = redrive.open_journal(":memory:")
    got = []
    with serve() as server:
        server.add(Reply(body=body))
        client = _client(server.url)
        try:
            for _ in range(2):
                with redrive.run(journal, "lp") as run:
                    reply = client.chat.completions.create(
                        model="gpt-4o",
                        messages=[{"role": "user", "content": "a"}],
                        logprobs=True,
                        top_logprobs=1,
                    )
                    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
                    got.append([(c.token, c.top_logprobs[0].token) for c in content or []])
                    run.finish("ok")
        finally:
            client.close()
    assert got[0] == got[1] == [(t, t) for t in tokens]


def test_keep_paths_apply_per_step_kind_and_the_policy_is_recorded() -> None:
    """27.2: ``keep=`` leaves a path verbatim for one step kind; ``flags.secrets`` records it."""
    value = "Bearer 9Hq7Lw2Nx4Rt1Yv8"

    @redrive.tool(read_only=True)
    def search(query: str, other: str) -> str:
        return "ok"

    journal = redrive.open_journal(":memory:")
    options: dict[str, Any] = {"keep": ("tool:$.query",), "redact": ("$..other",)}
    for _ in range(2):  # recorded, then replayed under the same policy
        with redrive.run(journal, "keep", **options) as run:
            search(value, value)
            run.note("n", {"query": value})
            run.finish("ok")
    start, tool, _, note, _ = journal.frames("keep")
    assert tool.data()["args"] == {"query": value, "other": REDACTED}
    assert note.data()["data"] == {"query": "Bearer " + REDACTED}  # a tool path only
    secrets = start.data()["flags"]["secrets"]
    assert secrets["keep"] == ["tool:$.query"] and secrets["redact"] == ["$..other"]
    other = redrive.open_journal(":memory:")
    with redrive.run(other, "plain") as run:
        run.finish("ok")
    plain = next(iter(other.frames("plain"))).data()["flags"]["secrets"]
    assert plain["table"] == secrets["table"] and plain["fingerprint"] != secrets["fingerprint"]
    with pytest.raises(ValueError, match="'tols' is not a step kind"):
        redrive.run(journal, "bad", keep=("tols:$.query",))
