"""Steps are matched by the endpoint they call, not by where a base URL ends (issue 27.6).

A cassette recorded at ``/v1beta/openai/chat/completions`` (Gemini's
OpenAI-compatible endpoint) replays through the clients users configure for
it and for the other compatible hosts: an SDK client with the host's base
URL, an httpx client handed to the SDK (as frameworks do; it has no base URL,
so it sees the whole path), Azure's client adding ``/deployments/{model}``
itself. A recording made through one client configuration replays through
another. Different endpoints never match.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive.recorders._endpoints import ENDPOINTS
from redrive.recorders._exchange import describe_request
from redrive.recorders.cassettes import import_cassette

CHAT = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
ASK = [{"role": "user", "content": "hi"}]


def _offline(request: httpx2.Request) -> httpx2.Response:
    raise AssertionError(f"replay sent a request: {request.method} {request.url}")


def _http() -> httpx2.Client:
    return httpx2.Client(transport=httpx2.MockTransport(_offline))


def _openai(base_url: str) -> Any:
    """An OpenAI SDK client at ``base_url``, wrapped."""
    return redrive.wrap(
        openai.OpenAI(api_key="sk-x", base_url=base_url, http_client=_http(), max_retries=0)
    )


def _openai_http(base_url: str) -> Any:
    """The framework way: the SDK gets a wrapped httpx client (which has no base URL)."""
    http = redrive.wrap(_http(), provider="openai")
    return openai.OpenAI(api_key="sk-x", base_url=base_url, http_client=http, max_retries=0)


def _azure(deployment: str | None) -> Callable[[], Any]:
    def make() -> Any:
        return redrive.wrap(
            openai.AzureOpenAI(
                api_key="x",
                azure_endpoint="https://res.openai.azure.com",
                azure_deployment=deployment,
                api_version="2024-10-21",
                http_client=_http(),
                max_retries=0,
            )
        )

    return make


def _anthropic_http(base_url: str) -> Any:
    http = redrive.wrap(_http(), provider="anthropic")
    return anthropic.Anthropic(api_key="x", base_url=base_url, http_client=http, max_retries=0)


def _anthropic(base_url: str) -> Any:
    return redrive.wrap(
        anthropic.Anthropic(api_key="x", base_url=base_url, http_client=_http(), max_retries=0)
    )


#: (cassette URI, how users configure a client for it).
OPENAI_HOSTS: list[tuple[str, Callable[[], Any]]] = [
    (
        "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
        lambda: _openai("https://generativelanguage.googleapis.com/v1beta/openai/"),
    ),
    (
        "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
        lambda: _openai_http("https://generativelanguage.googleapis.com/v1beta/openai/"),
    ),
    (
        "https://res.openai.azure.com/openai/deployments/m/chat/completions?api-version=2024-10-21",
        _azure(None),
    ),
    (
        "https://res.openai.azure.com/openai/deployments/m/chat/completions?api-version=2024-10-21",
        _azure("m"),
    ),
    (
        "https://openrouter.ai/api/v1/chat/completions",
        lambda: _openai_http("https://openrouter.ai/api/v1"),
    ),
    (
        "https://api.groq.com/openai/v1/chat/completions",
        lambda: _openai_http("https://api.groq.com/openai/v1"),
    ),
    (
        "https://api.together.xyz/v1/chat/completions",
        lambda: _openai("https://api.together.xyz/v1"),
    ),
    (
        "http://localhost:11434/v1/chat/completions",
        lambda: _openai_http("http://localhost:11434/v1"),
    ),
    (
        "http://0.0.0.0:4000/chat/completions",
        lambda: _openai_http("http://0.0.0.0:4000"),
    ),  # litellm
    ("http://0.0.0.0:4000/v1/chat/completions", lambda: _openai("http://0.0.0.0:4000")),  # litellm
]


def _cassette(tmp_path: Path, uri: str, request: Any, response: Any) -> Path:
    interaction = {
        "request": {
            "method": "POST",
            "uri": uri,
            "body": {"string": json.dumps(request)},
            "headers": {"Content-Type": ["application/json"]},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["application/json"]},
            "body": {"string": json.dumps(response)},
        },
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"interactions": [interaction], "version": 1}))
    return path


@pytest.mark.parametrize(("uri", "make"), OPENAI_HOSTS)
def test_a_compatible_host_cassette_replays_through_its_users_client(
    tmp_path: Path, uri: str, make: Callable[[], Any]
) -> None:
    """Each OpenAI-compatible host's cassette replays through the client its users configure."""
    journal = redrive.open_journal(":memory:")
    request = {"messages": ASK, "model": "m"}
    run_id = import_cassette(_cassette(tmp_path, uri, request, CHAT), journal)
    with redrive.run(journal, run_id, live=False):
        reply = make().chat.completions.create(model="m", messages=ASK)
    assert reply.choices[0].message.content == "ok"


@pytest.mark.parametrize(
    ("uri", "make"),
    [
        (
            "https://api.anthropic.com/v1/messages",
            lambda: _anthropic_http("https://api.anthropic.com"),
        ),
        ("https://openrouter.ai/api/v1/messages", lambda: _anthropic("https://openrouter.ai/api")),
        (
            "https://openrouter.ai/api/v1/messages",
            lambda: _anthropic_http("https://openrouter.ai/api"),
        ),
    ],
)
def test_an_anthropic_compatible_cassette_replays_through_its_users_client(
    tmp_path: Path, uri: str, make: Callable[[], Any]
) -> None:
    """The Anthropic API under a prefix replays through an SDK client or a handed httpx client."""
    journal = redrive.open_journal(":memory:")
    request = {"max_tokens": 8, "messages": ASK, "model": "m"}
    run_id = import_cassette(_cassette(tmp_path, uri, request, MESSAGE), journal)
    with redrive.run(journal, run_id, live=False):
        reply = make().messages.create(model="m", max_tokens=8, messages=ASK)
    assert reply.content[0].text == "ok"


