"""No credential or cookie reaches a journal: record, resume, and scan every byte written."""

from __future__ import annotations

from pathlib import Path

import anthropic
import openai
import pytest

import redrive
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
