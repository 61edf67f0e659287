"""Any JSON a provider accepts is accepted (issue 27, what to build, item 7).

The match view, the canonical encoding, the scrubber, the provider views,
usage and span attributes, the timeline page, ``show``'s step text, the
fingerprint, the importer and a whole record-then-replay are fed arbitrary
JSON at every request and response position (:mod:`tests.json_strategies`):
none raises a ``TypeError``/``KeyError``/``AttributeError``/``ValueError`` of
its own, and a recorded exchange replays, matched, with byte-identical bytes.
The record-then-replay property runs through a wrapped httpx client with an
in-process transport (fast); ``test_nullable_schema`` and the SDK property at
the end go through the real SDKs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import redrive
from redrive._jsontext import MAX_BODY_DEPTH
from redrive._otel_spans import _CallIds, _response_body, model_attributes
from redrive._scrub import DEFAULT, Scrubber
from redrive.cli._steps import read_steps, response_text
from redrive.frames import call_key, canonical, decode, encode
from redrive.recorders._provider import MODEL_ID_PATHS
from redrive.recorders._recorder import HttpRecorder
from redrive.recorders.anthropic import anthropic_view
from redrive.recorders.cassettes import import_cassette
from redrive.recorders.openai import openai_view
from redrive.replay import read_fingerprint
from redrive.replay._policy import compile_paths, match_view, scrubber
from redrive.replay._timeline import page, run_data
from tests.conftest import examples
from tests.json_strategies import (
    json_values,
    nested,
    nested_text,
    openai_chat_request,
    request_bodies,
    response_bodies,
    sse_streams,
)
from tests.sdkserver import Reply, ScriptServer, serve

_FAST = settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
_SLOW = settings(max_examples=6, suppress_health_check=[HealthCheck.too_slow], deadline=None)
_PATHS = ("/chat/completions", "/responses", "/v1/messages", "/embeddings", "/x")

#: A streamed reply whose event holds a credential-named field with nothing in it (found by
#: the random profile): it was replayed with ``"[REDACTED]"`` in place of ``[]``.
_EMPTY_CREDENTIAL_EVENT = (
    200,
    {"content-type": "text/event-stream"},
    b'data: {"type": {"api_key": []}, "message": {"usage": {"input_tokens": 1}}}\n\n'
    b"data: [DONE]\n\n",
)


def _stored_request(body: Any, path: str = "/chat/completions") -> dict[str, Any]:
    return {"method": "POST", "path": path, "query": {}, "body": body}


def _strict_json(text: str) -> Any:
    """Parse as JSON a browser parses: NaN and Infinity are not JSON."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@_FAST
@given(body=request_bodies, provider=st.sampled_from(("openai", "anthropic", "http")))
def test_match_view_takes_any_request(body: Any, provider: str) -> None:
    """The match view of any request (every kind, each provider's id paths) is a canonical tree
    whose key is stable; a request never raises in it."""
    request = canonical(_stored_request(body))
    ignore = compile_paths(MODEL_ID_PATHS.get(provider, ()))
    for kind in ("model", "tool", "value"):
        view = match_view(request, ignore, kind=kind)
        assert encode(decode(encode(view))) == encode(view)
        assert call_key("m", view, tree=True) == call_key(
            "m", match_view(request, ignore, kind=kind)
        )


@_FAST
@given(body=request_bodies)
def test_match_view_keeps_every_byte_that_is_no_model_minted_id(body: Any) -> None:
    """What the view leaves out is only ids: a changed value anywhere else changes the key.

    Replacing the body's ``model`` (a string, a list, anything) always changes the key.
    """
    request = canonical(_stored_request(body))
    other = canonical(_stored_request({**body, "model": ["another", None]}))
    if canonical(body).get("model") == ["another", None]:
        return
    assert call_key("m", match_view(request)) != call_key("m", match_view(other))


@_FAST
@given(value=json_values)
def test_canonical_round_trip_of_any_json(value: Any) -> None:
    """encode -> decode gives the value back (``-0.0`` as ``0.0``), and the same bytes again."""
    data = encode(value)
    back = decode(data)
    assert back == value
    assert encode(back) == data == encode(canonical(value))


@pytest.mark.parametrize("depth", [10, MAX_BODY_DEPTH, MAX_BODY_DEPTH + 1, 3000])
def test_a_body_of_any_depth_records_and_replays(depth: int) -> None:
    """A request and a response nested to any depth record and replay (a body deeper than a
    journal stores is kept as opaque text, matched by its bytes; it was a TypeError, and past
    the parser's recursion limit a RecursionError)."""
    body = ('{"model": "m", "messages": ' + nested_text(depth) + "}").encode()
    data = nested_text(depth).encode()
    if depth < 100:
        assert json.loads(data) == nested(depth, "leaf")

    def live(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=data)

    journal = redrive.open_journal(":memory:")
    for replay in (False, True):
        with _client("openai", live) as client, redrive.run(journal, "deep", live=not replay):
            assert _send(client, "/chat/completions", body) == (200, data)
    steps, _info = read_steps(journal.frames("deep"))
    stored = steps[0]["args"]["body"]
    assert ("messages" in stored) == (depth <= MAX_BODY_DEPTH - 1)


