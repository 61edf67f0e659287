"""No credential or cookie reaches a journal: record, resume, and scan every byte written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import redrive
from redrive.storage.rdj import export_run
from tests.sdkserver import Reply, serve

OPENAI_KEY = "sk-proj-Zq3vT8rL1mN5bX0cW7yK2hJ4gF6dS9aP"
ANTHROPIC_KEY = "sk-ant-api03-Hq7Lw2Nx9Rt4Yv1Bz8Mc3Kd6Fg0Js5Pa-XyZ123AA"
ORG = "org-Pq2Wm8Xz4Lc7Vb1Nk9Rt"
PROJECT = "proj_Hk3Jd8Ws2Qn6Lp0Zx4Cv"
COOKIE = "__cf_bm=Rk1Tq9Lw3Pz7Mx2Nv5Bc8Hd0Jf4Gs6Ya-1700000000-1.0.1.1-secretcookievalue"
ANTHROPIC_ORG = "3f1c9b2e-7d4a-4c61-9e8f-2a5b6c7d8e9f"
QUERY_KEY = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
SECRETS = [OPENAI_KEY, ANTHROPIC_KEY, ORG, PROJECT, COOKIE, ANTHROPIC_ORG, QUERY_KEY]

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test-model",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_no_secret_is_written_on_record_or_resume(tmp_path: Path) -> None:
    """Keys, org/project ids, cookies and key query parameters appear nowhere in the files."""
    path = tmp_path / "journal" / "runs.duckdb"
    path.parent.mkdir()
    reply_headers = {
        "set-cookie": COOKIE,
        "openai-organization": ORG,
        "openai-project": PROJECT,
        "anthropic-organization-id": ANTHROPIC_ORG,
    }
    with serve() as server:
        server.add(
            Reply(body=CHAT, headers=reply_headers),
            Reply(body=MESSAGE, headers=reply_headers, gzip=True),
            Reply(body=CHAT, headers=reply_headers),
        )
        oai = redrive.wrap(
            openai.OpenAI(
                api_key=OPENAI_KEY,
                organization=ORG,
                project=PROJECT,
                base_url=server.url + "/v1",
                max_retries=0,
                default_headers={"cookie": COOKIE},
                default_query={"key": QUERY_KEY},
            )
        )
        ant = redrive.wrap(
            anthropic.Anthropic(
                api_key=ANTHROPIC_KEY,
                base_url=server.url,
                max_retries=0,
            )
        )
        journal = redrive.open_journal(str(path))
        try:
            with pytest.raises(ConnectionError), redrive.run(journal, "r1"):
                oai.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "a"}]
                )
                ant.messages.create(
                    model="claude-test-model",
                    max_tokens=5,
                    messages=[{"role": "user", "content": "b"}],
                )
                raise ConnectionError("worker died")
            with redrive.run(journal, "r1"):  # the resume replays two steps and records one
                oai.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "a"}]
                )
                ant.messages.create(
                    model="claude-test-model",
                    max_tokens=5,
                    messages=[{"role": "user", "content": "b"}],
                )
                oai.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "c"}]
                )
        finally:
            journal.close()
            oai.close()
            ant.close()
        sent = b"".join(str(r.headers).encode() + r.path.encode() for r in server.requests)
    assert len(server.requests) == 3
    assert OPENAI_KEY.encode() in sent and ANTHROPIC_KEY.encode() in sent  # the test is live
    written = _all_bytes(tmp_path)
    assert written
    for secret in SECRETS:
        assert secret.encode() not in written, f"{secret[:12]}... was written to the journal"


PRICE_KEY = "pk9Vx2Lm7Qw4Rt8Yz1Nb6Hc3"


def _prices_tool() -> Any:
    """A read-only tool that GETs a URL holding a key, gets 401 and calls raise_for_status()."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(401, json={"error": "bad key"})

    http = httpx2.Client(transport=httpx2.MockTransport(handler))

    @redrive.tool(read_only=True)
    def prices(area: str) -> Any:
        response = http.get(f"https://prices.example/api?area={area}&key={PRICE_KEY}")
        response.raise_for_status()
        return response.json()

    return prices


