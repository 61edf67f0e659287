"""A credential-named JSON field is scrubbed alike in every form a journal stores it in.

The same JSON reaches the scrubber as a parsed tree (a request's body), as JSON text
(a non-streamed response's body), as the ``data:`` line of a streamed event
(``chunks``), and through a run with ``redact=`` patterns or without. A field
named like a credential (``api_key``, ``REFRESHTOKEN``, ``db_password``) at any depth,
under any of the fields the stream code reads (``type``, ``event``, ``data``, ``id``),
is replaced by ``[REDACTED]`` in each form, or kept in each: kept when it holds
nothing to hide (null, a number, a bool, an empty array or object), masked otherwise.

Found by ``tests/unit/test_any_json.py`` under the random profile: a streamed event
``{"type": {"api_key": []}}`` was stored (and replayed) as ``{"type":{"api_key":
"[REDACTED]"}}`` while the same JSON as a body was kept, and ``{"api_key": ["x"]}`` in a
non-streamed body was stored as it was (a plain value under a credential name) unless the
run had a ``redact=`` pattern.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redrive._credentials import REDACTED, credential_field
from redrive._scrub import DEFAULT, Scrubber
from redrive.replay._policy import scrubber
from tests.json_strategies import STREAM_KEYS, json_values

_NAMES = ("api_key", "REFRESHTOKEN", "db_password", "client_secret", "apiKey", "x-api-key")
_WITH_PATTERNS = scrubber(("$..not_there",))


def _holds_nothing(value: Any) -> bool:
    """What a credential field keeps: nothing there to hide (the rule, spelled out)."""
    return value is None or isinstance(value, int | float) or value in ([], {}) or value == REDACTED


def _nest(field: dict[str, Any], path: list[Any]) -> Any:
    """``field`` placed at ``path``: each step a key of an object or an index of an array."""
    value: Any = field
    for step in reversed(path):
        value = [None] * step + [value] if isinstance(step, int) else {step: value}
    return value


def _event(data: Any) -> str:
    return f"data: {json.dumps(data)}\n\n"


def _stored_forms(scrub: Scrubber, doc: Any) -> list[Any]:
    """``doc`` as each form stores it, parsed back: tree, JSON text, a streamed event."""
    tree = scrub.payload("model_response", {"response": {"body": doc}})["response"]["body"]
    text = scrub.payload("model_response", {"response": {"body": json.dumps(doc)}})
    chunks = scrub.payload("model_response", {"response": {"chunks": [_event(doc), "x\n\n"]}})
    event = chunks["response"]["chunks"][0]
    assert event.startswith("data: ") and event.endswith("\n\n"), event
    return [tree, json.loads(text["response"]["body"]), json.loads(event[6:])]


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(_NAMES),
    value=json_values,
    path=st.lists(st.one_of(st.sampled_from(STREAM_KEYS), st.integers(0, 2)), max_size=4),
    patterns=st.booleans(),
)
def test_a_credential_field_is_scrubbed_alike_in_every_form(
    name: str, value: Any, path: list[Any], patterns: bool
) -> None:
    """Tree, JSON text and streamed event agree, with and without ``redact=`` patterns; the
    field keeps its value exactly when it holds nothing to hide."""
    assert credential_field(name)
    doc = _nest({name: value, "n": 1}, path)
    want = _nest({name: value if _holds_nothing(value) else REDACTED, "n": 1}, path)
    assert _stored_forms(_WITH_PATTERNS if patterns else DEFAULT, doc) == [want, want, want]


@pytest.mark.parametrize("value", [[], {}, None, 0, 1.5, True, REDACTED])
@pytest.mark.parametrize("patterns", [False, True])
def test_a_credential_field_holding_nothing_is_kept_byte_for_byte(
    value: Any, patterns: bool
) -> None:
    """A streamed event with ``{"type": {"api_key": []}}`` is stored as it was sent (the
    random profile's find): no secret is there, so no byte of it changes."""
    scrub = _WITH_PATTERNS if patterns else DEFAULT
    doc = {"type": {"api_key": value}, "message": {"usage": {"input_tokens": 1}}}
    chunks = [_event(doc), "data: [DONE]\n\n"]
    assert scrub.payload("model_response", {"response": {"chunks": chunks}}) == {
        "response": {"chunks": chunks}
    }
    body = json.dumps(doc)
    assert scrub.value({"body": body}) == {"body": body}


@pytest.mark.parametrize("value", [[""], ["plain"], {"v": "plain"}, [0], [[]], {"k": {}}, ""])
@pytest.mark.parametrize("patterns", [False, True])
def test_a_credential_field_holding_anything_is_masked_whole_in_a_body(
    value: Any, patterns: bool
) -> None:
    """A non-streamed JSON body is masked as its streamed events are: an array or object
    under a credential name becomes ``[REDACTED]`` (it was stored as it was when the run
    had no ``redact=`` pattern), and a share finds no secret left in it."""
    scrub = _WITH_PATTERNS if patterns else DEFAULT
    body = json.dumps({"choices": [{"delta": {"api_key": value}}], "n": 1})
    stored = scrub.value({"body": body})["body"]
    assert json.loads(stored) == {"choices": [{"delta": {"api_key": REDACTED}}], "n": 1}
    assert "plain" not in stored
