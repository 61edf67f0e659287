"""A random secret planted in every place a run journals reaches no byte written, on any backend.

One loop plants the same random secret in the run's input, an approval's
payload, a tool's arguments, result, exception message and args, a
``redrive.model`` response, a remote MCP credential in an OpenAI Responses
and an Anthropic request body, a response header and body, an SSE chunk, a
note, a ``recover()`` result, the run's output and a failed run's error. The
run is suspended, interrupted, resumed, finished, exported to ``.rdj``,
imported and listed by the CLI; then every byte of every file written, every
stored frame and run record, and the CLI's output are searched for it.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive import cli
from redrive._scrub import REDACTED, Scrubber, credential_field, mask_text
from redrive.replay._policy import compile_paths, last_name, scrubber
from redrive.storage import Journal
from redrive.storage.rdj import export_run, import_run

RUN = "placement"
FAILED = "placement-failed"
#: ``api_key`` is a credential name by default; ``custom_secret`` is not: only ``redact=`` hides it.
REDACT = ("$..api_key", "$..custom_secret")

#: A secret: a fixed head (never mistaken for hex or padding), random letters and digits.
SECRETS = st.text(
    alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789", min_size=20, max_size=40
).map(lambda tail: "Qz7" + tail)

_SSE = "text/event-stream"


def _responses_body(secret: str) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-4.1",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "api_key": secret,
    }


def _anthropic_events(secret: str) -> list[str]:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-test-model",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": f"your key: sk-ant-api03-{secret}"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 2},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events]


def _clients(secret: str) -> tuple[openai.OpenAI, anthropic.Anthropic, list[httpx2.Request]]:
    sent: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        if request.url.path.endswith("/responses"):
            return httpx2.Response(
                200, headers={"x-auth-token": secret}, json=_responses_body(secret)
            )
        return _sse(_anthropic_events(secret), {"x-auth-token": secret})

    oai = redrive.wrap(
        openai.OpenAI(
            api_key="sk-proj-test",
            max_retries=0,
            base_url="https://api.openai.com/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        )
    )
    return oai, _anthropic(handler), sent


def _sse(events: list[str], headers: dict[str, str] | None = None) -> httpx2.Response:
    """An event-stream response sending ``events`` one per read."""
    return httpx2.Response(
        200,
        headers={"content-type": _SSE, **(headers or {})},
        content=iter([event.encode() for event in events]),
    )


def _anthropic(handler: Callable[[httpx2.Request], httpx2.Response]) -> anthropic.Anthropic:
    """A wrapped Anthropic client answered by ``handler``."""
    return redrive.wrap(
        anthropic.Anthropic(
            api_key="sk-ant-test",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        )
    )


class PriceError(Exception):
    """A tool's error whose message and args carry the secret."""


def _loop(secret: str, crash: list[bool]) -> Callable[[redrive.Run], None]:
    oai, ant, _sent = _clients(secret)

    @redrive.tool(read_only=True)
    def fetch_prices(url: str) -> dict[str, Any]:
        raise PriceError(
            f"401 Client Error: Unauthorized for url: {url}",
            {"auth_token": secret, "custom_secret": secret},
        )

    @redrive.tool(read_only=True)
    def lookup(account: dict[str, Any]) -> dict[str, Any]:
        # a handed-back value keeps its credential-named fields (invariant 9): text only here
        return {"see": f"https://x.example/cb?token={secret}", "auth": f"Bearer {secret}", "n": 1}

    @redrive.model
    def think(prompt: str) -> dict[str, Any]:
        return {"text": f"use sk-proj-{secret}", "custom_secret": secret}

    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        return redrive.Recovery.done(
            {"cb": f"https://x.example/?refresh_token={secret}", "receipt": f"Bearer {secret}"}
        )

    @redrive.tool(restart_safe=False, recover=recover)
    def charge(amount: int) -> str:
        if crash:
            crash.pop()
            raise KeyboardInterrupt  # the worker dies mid-body: the step stays in flight
        return "charged"

    def loop(run: redrive.Run) -> None:
        redrive.await_approval("refund", {"card_password": secret, "memo": f"Bearer {secret}"})
        with contextlib.suppress(Exception):  # replayed as itself, or as RecordedToolError
            fetch_prices(f"https://prices.example/api?area=NO1&key={secret}")
        lookup({"api_key": secret, "custom_secret": secret, "user": "bob"})
        think(f"Authorization: Bearer {secret}")
        oai.responses.create(
            model="gpt-4.1",
            input="hi",
            tools=[
                {
                    "type": "mcp",
                    "server_label": "stripe",
                    "server_url": f"https://mcp.example/sse?auth_token={secret}",
                    "authorization": secret,
                    "require_approval": "never",
                }
            ],
        )
        stream = ant.messages.create(
            model="claude-test-model",
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            extra_body={
                "mcp_servers": [
                    {
                        "type": "url",
                        "url": "https://mcp.example/sse",
                        "name": "m",
                        "authorization_token": secret,
                    }
                ]
            },
        )
        for _event in stream:
            pass
        run.note("audit", {"client_secret": secret, "custom_secret": secret})
        charge(5)
        run.finish({"summary": f"done https://x.example/cb?access_token={secret}", "n": 2})

    return loop


