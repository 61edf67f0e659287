"""Every shared real-traffic cassette imports into a journal and replays through the real SDK.

The expected output of each call is what the SDK parses from the cassette's
original bytes (served by a mock transport); the replayed output comes from
the imported journal through ``redrive.wrap``; they must be equal.
"""

from __future__ import annotations

import inspect
import json
import urllib.parse
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import redrive
from redrive.recorders.cassettes import CassetteError, Interaction, import_cassette, load_cassette

CASSETTES = Path(__file__).resolve().parents[2] / ".." / "shared" / "realdata" / "cassettes"
FILES = sorted(CASSETTES.glob("*.yaml")) if CASSETTES.is_dir() else []
needs_shared = pytest.mark.skipif(
    not FILES, reason=f"shared real data not found at {CASSETTES} (clone shared/ next to the repo)"
)


def _client(provider: str, transport: Any) -> Any:
    http = httpx2.Client(transport=transport)
    if provider == "anthropic":
        return anthropic.Anthropic(api_key="sk-ant-x", http_client=http, max_retries=0)
    return openai.OpenAI(api_key="sk-x", http_client=http, max_retries=0)


def _method(client: Any, uri: str) -> Any:
    path = uri.partition("?")[0]
    if path.endswith("/chat/completions"):
        return client.chat.completions.create
    if path.endswith("/responses"):
        return client.responses.create
    if path.endswith("/messages"):
        return client.messages.create
    raise AssertionError(f"no SDK call for {path}")


def _call(client: Any, item: Interaction) -> Any:
    """Make the SDK call that sends this interaction's request; return comparable output."""
    body = json.loads(item.request_body)
    create = _method(client, item.uri)
    known = set(inspect.signature(create).parameters)
    kwargs = {k: v for k, v in body.items() if k in known}
    extra = {k: v for k, v in body.items() if k not in known}
    try:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(item.uri).query))
        out = create(**kwargs, extra_body=extra or None, extra_query=query or None)
        if body.get("stream"):
            return ["event", *[event.model_dump() for event in out]]
        return ["object", out.model_dump()]
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        return ["error", type(exc).__name__, exc.status_code, exc.body, str(exc)]


def _provider(item: Interaction) -> str:
    return "anthropic" if "anthropic.com" in item.uri else "openai"


def _expected(items: list[Interaction]) -> list[Any]:
    queue = list(items)

    def handler(request: httpx2.Request) -> httpx2.Response:
        item = queue.pop(0)
        return httpx2.Response(item.status, headers=item.honest_headers(), content=item.body)

    client = _client(_provider(items[0]), httpx2.MockTransport(handler))
    try:
        return [_call(client, item) for item in items]
    finally:
        client.close()


def _replayed(items: list[Interaction], journal: Any, run_id: str) -> list[Any]:
    def offline(request: httpx2.Request) -> httpx2.Response:
        raise AssertionError(f"replay sent a request: {request.method} {request.url}")

    client = redrive.wrap(_client(_provider(items[0]), httpx2.MockTransport(offline)))
    try:
        with redrive.run(journal, run_id, live=False):
            return [_call(client, item) for item in items]
        raise AssertionError(f"run {run_id} suspended instead of replaying")  # __exit__ -> bool
    finally:
        client.close()


@needs_shared
def test_all_seventeen_cassettes_are_present() -> None:
    """The shared data holds the 17 cassettes this suite replays (none silently missing)."""
    assert len(FILES) == 17


@needs_shared
@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_cassette_replays_through_the_sdk_as_parsed_from_the_original(path: Path) -> None:
    """The imported run replays each call with the output the SDK parses from the original."""
    journal = redrive.open_journal(":memory:")
    run_id = import_cassette(path, journal)
    items = load_cassette(path)
    expected = _expected(items)
    assert _replayed(items, journal, run_id) == expected
    assert len(expected) == len(items)


def test_cassette_without_interactions_is_a_clear_error(tmp_path: Path) -> None:
    """A YAML file that is not a cassette raises CassetteError naming the file and the cause."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("hello: world\n")
    with pytest.raises(CassetteError, match=r"bad\.yaml: no 'interactions' list"):
        import_cassette(bad, redrive.open_journal(":memory:"))


def test_cassette_of_unknown_host_is_a_clear_error(tmp_path: Path) -> None:
    """An interaction with a host that is no model API raises CassetteError saying so."""
    bad = tmp_path / "other.yaml"
    bad.write_text(
        "interactions:\n- request: {method: GET, uri: 'https://example.com/x', body: null}\n"
        "  response: {status: {code: 200, message: OK}, headers: {}, body: {string: ''}}\n"
    )
    with pytest.raises(CassetteError, match="not an OpenAI or Anthropic API host"):
        import_cassette(bad, redrive.open_journal(":memory:"))


def test_imported_headers_are_scrubbed(tmp_path: Path) -> None:
    """Cookies and organization ids in a cassette's response are not imported."""
    cassette = tmp_path / "c.yaml"
    cassette.write_text(
        "interactions:\n- request: {method: POST, uri: 'https://api.openai.com/v1/embeddings',"
        ' body: \'{"input": "a", "model": "m"}\'}\n'
        "  response:\n    status: {code: 200, message: OK}\n"
        "    headers: {Set-Cookie: ['__cf_bm=SECRET1'], openai-organization: [org-SECRET2],"
        " Content-Type: [application/json]}\n"
        "    body: {string: '{\"data\": []}'}\n"
    )
    journal = redrive.open_journal(":memory:")
    run_id = import_cassette(cassette, journal)
    written = b"".join(f.payload for f in journal.frames(run_id))
    assert b"SECRET1" not in written and b"SECRET2" not in written
    assert b"application/json" in written


