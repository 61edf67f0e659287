"""Cassettes as people have them: any Content-Encoding, other hosts, non-model calls, JSON files.

Each cassette here is built in the test, written as YAML (bodies as ``!!binary``
where they are bytes) or JSON, imported, and replayed through a wrapped SDK
client whose transport fails any request: the replayed body must equal the
body the server sent before any content coding, or the import must be
refused with a message naming the interaction (index, method and URL).
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import redrive
from redrive.frames import Kind, decode
from redrive.recorders._exchange import decodable_codings
from redrive.recorders.cassettes import (
    SKIPPED_NOTE,
    CassetteError,
    import_cassette,
    load_cassette,
)

#: (provider, client base URL, endpoint path after it, query) of model APIs and look-alikes.
HOSTS = [
    ("openai", "https://api.openai.com/v1", "/chat/completions", {}),
    ("openai", "https://api.openai.com/v1", "/responses", {}),
    ("openai", "http://localhost:11434/v1", "/chat/completions", {}),  # Ollama
    ("openai", "http://127.0.0.1:8000/v1", "/completions", {}),  # vLLM
    ("openai", "https://generativelanguage.googleapis.com/v1beta/openai", "/chat/completions", {}),
    ("openai", "https://openrouter.ai/api/v1", "/chat/completions", {}),
    (
        "openai",
        "https://res.openai.azure.com/openai/deployments/gpt-4o",
        "/chat/completions",
        {"api-version": "2024-10-21"},
    ),
    ("anthropic", "https://api.anthropic.com", "/v1/messages", {}),
    ("anthropic", "https://openrouter.ai/api", "/v1/messages", {}),
]


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


#: coding -> how a server applies it (br and zstd only where a codec is installed).
ENCODERS: dict[str, Any] = {
    "identity": lambda data: data,
    "gzip": gzip.compress,
    "deflate": zlib.compress,
}
try:  # pragma: no cover - only with brotli installed
    import brotli

    ENCODERS["br"] = brotli.compress
except ImportError:
    pass
try:  # pragma: no cover - only with zstandard installed
    import zstandard

    ENCODERS["zstd"] = zstandard.ZstdCompressor().compress
except ImportError:
    pass


def _interaction(
    method: str,
    uri: str,
    request: Any,
    status: int,
    headers: dict[str, list[str]],
    body: bytes | str,
) -> dict[str, Any]:
    return {
        "request": {
            "method": method,
            "uri": uri,
            "body": {"string": json.dumps(request) if request is not None else ""},
            "headers": {"Content-Type": ["application/json"]},
        },
        "response": {
            "status": {"code": status, "message": "OK"},
            "headers": headers,
            "body": {"string": body},
        },
    }


def _telemetry(n: int) -> dict[str, Any]:
    return _interaction(
        "POST",
        f"https://user:SECRET-PW@telemetry.example.com/api/v2/events?token=SECRET{n}",
        {"event": "step", "n": n},
        202,
        {"Content-Type": ["application/json"]},
        '{"ok": true}',
    )


def _write(tmp_path: Path, interactions: list[dict[str, Any]], fmt: str = "yaml") -> Path:
    path = tmp_path / f"c.{fmt}"
    data = {"interactions": interactions, "version": 1}
    if fmt == "json":
        path.write_text(json.dumps(data))
    else:
        path.write_text(yaml.safe_dump(data))
    return path


def _offline(request: httpx2.Request) -> httpx2.Response:
    raise AssertionError(f"replay sent a request: {request.method} {request.url}")


def _client(provider: str, base_url: str) -> Any:
    http = httpx2.Client(transport=httpx2.MockTransport(_offline))
    if provider == "anthropic":
        return anthropic.Anthropic(
            api_key="sk-ant-x", base_url=base_url, http_client=http, max_retries=0
        )
    return openai.OpenAI(api_key="sk-x", base_url=base_url, http_client=http, max_retries=0)


def _replay_body(journal: Any, run_id: str, calls: list[tuple[int, Any, Any]]) -> list[bytes]:
    """Replay ``(host index, request body, _)`` calls offline; return each response's bytes."""
    out = []
    with redrive.run(journal, run_id, live=False):
        for host, request, _ in calls:
            provider, base_url, path, query = HOSTS[host]
            client = redrive.wrap(_client(provider, base_url))
            response = client.post(
                path, cast_to=httpx2.Response, body=request, options={"params": query}
            )
            out.append(response.read())
    return out