def test_recorded_through_one_configuration_replays_through_another() -> None:
    """A live recording via Gemini's base URL replays via an httpx client under another prefix."""
    sent: list[str] = []

    def server(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.url.path)
        return httpx2.Response(200, json=CHAT)

    live = redrive.wrap(
        openai.OpenAI(
            api_key="x",
            base_url="https://generativelanguage.googleapis.com/v1beta/openai/",
            http_client=httpx2.Client(transport=httpx2.MockTransport(server)),
            max_retries=0,
        )
    )
    journal = redrive.open_journal(":memory:")
    with redrive.run(journal, "r"):
        live.chat.completions.create(model="m", messages=ASK)
    with redrive.run(journal, "r", live=False):
        reply = _openai_http("https://proxy.internal/llm/openai/v1").chat.completions.create(
            model="m", messages=ASK
        )
    assert reply.choices[0].message.content == "ok"
    assert sent == ["/v1beta/openai/chat/completions"]
    names = [f.name for f in journal.frames("r") if f.kind == "model_request"]
    assert names == ["openai:POST /chat/completions"]


def test_another_endpoint_diverges_naming_both_endpoints(tmp_path: Path) -> None:
    """Asking another endpoint under the same prefix is a divergence that names both."""
    journal = redrive.open_journal(":memory:")
    uri = "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions"
    run_id = import_cassette(
        _cassette(tmp_path, uri, {"messages": ASK, "model": "m"}, CHAT), journal
    )
    client = _openai_http("https://generativelanguage.googleapis.com/v1beta/openai/")
    with pytest.raises(redrive.DivergenceError) as info, redrive.run(journal, run_id, live=False):
        client.embeddings.create(model="m", input="hi")
    message = str(info.value)
    assert (
        "'openai:POST /embeddings' where the journal has model 'openai:POST /chat/completions'"
        in message
    )


# -- the kind: any prefix, any base URL split, the known endpoints -----------------------------

#: Words no endpoint starts with (a prefix made of them never hides an endpoint).
_STARTS = {shape[0] for shapes in ENDPOINTS.values() for shape in shapes} | {"messages", "complete"}
_WORD = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,9}", fullmatch=True).filter(
    lambda w: w not in _STARTS and w != "deployments"
)
#: A prefix segment: a word, or Azure's ``deployments/{name}`` (the name may be any word).
_PART = st.one_of(
    _WORD.map(lambda w: [w]),
    st.sampled_from(["chat", "responses", "embeddings", "m"]).map(lambda d: ["deployments", d]),
)


@st.composite
def _placed(draw: st.DrawFn, family: str, endpoint: list[str]) -> tuple[str, str]:
    """``(base path, request path)``: a random prefix, cut anywhere into the client's base URL."""
    prefix = [segment for part in draw(st.lists(_PART, max_size=4)) for segment in part]
    cut = draw(st.integers(0, len(prefix)))
    base = "/" + "/".join(prefix[:cut]) + draw(st.sampled_from(["", "/"]))
    return base, "/" + "/".join([*prefix, *endpoint])


def _endpoints() -> st.SearchStrategy[tuple[str, list[str]]]:
    tails = st.lists(_WORD, max_size=2)
    return st.sampled_from(
        [(family, list(shape)) for family, shapes in ENDPOINTS.items() for shape in shapes]
    ).flatmap(lambda fe: tails.map(lambda tail: (fe[0], fe[1] + tail)))


def _describe(family: str, base: str, path: str, body: bytes) -> tuple[str, dict[str, Any]]:
    return describe_request(family, base, "POST", path, [("v", "1")], body, "application/json")


@given(data=st.data(), endpoint=_endpoints())
def test_any_prefix_records_and_replays_the_same_step(data: st.DataObject, endpoint: Any) -> None:
    """Recorded under prefix A and replayed under prefix B, an endpoint call is the same step."""
    family, segments = endpoint
    base_a, path_a = data.draw(_placed(family, segments), label="recorded at")
    base_b, path_b = data.draw(_placed(family, segments), label="replayed at")
    body = b'{"model": "m"}'
    recorded = _describe(family, base_a, path_a, body)
    assert recorded == _describe(family, base_b, path_b, body)
    assert recorded[0] == f"{family}:POST /" + "/".join(segments)


@given(data=st.data(), one=_endpoints(), other=_endpoints())
def test_different_endpoints_never_match(data: st.DataObject, one: Any, other: Any) -> None:
    """Two calls of different endpoints (of one family) are different steps, under any prefixes."""
    if one[0] != other[0] or one[1] == other[1]:
        return
    family = one[0]
    base_a, path_a = data.draw(_placed(family, one[1]))
    base_b, path_b = data.draw(_placed(family, other[1]))
    assert (
        _describe(family, base_a, path_a, b"{}")[0] != _describe(family, base_b, path_b, b"{}")[0]
    )


DOC = Path(__file__).resolve().parents[2] / "docs" / "http-clients.md"


def test_the_docs_page_runs() -> None:
    """Every code block of docs/http-clients.md runs, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