def _drive(journal: Journal, secret: str) -> None:
    """Suspend on the approval, decide, crash in ``charge``, resume (recover), fail another run."""
    loop = _loop(secret, [True])
    options: dict[str, Any] = {"input": {"user": "bob", "password": secret}, "redact": REDACT}
    _suspend_crash_resume(journal, loop, options, "refund")
    with redrive.run(journal, RUN, live=False, **options) as run:  # a replay of the whole run
        loop(run)
    with pytest.raises(RuntimeError), redrive.run(journal, FAILED):
        raise RuntimeError(f"upstream said: Authorization: Bearer {secret}")


def _suspend_crash_resume(
    journal: Journal, loop: Callable[[redrive.Run], None], options: dict[str, Any], approval: str
) -> None:
    """Run ``loop`` until it suspends on ``approval``, decide it, crash in the body, resume."""
    with redrive.run(journal, RUN, **options) as run:
        loop(run)
    assert run.status == "suspended"
    journal.decide(RUN, approval, True, by="ops")
    with pytest.raises(KeyboardInterrupt), redrive.run(journal, RUN, **options) as run:
        loop(run)
    with redrive.run(journal, RUN, **options) as run:
        loop(run)
    assert run.status == "succeeded"


def _stored(journal: Journal) -> bytes:
    """Every frame and run record the journal returns, as bytes."""
    out = []
    for record in journal.runs():
        out.append(repr(record).encode())
        for frame in journal.frames(record.run_id):
            out.append(frame.payload + repr(frame).encode())
    return b"".join(out)