def _uri(host: int) -> str:
    _, base_url, path, query = HOSTS[host]
    return base_url + path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


@st.composite
def cassettes(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[int, Any, Any]], Any]:
    """A cassette of model calls (random host, coding, stream or not) among telemetry calls.

    Returns ``(interactions, model calls (host, request, plain body), expected refusal)``;
    the refusal is ``(index, method, uri)`` of the first interaction that cannot be decoded.
    """
    interactions: list[dict[str, Any]] = []
    calls: list[tuple[int, Any, Any]] = []
    refusal = None
    for n in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            interactions.append(_telemetry(n))
        host = draw(st.integers(0, len(HOSTS) - 1))
        request = {"model": "m", "n": n, "input": draw(st.text(max_size=8))}
        stream = draw(st.booleans())
        text = draw(st.text(max_size=30))
        if stream:
            plain = (
                f"event: delta\ndata: {json.dumps({'n': n, 'text': text})}\n\ndata: [DONE]\n\n"
            ).encode()
            content_type = "text/event-stream; charset=utf-8"
        else:
            plain = json.dumps({"n": n, "text": text}, ensure_ascii=False).encode()
            content_type = "application/json"
        codings = draw(
            st.lists(
                st.sampled_from([*ENCODERS, "br", "zstd", "x-custom", "fake-gzip"]), max_size=2
            )
        )
        body = plain
        named = []
        honest = True
        for coding in codings:
            if coding == "fake-gzip":  # claims gzip, is not
                named.append("gzip")
                honest = False
            elif coding in ENCODERS:
                body = ENCODERS[coding](body)
                named.append(coding)
            else:  # a coding this machine cannot decode (br/zstd without their codec)
                named.append(coding)
                honest = False
        headers = {"Content-Type": [content_type]}
        if named:
            headers["Content-Encoding"] = [", ".join(named)]
        if draw(st.booleans()):  # vcrpy's older httpx stub: content stored decoded
            item = _interaction("POST", _uri(host), request, 200, headers, plain.decode())
            response = item["response"]
            del response["body"], response["status"]
            response.update(status_code=200, http_version="HTTP/1.1", content=plain.decode())
        else:
            item = _interaction("POST", _uri(host), request, 200, headers, body)
            if not honest and refusal is None:
                refusal = (len(interactions), "POST", _uri(host))
        interactions.append(item)
        calls.append((host, request, plain))
    return interactions, calls, refusal


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cassettes())
def test_random_cassettes_replay_their_bodies_or_are_refused_naming_the_interaction(
    tmp_path: Path, case: tuple[list[dict[str, Any]], list[tuple[int, Any, Any]], Any]
) -> None:
    """Any mix of codings, hosts and telemetry: replayed bodies are the plain ones, or a refusal."""
    interactions, calls, refusal = case
    textual = all(
        not isinstance(i["response"].get("body", {}).get("string"), bytes) for i in interactions
    )
    path = _write(tmp_path, interactions, "json" if textual else "yaml")
    event(f"written as {path.suffix}")
    journal = redrive.open_journal(":memory:")
    event("refused" if refusal is not None else "replayed")
    event(f"{len(interactions) - len(calls)} telemetry calls")
    if refusal is not None:
        index, method, uri = refusal
        with pytest.raises(CassetteError) as info:
            import_cassette(path, journal)
        message = str(info.value)
        assert f"interaction {index} ({method} {uri})" in message, message
        assert journal.get_run("cassette:c") is None
        return
    run_id = import_cassette(path, journal)
    assert _replay_body(journal, run_id, calls) == [plain for _, _, plain in calls]
    skipped = [
        decode(f.payload)["data"]
        for f in journal.frames(run_id)
        if f.kind == Kind.NOTE and f.name == SKIPPED_NOTE
    ]
    assert len(skipped) == len(interactions) - len(calls)
    written = b"".join(f.payload for f in journal.frames(run_id))
    assert b"SECRET" not in written  # the telemetry's token query value is hidden