@pytest.mark.parametrize("redact", [(), ("$..key", "$..message")])
def test_a_secret_in_a_tool_exception_is_not_journaled(
    tmp_path: Path, redact: tuple[str, ...]
) -> None:
    """Issue 16 item 2: a URL's key in a tool error's message and args is masked, redact= or not."""
    prices = _prices_tool()
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    try:
        for _ in range(2):  # recorded, then replayed
            with redrive.run(journal, "r1", redact=redact) as run:
                with pytest.raises(Exception, match=r"401|REDACTED"):  # $..message: all of it
                    prices("NO1")
                run.finish("done")
        error = next(f for f in journal.frames("r1") if f.kind == "tool_error").data()["error"]
        assert "[REDACTED]" in str(error["message"]) + str(error["args"])
    finally:
        journal.close()
    assert PRICE_KEY.encode() not in _all_bytes(tmp_path)


MCP_TOKEN = "mcp-tok-7Hq2Lw9Nx4Rt1Yv8Bz3"


def test_remote_mcp_credentials_in_request_bodies_are_not_journaled(tmp_path: Path) -> None:
    """Issue 16 item 3: OpenAI ``tools[].authorization`` and Anthropic ``authorization_token``."""
    with serve() as server:
        server.add(Reply(body=CHAT), Reply(body=MESSAGE))
        oai = redrive.wrap(openai.OpenAI(api_key="k", base_url=server.url + "/v1", max_retries=0))
        ant = redrive.wrap(anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0))
        path = tmp_path / "runs.duckdb"
        journal = redrive.open_journal(str(path))
        try:
            for _ in range(2):  # recorded, then replayed: the key matches without the token
                with redrive.run(journal, "r1") as run:
                    oai.chat.completions.create(
                        model="gpt-4o",
                        messages=[{"role": "user", "content": "a"}],
                        extra_body={
                            "tools": [
                                {
                                    "type": "mcp",
                                    "server_url": "https://m.example",
                                    "authorization": MCP_TOKEN,
                                }
                            ]
                        },
                    )
                    ant.messages.create(
                        model="claude-test-model",
                        max_tokens=5,
                        messages=[{"role": "user", "content": "b"}],
                        extra_body={
                            "mcp_servers": [
                                {
                                    "type": "url",
                                    "url": "https://m.example",
                                    "name": "m",
                                    "authorization_token": MCP_TOKEN,
                                }
                            ]
                        },
                    )
                    run.finish("ok")
            export_run(journal, "r1", str(tmp_path / "r1.rdj"))
        finally:
            journal.close()
            oai.close()
            ant.close()
        sent = b"".join(r.body for r in server.requests)
    assert len(server.requests) == 2
    assert MCP_TOKEN.encode() in sent  # the test is live
    assert MCP_TOKEN.encode() not in _all_bytes(tmp_path)


def test_the_async_face_journals_through_the_same_scrubber() -> None:
    """Async tools and model callables: errors, results and responses are scrubbed alike."""
    journal = redrive.open_journal(":memory:")

    @redrive.tool(read_only=True)
    async def fetch(url: str) -> dict[str, str]:
        raise ValueError(f"401 for url {url}")

    @redrive.model
    async def think(prompt: str) -> dict[str, str]:
        return {
            "text": f"key sk-proj-{PRICE_KEY}",
            "url": f"https://a.example/?access_token={PRICE_KEY}",
        }

    async def main() -> None:
        async with redrive.run(journal, "r1") as run:
            with pytest.raises(ValueError):
                await fetch(f"https://prices.example/api?key={PRICE_KEY}")
            run.finish(await think("hi"))

    asyncio.run(main())
    written = b"".join(f.payload for f in journal.frames("r1"))
    record = journal.get_run("r1")
    assert record is not None and record.output is not None
    assert PRICE_KEY.encode() not in written + record.output


@pytest.mark.parametrize("backend", ["memory", "duckdb"])
def test_operator_text_is_scrubbed_in_cancels_and_decisions(backend: str, tmp_path: Path) -> None:
    """A secret pasted into a cancel's reason or a decision's note never reaches the journal."""
    url = ":memory:" if backend == "memory" else str(tmp_path / "runs.duckdb")
    journal = redrive.open_journal(url)
    secret = "sk-ant-api03-" + "Zq7" * 12
    for run_id in ("a", "b"):
        with pytest.raises(SystemExit), redrive.run(journal, run_id):
            raise SystemExit(1)  # leaves the run resumable
    journal.decide("a", "refund", True, by="ops", note=f"approved, key was {secret}")
    record = journal.cancel("b", reason=f"leaked Bearer {secret}", by="ops")
    assert secret not in (record.error or "")
    frames = [f.payload for run_id in ("a", "b") for f in journal.frames(run_id)]
    assert all(secret.encode() not in payload for payload in frames)
    decision = journal.decision("a", "refund")
    assert decision is not None and secret not in decision.note
    journal.close()
    if backend == "duckdb":
        for path in tmp_path.iterdir():
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path