def _files(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def _cli(url: str, rdj: Path, capsys: pytest.CaptureFixture[str]) -> bytes:
    capsys.readouterr()
    assert cli.main(["--journal", url, "--json", "runs"]) == 0
    assert cli.main(["--journal", url, "--json", "show", RUN]) == 0
    assert cli.main(["--journal", url, "--json", "show", FAILED]) == 0
    assert cli.main(["--json", "show", str(rdj)]) == 0
    captured = capsys.readouterr()
    return (captured.out + captured.err).encode()


def _check(secret: str, *blobs: bytes) -> None:
    needle = secret.encode()
    for blob in blobs:
        assert blob
        assert needle not in blob, blob[max(0, blob.find(needle) - 200) : blob.find(needle) + 60]


def _export_import(journal: Journal, root: Path, secret: str) -> Path:
    """Export the run to ``.rdj``, import it into another journal, check both; return the file."""
    rdj = root / "placement.rdj"
    export_run(journal, RUN, str(rdj))
    copy = redrive.open_journal(":memory:")
    import_run(str(rdj), copy)
    source = redrive.open_journal(str(rdj))  # the .rdj as a (read-only) journal
    try:
        _check(secret, _stored(copy), _stored(source))
    finally:
        source.close()
    return rdj


_SETTINGS = settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(secret=SECRETS)
def test_no_secret_reaches_a_duckdb_journal_rdj_or_the_cli(
    secret: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """DuckDB (with its .rdlog), the exported .rdj and the CLI's JSON never hold the secret."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        url = str(root / "runs.duckdb")
        journal = redrive.open_journal(url)
        try:
            _drive(journal, secret)
            rdj = _export_import(journal, root, secret)
            _check(secret, _stored(journal))
        finally:
            journal.close()
        _check(secret, _files(root), _cli(url, rdj, capsys))


@_SETTINGS
@given(secret=SECRETS)
def test_no_secret_reaches_a_memory_journal(secret: str) -> None:
    """The memory journal's frames and run records never hold the secret."""
    journal = redrive.open_journal(":memory:")
    _drive(journal, secret)
    _check(secret, _stored(journal))


@settings(_SETTINGS, max_examples=2)
@given(secret=SECRETS)
def test_no_secret_reaches_a_postgres_journal(secret: str, pg_url: str) -> None:
    """Every row of every table of the run's Postgres schema is free of the secret."""
    import psycopg
    from psycopg import sql

    from redrive.storage.postgres import PostgresJournal

    schema = f"t_{uuid.uuid4().hex[:16]}"
    journal = PostgresJournal(pg_url, schema=schema)
    try:
        _drive(journal, secret)
        _check(secret, _stored(journal))
        with psycopg.connect(pg_url) as conn:
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (schema,),
                )
            ]
            assert tables
            dump = b"".join(
                str(row).encode()
                for table in tables
                for row in conn.execute(
                    sql.SQL("SELECT t::text FROM {}.{} t").format(
                        sql.Identifier(schema), sql.Identifier(table)
                    )
                )
            )
        _check(secret, dump)
    finally:
        journal.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# -- the scrubber's rules, one by one -------------------------------------------------------


@given(secret=SECRETS)
def test_secret_looking_text_is_masked(secret: str) -> None:
    """Query parameters, URL passwords, bearer tokens and key shapes lose the secret."""
    for text in (
        f"GET https://a.example/x?area=NO1&key={secret}&page=2",
        f"https://a.example/x?auth_token={secret}",
        f"https://user:{secret}@a.example/",
        f"Authorization: Bearer {secret}",
        f"bearer {secret}",
        f"sk-{secret}",
        f"sk-ant-api03-{secret}",
        f"sk-proj-{secret}",
        f"ghp_{secret}",
        f"xoxb-{secret}",
        f'{{"authorization": "{secret}", "x": 1}}',
        f"{{'client_secret': '{secret}'}}",
        f"X-Auth-Token: {secret}",
        json.dumps({"arguments": json.dumps({"password": secret, "user": "bob"})}),
    ):
        masked = mask_text(text)
        assert secret not in masked and REDACTED in masked, text


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens=100 and page=2",
        "Token limit exceeded: 1000 tokens",
        "The bearer of bad news",
        "https://a.example/x?area=NO1&page=2",
        '{"input_tokens": 5, "next_page_token": "abc"}',
    ],
)
def test_plain_text_is_left_alone(text: str) -> None:
    """Text without a secret comes back unchanged (no false alarm on token counts or cursors)."""
    assert mask_text(text) == text


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("Authorization", True),
        ("authorization_token", True),
        ("apiKey", True),
        ("X-API-Key", True),
        ("x-auth-token", True),
        ("client_secret", True),
        ("password", True),
        ("max_tokens", False),
        ("input_tokens", False),
        ("next_page_token", False),
        ("idempotency_key", False),
        ("key", False),
    ],
)
def test_credential_field_names(name: str, credential: bool) -> None:
    """Credential names match whatever their case and separators; counts and cursors do not."""
    assert credential_field(name) is credential