@pytest.mark.parametrize(
    ("coding", "body", "uri", "expected"),
    [
        pytest.param(
            "br",
            b"\x1b\x0e\x00\xf8\xa5@\xc2\xaa\x10I\xea\x16\x85\x9c2\x00",
            "https://api.openai.com/v1/chat/completions",
            r"c\.yaml interaction 0 \(POST https://api\.openai\.com/v1/chat/completions\)"
            r": the response body cannot be decoded: .*br.*pip install brotli",
            marks=pytest.mark.skipif("br" in decodable_codings(), reason="brotli installed"),
            id="brotli-without-codec",
        ),
        pytest.param(
            "gzip",
            "not gzip",
            "https://api.anthropic.com/v1/messages?beta=true",
            r"c\.yaml interaction 0 \(POST https://api\.anthropic\.com/v1/messages\?beta=true\)"
            r": the response body cannot be decoded: the body is not gzip data",
            id="fake-gzip",
        ),
    ],
)
def test_undecodable_body_is_refused_at_import_naming_the_interaction(
    tmp_path: Path, coding: str, body: bytes | str, uri: str, expected: str
) -> None:
    """A body the import cannot decode is refused then, not when replay hands it to the SDK."""
    headers = {"Content-Type": ["application/json"], "Content-Encoding": [coding]}
    path = _write(tmp_path, [_interaction("POST", uri, {"model": "m"}, 200, headers, body)])
    with pytest.raises(CassetteError, match=expected):
        import_cassette(path, redrive.open_journal(":memory:"))


def test_every_coding_httpx_decodes_is_decoded() -> None:
    """The codings decoded on import are at least those the installed httpx decodes."""
    from httpx2._decoders import SUPPORTED_DECODERS

    assert set(SUPPORTED_DECODERS) <= decodable_codings()


def test_stacked_encodings_decode_last_applied_first(tmp_path: Path) -> None:
    """``Content-Encoding: deflate, gzip`` (deflate applied first) replays the plain body."""
    plain = b'{"id": "chatcmpl-1", "object": "chat.completion"}'
    headers = {"Content-Type": ["application/json"], "Content-Encoding": ["deflate", "gzip"]}
    body = gzip.compress(_raw_deflate(plain))
    path = _write(tmp_path, [_interaction("POST", _uri(0), {"model": "m"}, 200, headers, body)])
    journal = redrive.open_journal(":memory:")
    run_id = import_cassette(path, journal)
    assert _replay_body(journal, run_id, [(0, {"model": "m"}, plain)]) == [plain]


