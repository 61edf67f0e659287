"""Redaction patterns match every key spelling; secret query parameters never reach a journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

import redrive
from redrive.recorders.http import describe_request
from redrive.replay._policy import REDACTED, compile_paths, match_view, redact_paths
from tests.sdkserver import Reply, serve

BODY: dict[str, Any] = {
    "metadata": {"x-secret": "S-HYPHEN", "api-key": "S-APIKEY", "ok": "kept", "a.b": "S-DOT"},
    "messages": [
        {"role": "user", "content": "C-0", "extra": {"api-key": "S-DEEP"}},
        {"role": "assistant", "content": "C-1"},
    ],
    "auth": {"token": "T-1", "nested": [{"token": "T-2"}]},
    "token": "T-0",
    "lst": ["L-0", "L-1"],
    "0": "ZERO",
}


def _secrets_left(value: Any) -> set[str]:
    """Every leaf string that still looks like a test secret."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and item != REDACTED:
            found.add(item)
    return found


@pytest.mark.parametrize(
    ("patterns", "removed"),
    [
        (["$..api-key"], {"S-APIKEY", "S-DEEP"}),
        (["$..['api-key']"], {"S-APIKEY", "S-DEEP"}),
        (["$.metadata.api-key"], {"S-APIKEY"}),
        (["$.metadata['x-secret']"], {"S-HYPHEN"}),
        (['$.metadata["x-secret"]'], {"S-HYPHEN"}),
        (["$.metadata.x-secret"], {"S-HYPHEN"}),
        (["$.metadata['a.b']"], {"S-DOT"}),
        (["$.messages[*].content"], {"C-0", "C-1"}),
        (["$.messages[1].content"], {"C-1"}),
        (["$..token"], {"T-0", "T-1", "T-2"}),
        (["..token"], {"T-0", "T-1", "T-2"}),
        (["$['token']"], {"T-0"}),
        (["token"], {"T-0"}),
        (["$.lst[*]"], {"L-0", "L-1"}),
        (["$.0"], {"ZERO"}),
        (["$.metadata.*"], {"S-HYPHEN", "S-APIKEY", "kept", "S-DOT"}),
    ],
)
def test_patterns_redact_exactly_their_paths(patterns: list[str], removed: set[str]) -> None:
    """Each pattern redacts the values it names, whatever the key's spelling, and nothing else."""
    before = _secrets_left(BODY)
    after = _secrets_left(redact_paths(BODY, compile_paths(patterns)))
    assert before - after == removed


def test_both_spellings_compile_to_the_same_matcher() -> None:
    """``.api-key`` and ``['api-key']`` (and ``.ok`` and ``['ok']``) are the same pattern."""
    dotted, bracketed = compile_paths(["$.a.api-key", "$.a['api-key']"])
    assert dotted.pattern == bracketed.pattern
    assert dotted.match("$.a['api-key']")
    plain, quoted = compile_paths(["$.a.ok", "$.a['ok']"])
    assert plain.pattern == quoted.pattern
    assert plain.match("$.a.ok")


def test_ignore_patterns_use_the_same_syntax() -> None:
    """match_view drops a non-identifier key named with a dotted pattern."""
    view = match_view(
        {"headers": {"x-request-id": "r1", "model": "m"}}, compile_paths(["$..x-request-id"])
    )
    assert view == {"headers": {"model": "m"}}


@pytest.mark.parametrize(
    "bad", ["$.a[", "$.a['x", "$.a..", "$...a", "$.a[x]", "$.a.", "$.a[1", "$x"]
)
def test_malformed_patterns_are_refused(bad: str) -> None:
    """A pattern that could never match is a ValueError naming it, not a silent leak."""
    with pytest.raises(ValueError, match=r"path pattern .* is not valid"):
        compile_paths([bad])


def test_secret_query_parameters_are_redacted_case_insensitively() -> None:
    """Keys, tokens and signatures in the query are stored as [REDACTED]; others are kept."""
    query = [
        ("subscription-key", "Q1"),
        ("API_KEY", "Q2"),
        ("apikey", "Q3"),
        ("access_token", "Q4"),
        ("sig", "Q5"),
        ("X-Amz-Signature", "Q6"),
        ("Ocp-Apim-Subscription-Key", "Q7"),
        ("key", "Q8"),
        ("api-version", "2024-06-01"),
    ]
    _, request = describe_request(
        "openai", "/v1", "POST", "/v1/chat/completions", query, b"{}", "application/json"
    )
    assert request["query"]["api-version"] == "2024-06-01"
    assert {value for name, value in request["query"].items() if name != "api-version"} == {
        REDACTED
    }


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
}


def test_subscription_key_and_body_secrets_never_reach_the_journal(tmp_path: Path) -> None:
    """An APIM subscription-key query secret and a hyphenated body key are not written."""
    query_secret = "APIM-QUERY-SECRET-7f3a9c"
    body_secret = "BODY-HYPHEN-SECRET-2b8d1e"
    path = tmp_path / "journal" / "runs.duckdb"
    path.parent.mkdir()
    with serve() as server:
        server.add(Reply(body=CHAT))
        client = redrive.wrap(
            openai.OpenAI(
                api_key="sk-test",
                base_url=server.url + "/v1",
                max_retries=0,
                default_query={"subscription-key": query_secret},
            )
        )
        journal = redrive.open_journal(str(path))
        try:
            with redrive.run(journal, "sec:1", redact=("$.body.metadata.api-key",)):
                client.chat.completions.create(
                    model="gpt-4o",
                    messages=[{"role": "user", "content": "hi"}],
                    metadata={"api-key": body_secret},
                )
        finally:
            journal.close()
            client.close()
        sent = b"".join(r.path.encode() + r.body for r in server.requests)
    assert query_secret.encode() in sent and body_secret.encode() in sent  # the test is live
    written = _all_bytes(tmp_path)
    assert b"gpt-4o" in written
    assert query_secret.encode() not in written
    assert body_secret.encode() not in written