def test_redact_patterns_reach_error_messages_and_event_streams() -> None:
    """``redact=`` applies to a tool error's message and args and inside each SSE data line."""
    scrub = Scrubber(compile_paths(["$..message", "$..custom"]))
    error = scrub.payload(
        "tool_error", {"step": 1, "error": {"message": "m", "args": [{"custom": "c"}]}}
    )
    assert error == {"step": 1, "error": {"message": REDACTED, "args": [{"custom": REDACTED}]}}
    body = 'event: x\ndata: {"custom":"c","ok":1}\n\n'
    out = scrub.payload("model_response", {"step": 1, "response": {"chunks": [body]}})
    assert out["response"]["chunks"] == ['event: x\ndata: {"custom":"[REDACTED]","ok":1}\n\n']


def test_a_rotated_credential_keeps_the_match_key() -> None:
    """Keys are made on the scrubbed form: a new token in the request replays the old step."""
    journal = redrive.open_journal(":memory:")
    calls = []

    @redrive.model
    def call(server: dict[str, Any]) -> str:
        calls.append(server)
        return "ok"

    for token in ("tok-1111111111", "tok-2222222222"):
        with redrive.run(journal, "r") as run:
            run.finish(call({"url": "https://mcp.example", "authorization_token": token}))
    assert len(calls) == 1


@settings(_SETTINGS, max_examples=5)
@given(secret=SECRETS, field=st.sampled_from(["customer_ref", "ssn", "account-no", "Memo"]))
def test_redact_patterns_reach_every_frame_kind(secret: str, field: str) -> None:
    """A field named by ``redact=`` only (no default rule knows it) is hidden in every frame kind.

    Tool arguments, results and exception args, a model callable's request and
    response, an SSE data line and a response body, a note, an approval
    payload, the run's input and output and a ``recover()`` result.
    """
    planted = {field: secret, "ok": 1}

    def handler(request: httpx2.Request) -> httpx2.Response:
        events = _anthropic_events("x")
        events[2] = events[2].replace('"index": 0,', f'"index": 0, "{field}": "{secret}",', 1)
        return _sse(events)

    ant = _anthropic(handler)
    crash = [True]

    @redrive.tool(read_only=True)
    def failing(data: dict[str, Any]) -> None:
        raise PriceError("no", dict(planted))

    @redrive.tool(read_only=True)
    def echo(data: dict[str, Any]) -> dict[str, Any]:
        return dict(planted)

    @redrive.model
    def think(data: dict[str, Any]) -> dict[str, Any]:
        return dict(planted)

    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        return redrive.Recovery.done(dict(planted))

    @redrive.tool(restart_safe=False, recover=recover)
    def charge(amount: int) -> str:
        if crash:
            crash.pop()
            raise KeyboardInterrupt
        return "charged"

    def loop(run: redrive.Run) -> None:
        redrive.await_approval("ok", dict(planted))
        with contextlib.suppress(Exception):
            failing(dict(planted))
        echo(dict(planted))
        think(dict(planted))
        for _event in ant.messages.create(
            model="claude-test-model",
            max_tokens=5,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
        ):
            pass
        run.note("n", dict(planted))
        charge(1)
        run.finish(dict(planted))

    journal = redrive.open_journal(":memory:")
    options: dict[str, Any] = {"input": dict(planted), "redact": (f"$..['{field}']",)}
    _suspend_crash_resume(journal, loop, options, "ok")
    _check(secret, _stored(journal))


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        ("$..token", "token"),
        ("token", "token"),
        ("$.a.b", "b"),
        ("$..['account-no']", "account-no"),
        ('$..["x-y"]', "x-y"),
        ("$.lst[*]", None),
        ("$.a[3]", None),
        ("$.metadata.*", None),
        ("$.tool_*", None),
    ],
)
def test_the_names_a_pattern_masks_in_text(pattern: str, name: str | None) -> None:
    """A ``redact=`` pattern ending in a field name masks that name inside texts too."""
    assert last_name(pattern) == name
    if name is not None:
        text = (
            f"failed: {{'{name}': 'v4lue-1234', 'ok': 1}} at https://a.example/?{name}=v4lue-1234"
        )
        assert "v4lue" not in scrubber([pattern]).value(text)