@needs_shared
def test_responses_stream_helper_replays_the_same_events() -> None:
    """client.responses.stream() on an imported Responses stream yields the original events."""
    path = CASSETTES / "crewai__openai_responses_stream.yaml"
    item = load_cassette(path)[0]
    body = json.loads(item.request_body)
    kwargs = {k: v for k, v in body.items() if k != "stream"}

    def events(client: Any) -> list[Any]:
        with client.responses.stream(**kwargs) as stream:
            seen = [event.model_dump(warnings=False) for event in stream]
            return [seen, stream.get_final_response().model_dump(warnings=False)]

    original = _client(
        "openai",
        httpx2.MockTransport(
            lambda request: httpx2.Response(
                item.status, headers=item.honest_headers(), content=item.body
            )
        ),
    )
    expected = events(original)
    original.close()
    journal = redrive.open_journal(":memory:")
    run_id = import_cassette(path, journal)
    wrapped = redrive.wrap(
        _client("openai", httpx2.MockTransport(lambda request: httpx2.Response(599)))
    )
    with redrive.run(journal, run_id, live=False):
        assert events(wrapped) == expected
    wrapped.close()
    assert len(expected[0]) > 3


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "interactions: [ {request: 1},",
            r"not readable YAML: line 2, column 1: expected the node",
        ),
        (
            "interactions: 5",
            r"'interactions' must be a non-empty list of request/response mappings",
        ),
        ("interactions: []", r"'interactions' must be a non-empty list"),
        ("interactions: [5]", r"interaction 0: expected a mapping with 'request' and 'response'"),
        (
            "interactions: [{request: 1}]",
            r"interaction 0: 'request' must be a mapping, found int 1",
        ),
        (
            "interactions: [{request: {method: POST, uri: 'https://api.openai.com/v1/x'}}]",
            r"interaction 0: 'response' must be a mapping, found nothing",
        ),
        (
            "interactions: [{request: {method: 5, uri: 'https://api.openai.com/v1/x'},"
            " response: {status: {code: 200}}}]",
            r"needs a text request\.method",
        ),
        (
            "interactions: [{request: {method: POST, uri: 'https://api.openai.com/v1/x'},"
            " response: {status: {code: true}}}]",
            r"status=True",
        ),
        (
            "interactions: [{request: {method: POST, uri: 'https://api.openai.com/v1/x'},"
            " response: {status: {code: 200}, headers: [1, 2]}}]",
            r"interaction 0 response: headers must be a mapping",
        ),
        (
            "interactions: [{request: {method: POST, uri: 'https://api.openai.com/v1/x',"
            " parsed_body: {a: 2001-01-01}}, response: {status: {code: 200}}}]",
            r"interaction 0 request: parsed_body is not JSON data",
        ),
        (
            "interactions: [{request: {method: POST, uri: 'https://api.openai.com/v1/x',"
            " body: {string: [1]}}, response: {status: {code: 200}}}]",
            r"interaction 0 request: the body is a list",
        ),
        (
            "interactions: [{request: {method: POST, uri: 'http://[::1/x'},"
            " response: {status: {code: 200}}}]",
            r"interaction 0: the URI .* is malformed",
        ),
    ],
)
def test_malformed_cassette_structure_is_a_cassette_error(
    tmp_path: Path, content: str, expected: str
) -> None:
    """Every malformed shape raises CassetteError naming the file and the fault, nothing else."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(content + "\n")
    with pytest.raises(CassetteError, match=r"bad\.yaml.*" + expected):
        import_cassette(bad, redrive.open_journal(":memory:"))


def test_cassette_that_is_not_utf8_is_a_cassette_error(tmp_path: Path) -> None:
    """A binary file raises CassetteError saying it is not UTF-8 text."""
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe\x00interactions")
    with pytest.raises(CassetteError, match=r"bin\.yaml: .*byte 0 is not UTF-8 text"):
        load_cassette(bad)