def test_json_cassette_is_read_without_pyyaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vcrpy ``serializer="json"`` cassette imports with PyYAML unimportable."""
    import sys

    monkeypatch.setitem(sys.modules, "yaml", None)
    plain = '{"id": "resp_1", "object": "response"}'
    headers = {"Content-Type": ["application/json"]}
    path = _write(
        tmp_path, [_interaction("POST", _uri(1), {"model": "m"}, 200, headers, plain)], "json"
    )
    journal = redrive.open_journal(":memory:")
    run_id = import_cassette(path, journal)
    assert _replay_body(journal, run_id, [(1, {"model": "m"}, None)]) == [plain.encode()]
    yaml_path = _write(tmp_path, [_telemetry(0)])
    with pytest.raises(ImportError, match=r"pip install 'redrive\[cassettes\]'"):
        load_cassette(yaml_path)


def test_provider_restricts_which_paths_are_model_calls(tmp_path: Path) -> None:
    """``provider="openai"`` skips an Anthropic-shaped path on another host; default keeps it."""
    headers = {"Content-Type": ["application/json"]}
    interactions = [
        _interaction("POST", _uri(2), {"model": "m"}, 200, headers, "{}"),
        _interaction("POST", _uri(8), {"model": "m"}, 200, headers, "{}"),
    ]
    path = _write(tmp_path, interactions)
    journal = redrive.open_journal(":memory:")
    both = import_cassette(path, journal, run_id="both")
    only = import_cassette(path, journal, run_id="only", provider="openai")
    names = {
        r: [f.name for f in journal.frames(r) if f.kind == Kind.MODEL_REQUEST] for r in (both, only)
    }
    assert names == {
        "both": ["openai:POST /chat/completions", "anthropic:POST /v1/messages"],
        "only": ["openai:POST /chat/completions"],
    }
    with pytest.raises(ValueError, match="provider must be"):
        import_cassette(path, journal, run_id="x", provider="gemini")  # type: ignore[arg-type]


def test_cassette_of_only_non_model_calls_is_refused(tmp_path: Path) -> None:
    """A cassette with nothing to replay is refused, naming its first interaction."""
    path = _write(tmp_path, [_telemetry(0), _telemetry(1)])
    with pytest.raises(
        CassetteError,
        match=r"no interaction is a model API call; interaction 0 "
        r"\(POST https://telemetry\.example\.com/api/v2/events\?token=\[REDACTED\]\)",
    ):
        import_cassette(path, redrive.open_journal(":memory:"))


def test_cli_lists_skipped_interactions_and_takes_a_provider(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """import-cassette says which interactions it skipped (text and JSON); --provider filters."""
    from redrive import cli

    headers = {"Content-Type": ["application/json"]}
    interactions = [
        _interaction("POST", _uri(4), {"model": "gemini"}, 200, headers, "{}"),
        _telemetry(7),
        _interaction("POST", _uri(8), {"model": "m"}, 200, headers, "{}"),
    ]
    path = _write(tmp_path, interactions)
    journal = str(tmp_path / "j.duckdb")
    code = cli.main(["--journal", journal, "import-cassette", str(path), "--run-id", "a"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_OK
    assert (
        "skipped interaction 1 (POST https://telemetry.example.com/api/v2/events?"
        "token=[REDACTED]): not a model API call" in out
    ), out
    argv = ["--json", "--journal", journal, "import-cassette", str(path), "--run-id", "b"]
    code = cli.main([*argv, "--provider", "openai"])
    data = json.loads(capsys.readouterr().out)
    assert code == cli.EXIT_OK
    assert [s["index"] for s in data["skipped"]] == [1, 2]


def test_cli_refuses_an_undecodable_body_as_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dishonest Content-Encoding is one CassetteError line naming the interaction, exit 65."""
    from redrive import cli

    headers = {"Content-Type": ["application/json"], "Content-Encoding": ["gzip"]}
    path = _write(tmp_path, [_interaction("POST", _uri(0), {"m": 1}, 200, headers, "not gzip")])
    code = cli.main(["--journal", str(tmp_path / "j.duckdb"), "import-cassette", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == cli.EXIT_DATA
    assert len(err) == 1 and err[0].startswith("redrive import-cassette: CassetteError: "), err
    assert "interaction 0 (POST https://api.openai.com/v1/chat/completions)" in err[0]


def test_bad_json_cassette_is_a_cassette_error(tmp_path: Path) -> None:
    """A ``.json`` cassette that is not JSON says so, with the parser's position."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"interactions": [')
    with pytest.raises(CassetteError, match=r"bad\.json: not readable JSON: .*line 1 column 19"):
        load_cassette(bad)


def test_a_body_that_inflates_past_the_limit_is_refused(tmp_path: Path) -> None:
    """A compressed body may not decode past max_body_bytes (no memory blow-up)."""
    from redrive.recorders.cassettes import CassetteLimits

    headers = {"Content-Type": ["application/json"], "Content-Encoding": ["gzip"]}
    body = gzip.compress(b" " * 5000)
    path = _write(tmp_path, [_interaction("POST", _uri(0), {"m": 1}, 200, headers, body)])
    with pytest.raises(CassetteError, match=r"interaction 0 .*max_body_bytes=1000") as info:
        import_cassette(
            path, redrive.open_journal(":memory:"), limits=CassetteLimits(max_body_bytes=1000)
        )
    assert info.value.limit == "max_body_bytes"