@_FAST
@given(value=json_values, as_text=st.booleans(), patterns=st.booleans())
def test_scrubber_takes_any_json(value: Any, as_text: bool, patterns: bool) -> None:
    """The scrubber (defaults, and with ``redact=`` paths) takes any JSON value, or JSON text,
    or an event stream of it, and gives back something that still encodes."""
    subject: Any = value
    if as_text:
        subject = {"body": json.dumps(value), "chunks": [f"data: {json.dumps(value)}\n\n"]}
    scrub = scrubber(("$..type", "$..id", "$.body.messages[*].content")) if patterns else DEFAULT
    for kind in ("model_request", "model_response", "tool_done", "note"):
        out = scrub.payload(kind, canonical({"args": subject, "response": subject}))
        encode(out)
    encode(Scrubber(compile_paths(("$..content",)), defaults=False).value(canonical(subject)))


@st.composite
def exchanges(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(provider, stored request, stored response payload) of any shape."""
    provider = draw(st.sampled_from(("openai", "anthropic")))
    request = _stored_request(draw(request_bodies), draw(st.sampled_from(_PATHS)))
    status = draw(st.sampled_from((200, 400, 404)))
    if draw(st.booleans()):
        payload = {
            "status": status,
            "headers": [],
            "stream": True,
            "body": None,
            "chunks": draw(sse_streams()),
        }
    else:
        body = draw(response_bodies)
        payload = {
            "status": status,
            "headers": [["content-type", "application/json"]],
            "stream": False,
            "body": json.dumps(body),
            "chunks": None,
        }
    return provider, request, payload


@_FAST
@given(exchange=exchanges())
def test_provider_views_usage_and_spans_take_any_exchange(
    exchange: tuple[str, dict[str, Any], dict[str, Any]],
) -> None:
    """The semantic views read any request and response without failing (no ``view_error``);
    usage, span attributes, tool-call ids and ``show``'s text are read from them."""
    provider, request, payload = exchange
    view_fn = {"openai": openai_view, "anthropic": anthropic_view}[provider]
    view = HttpRecorder(provider=provider, view=view_fn).make_view(request, payload)
    assert "view_error" not in view, view["view_error"]
    encode(view)
    outcome = {"response": payload, "view": view}
    name, attributes, _error = model_attributes(
        f"{provider}:POST {request['path']}", {"args": request}, outcome
    )
    assert isinstance(name, str)
    for value in attributes.values():
        assert value is None or isinstance(value, str | bool | int | float | list), value
    _response_body(payload)
    ids = _CallIds()
    ids.model({"args": request}, outcome)
    ids.take("search", {"q": 1})
    response_text(outcome)


@st.composite
def responses(draw: st.DrawFn) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body bytes): JSON of any shape, or an event stream of it."""
    status = draw(st.sampled_from((200, 201, 400, 422)))
    if draw(st.booleans()):
        events = draw(sse_streams())
        terminal = draw(
            st.sampled_from(
                (
                    "data: [DONE]\n\n",
                    'event: message_stop\ndata: {"type": "message_stop"}\n\n',
                    'data: {"type": "response.completed", "response": {}}\n\n',
                )
            )
        )
        return status, {"content-type": "text/event-stream"}, "".join([*events, terminal]).encode()
    return status, {"content-type": "application/json"}, json.dumps(draw(response_bodies)).encode()


def _unscrubbed(data: bytes) -> bool:
    """Whether the journal's default scrubber leaves a body as it is.

    Asked of the body's text, of each event, and of each event's ``data:`` JSON as a body
    of its own: a stream's event is scrubbed as that JSON is (the stream rule and the
    body rule agree), so a replayed stream must differ only where such a body would.
    """
    text = data.decode()
    events = text.split("\n\n")
    datas = [line[5:].strip() for event in events for line in event.split("\n")]
    return all(
        DEFAULT.value(part) == part
        for part in (text, *events, *(d for d in datas if d[:1] in "{["))
    )


def _client(provider: str, handler: Any) -> httpx2.Client:
    client = httpx2.Client(transport=httpx2.MockTransport(handler), base_url="http://model.test/v1")
    return redrive.wrap(client, provider=provider)


def _send(client: httpx2.Client, path: str, body: Any) -> tuple[int, bytes]:
    """POST ``body`` (JSON text, or a value sent as its JSON); return status and body bytes."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.post(path, content=content, headers={"content-type": "application/json"})
    return response.status_code, response.read()


