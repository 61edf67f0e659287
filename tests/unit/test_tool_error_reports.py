"""Exceptions from public unpickling reports replay as the error the loop caught live.

Each type below is the shape of a report where pickling (or jsonpickle, or
tblib) could not rebuild an exception: cpython#98873 (an extra positional
argument not passed to ``super().__init__``), cpython#120810 (no
``super().__init__`` call, attributes only), jsonpickle#564 (a keyword-only
argument), tblib#65 (an ``__init__`` with no parameters passing a message up),
openai-python#2629 and CrewAI-Studio#60 (the OpenAI SDK's ``APIStatusError``
with ``response=`` and ``body=``, ``APITimeoutError`` with ``request=``; the SDK
builds them on ``httpx2`` objects).
A tool raising one records it; the replay raises its own type, with the
live message and the plain attributes the loop reads.
"""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest

from tests.unit.test_tool_error_fidelity import _live_then_replay


class ExtraPositional(Exception):
    """cpython#98873."""

    def __init__(self, msg: str, another_arg: int) -> None:
        super().__init__(msg)
        self.another_arg = another_arg


class FieldsOnly(Exception):
    """cpython#120810: ``super().__init__`` never called."""

    def __init__(self, foo: int, bar: str) -> None:
        self.foo = foo
        self.bar = bar


class KeywordOnly(Exception):
    """jsonpickle#564."""

    def __init__(self, a: str, *, b: str) -> None:
        self.a = a
        self.b = b


class NoParameters(Exception):
    """tblib#65."""

    def __init__(self) -> None:
        super().__init__("No mocking was registered, and real connections are not allowed")


def _rate_limited() -> openai.RateLimitError:
    request = httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    response = httpx2.Response(429, request=request, headers={"x-request-id": "req_7"})
    body = {"error": {"code": "rate_limit_exceeded", "message": "Rate limit reached"}}
    return openai.RateLimitError("Rate limit reached", response=response, body=body)


def _timed_out() -> openai.APITimeoutError:
    return openai.APITimeoutError(request=httpx2.Request("POST", "https://api.openai.com/v1/x"))


CASES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "cpython#98873": (lambda: ExtraPositional("boom", 12), ("another_arg",)),
    "cpython#120810 by keyword": (lambda: FieldsOnly(foo=42, bar="a"), ("foo", "bar")),
    "cpython#120810 by position": (lambda: FieldsOnly(42, "a"), ("foo", "bar")),
    "jsonpickle#564": (lambda: KeywordOnly("a", b="b"), ("a", "b")),
    "tblib#65": (NoParameters, ()),
    "openai RateLimitError": (_rate_limited, ("status_code", "body", "request_id", "message")),
    "openai APITimeoutError": (_timed_out, ("message",)),
}


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_reported_exception_replays_as_its_own_type(case: str, face: str) -> None:
    """Same type, same ``str()``, same ``args`` and the attributes the loop reads."""
    make, attributes = CASES[case]
    live, replayed = _live_then_replay(make, faces=face)
    assert type(replayed) is type(live)
    assert (str(replayed), replayed.args) == (str(live), live.args)
    for name in attributes:
        assert getattr(replayed, name) == getattr(live, name), name
