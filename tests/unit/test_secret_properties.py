"""Properties of the secret rules (issues 24 and 27): the credential table in every wire form,
secrets split at any chunk boundary, signed, encrypted and logprob content kept byte for byte.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from redrive._credentials import CREDENTIALS, FIELD, HEADER, QUERY, credential_field
from redrive._scrub import DEFAULT, mask_pieces, mask_text
from redrive._scrub_stream import scrub_events
from redrive.recorders._exchange import describe_request, response_payload
from tests.unit.test_secret_forms import chat_chunk

_VALUES = st.text(
    alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789-._~", min_size=4
).map(lambda tail: "Qz7" + tail)
_ROWS = st.sampled_from(CREDENTIALS)


def _spell(name: str, style: int) -> str:
    """The name as a wire form may spell it: as listed, upper, with - or _ swapped."""
    return [name, name.upper(), name.replace("_", "-"), name.replace("-", "_").title()][style]


@settings(max_examples=60, deadline=None)
@given(row=_ROWS, value=_VALUES, style=st.integers(0, 3))
def test_every_credential_name_is_masked_in_every_wire_form(
    row: tuple[str, frozenset[str], str], value: str, style: int
) -> None:
    """(a) A table name in each wire form it is listed for: the value is stored nowhere."""
    name = _spell(row[0], style)
    forms = row[1]
    stored: list[Any] = []
    if QUERY in forms:
        stored.append(mask_text(f"GET https://h.example/p?a=1&{name}={value}&b=2"))
        stored.append(mask_text(f"grant_type=x&{name}={value}"))
        stored.append(
            describe_request("x", "", "POST", "/p", [(name, value)], b"{}", "application/json")
        )
        form = f"{name}={value}&z=1".encode()
        _, request = describe_request(
            "x", "", "POST", "/p", [], form, "application/x-www-form-urlencoded"
        )
        stored.append(DEFAULT.payload("model_request", {"args": request}))
    if HEADER in forms:
        stored.append(response_payload(200, [(name, value)], body=b"{}"))
        stored.append(mask_text(f"HTTP/1.1 200 OK\n{name}: {value}\n"))
        stored.append(DEFAULT.value({"headers": [[name, value]]}))
    if FIELD in forms:
        assert credential_field(name)
        stored.append(DEFAULT.value({"args": {"nested": [{name: value}]}}))
        stored.append(mask_text(json.dumps({name: value, "n": 1})))
        stored.append(mask_text(repr({name: value})))
    stored.append(mask_text(f"https://user:{value}@h.example/p"))
    assert value not in json.dumps(stored, default=str)


_SECRETS = st.one_of(
    st.text(alphabet="abcdefghijkmnopqrstuvwxyzABCDEFGH0123456789", min_size=20, max_size=30).map(
        lambda t: "sk-proj-" + t
    ),
    st.text(alphabet="abcdefghijk0123456789", min_size=10, max_size=20).map(
        lambda t: "Bearer 9" + t
    ),
    st.text(alphabet="abcdefghijk0123456789", min_size=6, max_size=20).map(
        lambda t: "?access_token=" + t
    ),
)
_WORDS = st.text(alphabet="abc xyz.,", max_size=12)


def _value_part(secret: str) -> str:
    """The part of a planted secret that must never be stored (after its name, if any)."""
    for lead in ("Bearer ", "?access_token="):
        if secret.startswith(lead):
            return secret[len(lead) :]
    return secret


@settings(max_examples=40, deadline=None)
@given(secret=_SECRETS, before=_WORDS, after=_WORDS, cuts=st.data())
def test_a_secret_split_at_any_boundary_is_masked_in_every_piece(
    secret: str, before: str, after: str, cuts: st.DataObject
) -> None:
    """(b) Cut anywhere: no piece holds the secret; the pieces join to the masked whole."""
    text = f"{before} {secret} {after}"
    points = cuts.draw(
        st.lists(st.integers(0, len(text)), max_size=4, unique=True).map(sorted), "cuts"
    )
    bounds = [0, *points, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    masked = mask_pieces(pieces)
    assert len(masked) == len(pieces)
    assert "".join(masked) == mask_text(text)
    value = _value_part(secret)
    assert value not in "".join(masked)
    # the same pieces streamed as chat deltas: the stored events and the replayed text
    events = scrub_events([chat_chunk(p) for p in pieces])
    replayed = "".join(
        json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events if e.startswith("data")
    )
    assert replayed == mask_text(text)
    assert all(value not in e for e in events)


_ANY_TEXT = st.text(max_size=40) | _SECRETS.map(lambda s: f"see {s} and https://h/?key=Qz7abc123")


def _signed_content(text: str, sig: str) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": text, "signature": sig},
        {"type": "redacted_thinking", "data": text + sig},
        {"text": text, "thoughtSignature": sig},
        {"functionCall": {"name": "f", "args": {"q": text}}, "thought_signature": sig},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": text + sig},
        # OpenRouter's reasoning_details entries (Chat Completions, any upstream model)
        {"type": "reasoning.text", "text": text, "signature": sig, "format": "anthropic-claude-v1"},
        {"type": "reasoning.encrypted", "data": text + sig, "id": "rs_1", "index": 1},
        {"type": "reasoning.summary", "summary": text, "format": "openai-responses-v1"},
        # Amazon Bedrock Converse content blocks (and their stream deltas)
        {"reasoningContent": {"reasoningText": {"text": text, "signature": sig}}},
        {"reasoningContent": {"redactedContent": text + sig}},
        {"reasoningContent": {"text": text}},
    ]


@settings(max_examples=40, deadline=None)
@given(text=_ANY_TEXT, sig=_ANY_TEXT, tokens=st.lists(st.text(max_size=6), max_size=6))
def test_signed_encrypted_and_logprob_content_round_trips_byte_identical(
    text: str, sig: str, tokens: list[str]
) -> None:
    """(c) Signed or encrypted objects and logprob tokens come back as they were, in every form."""
    blocks = _signed_content(text, sig)
    logprobs = [{"token": t, "logprob": -1.0, "top_logprobs": [{"token": t}]} for t in tokens]
    body = {"content": blocks, "choices": [{"logprobs": {"content": logprobs}}]}
    body_text = json.dumps(body)
    response = {"status": 200, "headers": [], "stream": False, "body": body_text, "chunks": None}
    out = DEFAULT.payload("model_response", {"step": 1, "response": response})
    assert json.loads(out["response"]["body"])["content"] == blocks
    request = DEFAULT.payload("model_request", {"args": {"body": {"messages": blocks}}})
    assert request["args"]["body"]["messages"] == blocks
    stream = [f"data: {json.dumps({'delta': b, 'index': 0})}\n\n" for b in blocks]
    assert scrub_events(stream) == stream
    if not any(sign in "".join(tokens) for sign in ("sk-", "=", "earer", "eyJ", "://", ":")):
        assert json.loads(out["response"]["body"])["choices"][0]["logprobs"]["content"] == logprobs


def _logprob(token: str) -> dict[str, Any]:
    entry = {"token": token, "logprob": -0.5, "bytes": list(token.encode())}
    return {**entry, "top_logprobs": [entry, {"token": "x", "logprob": -2.0, "bytes": [120]}]}


@settings(max_examples=40, deadline=None)
@given(secret=_SECRETS, before=_WORDS, after=_WORDS, cuts=st.data())
def test_a_secret_spelled_by_logprob_tokens_is_masked_in_a_whole_response(
    secret: str, before: str, after: str, cuts: st.DataObject
) -> None:
    """A non-streamed response spells its message again in ``logprobs.content``, a token an
    entry: a secret cut anywhere among the tokens is in no token, no ``bytes`` and no
    alternative once stored (outside test of issue 24: the tokens spelled the key out while
    the message read ``[REDACTED]``); tokens that hold nothing secret are kept."""
    text = f"{before} {secret} {after}"
    points = cuts.draw(
        st.lists(st.integers(1, len(text) - 1), min_size=1, max_size=5, unique=True).map(sorted)
    )
    tokens = [text[a:b] for a, b in itertools.pairwise([0, *points, len(text)])]
    body = {
        "choices": [
            {
                "message": {"role": "assistant", "content": text},
                "logprobs": {"content": [_logprob(t) for t in tokens]},
            }
        ]
    }
    stored = json.loads(DEFAULT.text(json.dumps(body)) or "")
    entries = stored["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == mask_text(text)
    value = _value_part(secret)
    spelled = [
        "".join(e["token"] for e in entries),
        bytes(b for e in entries for b in e["bytes"]).decode(),
        "".join(e["top_logprobs"][0]["token"] for e in entries),
    ]
    assert all(value not in s for s in spelled)