@settings(_FAST, max_examples=examples(default=40, ci=50, thorough=1000))
@given(
    body=request_bodies,
    reply=responses(),
    provider=st.sampled_from(("openai", "anthropic", "http")),
    path=st.sampled_from(_PATHS),
)
@example(body={}, reply=_EMPTY_CREDENTIAL_EVENT, provider="openai", path="/chat/completions")
def test_any_exchange_records_then_replays_byte_identical(
    body: Any, reply: tuple[int, dict[str, str], bytes], provider: str, path: str
) -> None:
    """A request of any shape is recorded live, then replayed from the journal: it matches,
    nothing is sent, and the response bytes are the same. The run then reads as a timeline
    page (strict JSON), as ``show``'s steps and as a fingerprint."""
    status, headers, data = reply
    sent: list[bytes] = []

    def live(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.read())
        return httpx2.Response(status, headers=headers, content=data)

    journal = redrive.open_journal(":memory:")
    with _client(provider, live) as client, redrive.run(journal, "any"):
        recorded = _send(client, path, body)
    with _client(provider, live) as client, redrive.run(journal, "any", live=False) as run:
        replayed = _send(client, path, body)
    assert len(sent) == 1 and run.replayed_steps == 1
    assert recorded == (status, data)  # the live loop gets the response as sent
    if _unscrubbed(data):  # (what the default scrubber masks is the scrubber's matter)
        assert replayed == recorded
    else:
        assert replayed[0] == status
    frames = list(journal.frames("any"))
    html_page = page([run_data(frames, "any")], None)
    script = html_page.split('id="redrive-data">', 1)[1].split("</script>", 1)[0]
    _strict_json(script)
    steps, _info = read_steps(frames)
    json.dumps(steps, default=repr)
    read_fingerprint("any", frames)


def _cassette(
    tmp_path: Path, body: Any, reply: tuple[int, dict[str, str], bytes], parsed: bool
) -> Path:
    status, headers, data = reply
    request: dict[str, Any] = {
        "method": "POST",
        "uri": "https://api.openai.com/v1/chat/completions",
        "headers": {"content-type": ["application/json"]},
    }
    response: dict[str, Any] = {
        "status": {"code": status, "message": "x"},
        "headers": {k: [v] for k, v in headers.items()},
    }
    if parsed and headers["content-type"] == "application/json":  # pydantic-ai's dialect
        request["parsed_body"] = body
        response["parsed_body"] = json.loads(data)
    else:
        request["body"] = json.dumps(body)
        response["body"] = {"string": data.decode()}
    path = tmp_path / "any.json"
    path.write_text(json.dumps({"interactions": [{"request": request, "response": response}]}))
    return path


@settings(_FAST, max_examples=examples(default=25, ci=40, thorough=1000))
@given(body=request_bodies, reply=responses(), parsed=st.booleans())
@example(body={}, reply=_EMPTY_CREDENTIAL_EVENT, parsed=False)
def test_any_cassette_imports_then_replays_byte_identical(
    tmp_path_factory: pytest.TempPathFactory,
    body: Any,
    reply: tuple[int, dict[str, str], bytes],
    parsed: bool,
) -> None:
    """A cassette of any request and response body imports, and replays what it holds."""
    path = _cassette(tmp_path_factory.mktemp("c"), body, reply, parsed)
    journal = redrive.open_journal(":memory:")
    run_id = import_cassette(path, journal)

    def offline(request: httpx2.Request) -> httpx2.Response:
        raise AssertionError(f"replay sent {request.method} {request.url}")

    with _client("openai", offline) as client, redrive.run(journal, run_id, live=False):
        status, data = _send(client, "/chat/completions", body)
    assert status == reply[0]
    if _unscrubbed(reply[2]):
        if parsed and reply[1]["content-type"] == "application/json":
            assert json.loads(data) == json.loads(reply[2])
        else:
            assert data == reply[2]


@pytest.fixture(scope="module")
def sdk_server() -> Any:
    with serve() as server:
        yield server


@_SLOW
@given(body=openai_chat_request(), reply=response_bodies)
def test_any_chat_request_through_the_openai_sdk(
    sdk_server: ScriptServer, body: dict[str, Any], reply: Any
) -> None:
    """The real SDK sends a chat request of any shape (``extra_body``) and gets any JSON back:
    recorded, then replayed byte for byte."""
    client = redrive.wrap(
        openai.OpenAI(api_key="sk-x", base_url=sdk_server.url + "/v1", max_retries=0)
    )
    journal = redrive.open_journal(":memory:")
    before = len(sdk_server.requests)
    sdk_server.add(Reply(body=reply))
    outs = []
    with client:
        for live in (True, False):
            with redrive.run(journal, "sdk", live=live):
                raw = client.chat.completions.with_raw_response.create(
                    model="gpt-4o", messages=[], extra_body=body
                )
                outs.append((raw.http_response.status_code, raw.http_response.read()))
    assert len(sdk_server.requests) == before + 1
    if _unscrubbed(outs[0][1]):
        assert outs[0] == outs[1]
    assert outs[0][0] == outs[1][0]
    sent = json.loads(sdk_server.requests[-1].body)
    assert sent == {"model": "gpt-4o", "messages": [], **body}
