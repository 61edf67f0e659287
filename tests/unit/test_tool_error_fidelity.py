"""A recorded tool error replays as the error the loop caught live (issue 27, fidelity).

The loop's ``except`` clause and what it reads off the error (``str(err)``,
``err.code``) must see on replay what they saw live: an exception type whose
``__init__`` takes keyword-only arguments or objects (httpx's ``request=`` and
``response=``, an SDK's ``body=``) is rebuilt as its own type, its plain
attributes set back, whenever its message comes out the same; only a type that
cannot give the recorded message replays as :class:`redrive.RecordedToolError`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import redrive
from redrive._canonical import canonical, pack_tree
from redrive._canonical_decode import decode
from redrive._scrub import DEFAULT
from redrive.storage import MemoryJournal
from tests.json_strategies import json_values


class PaymentDeclined(Exception):
    """A keyword-only constructor and attributes the loop reads."""

    def __init__(self, *, code: str, retry_after: int | None = None) -> None:
        super().__init__(f"payment declined: {code}")
        self.code = code
        self.retry_after = retry_after


class Described(Exception):
    """A ``__str__`` built from an attribute, not from ``args``."""

    def __init__(self, *, reason: str, detail: dict[str, Any]) -> None:
        super().__init__()
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"refused ({self.reason})"


class NeedsAnObject(Exception):
    """A ``__str__`` that reads an attribute holding an object (not recorded)."""

    def __init__(self, *, client: object) -> None:
        super().__init__()
        self.client = client

    def __str__(self) -> str:
        return f"failed on {self.client.name}"  # type: ignore[attr-defined]


class _Client:
    name = "billing-api"


def _http_error() -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://billing.example/charge")
    response = httpx.Response(402, request=request)
    return httpx.HTTPStatusError("402 Payment Required", request=request, response=response)


def _live_then_replay(raise_it: Any, *, faces: str) -> tuple[BaseException, BaseException]:
    """The error a tool raised live and the one its replay raises, through one face."""
    journal = MemoryJournal()

    if faces == "sync":

        @redrive.tool(name="charge", read_only=True, retryable=(Exception,))
        def charge(order: str) -> None:
            raise raise_it()

        def once(live: bool) -> BaseException:
            with redrive.run(journal, "r", live=live):
                try:
                    charge("A-1")
                except Exception as exc:
                    return exc
            raise AssertionError("the tool did not raise")

        return once(True), once(False)

    @redrive.tool(name="charge", read_only=True, retryable=(Exception,))
    async def acharge(order: str) -> None:
        raise raise_it()

    async def aonce(live: bool) -> BaseException:
        async with redrive.run(journal, "r", live=live):
            try:
                await acharge("A-1")
            except Exception as exc:
                return exc
        raise AssertionError("the tool did not raise")

    return asyncio.run(aonce(True)), asyncio.run(aonce(False))


@pytest.mark.parametrize("face", ["sync", "async"])
def test_keyword_only_errors_replay_as_their_own_type(face: str) -> None:
    """The loop catches the same type and reads the same message and attributes."""
    live, replayed = _live_then_replay(
        lambda: PaymentDeclined(code="card_declined", retry_after=30), faces=face
    )
    assert type(replayed) is PaymentDeclined and str(replayed) == str(live)
    assert (replayed.code, replayed.retry_after) == ("card_declined", 30)

    live, replayed = _live_then_replay(
        lambda: Described(reason="limit", detail={"max": 3}), faces=face
    )
    assert type(replayed) is Described and str(replayed) == "refused (limit)"
    assert replayed.detail == {"max": 3}


@pytest.mark.parametrize("face", ["sync", "async"])
def test_an_http_status_error_replays_as_itself(face: str) -> None:
    """httpx.HTTPStatusError (request= and response= objects, not recorded): the loop's
    ``except httpx.HTTPStatusError`` catches the replayed error; its message is the live one."""
    live, replayed = _live_then_replay(_http_error, faces=face)
    assert isinstance(replayed, httpx.HTTPStatusError)
    assert str(replayed) == str(live) == "402 Payment Required"


def test_an_error_whose_message_needs_an_object_replays_as_recorded_tool_error() -> None:
    """Where the recorded message cannot be had again, the replay says so, never a wrong one."""
    live, replayed = _live_then_replay(lambda: NeedsAnObject(client=_Client()), faces="sync")
    assert str(live) == "failed on billing-api"
    assert isinstance(replayed, redrive.RecordedToolError)
    assert replayed.error_message == "failed on billing-api"
    assert replayed.error_type is not None and replayed.error_type.endswith("NeedsAnObject")


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: n not in {"args", "with_traceback", "add_note"}
)


@given(fields=st.dictionaries(_NAMES, json_values, max_size=4), message=st.text(max_size=20))
def test_any_plain_attributes_come_back(fields: dict[str, Any], message: str) -> None:
    """An error of a keyword-only type with any JSON attributes replays with the ones the
    journal holds: equal, but for what the default scrubber masked (a credential field)."""

    def make() -> PaymentDeclined:
        err = PaymentDeclined(code=message)
        for name, value in fields.items():
            setattr(err, name, value)
        return err

    live, replayed = _live_then_replay(make, faces="sync")
    assert type(replayed) is PaymentDeclined and str(replayed) == str(live)
    for name, value in fields.items():
        held = decode(pack_tree(DEFAULT.value(canonical(value, "value"))))
        assert getattr(replayed, name) == held


class WithDefault(Exception):
    """The common SDK shape: an attribute from a keyword argument with a default."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


@pytest.mark.parametrize("face", ["sync", "async"])
def test_attributes_from_defaulted_arguments_come_back(face: str) -> None:
    """``cls(*args)`` rebuilds the error, but its defaulted attribute is the recorded one,
    not the default (found by an outside test of cpython#98873's shape)."""
    _live, replayed = _live_then_replay(lambda: WithDefault("boom", status_code=429), faces=face)
    assert type(replayed) is WithDefault and str(replayed) == "boom"
    assert replayed.status_code == 429
