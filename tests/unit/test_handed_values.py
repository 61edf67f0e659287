"""Values handed back are the values (issue 11, items 1 and 7; DESIGN invariant 9).

What a tool, a ``redrive.model`` callable, a recorded value, a ``recover()`` or the
``on_in_flight="tell_model"`` placeholder hands the loop is the same object shape live and
on replay: the same type, an equal value, the same dict key order, the same ``repr`` and
the same ``json.dumps``, over every journal (memory, DuckDB, Postgres, an ``.rdj`` export)
and both faces. Keys stay computed on the canonical form, so matching is unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import os
import tempfile
import uuid
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redrive
from redrive.frames import (
    call_key,
    decode,
    decode_value,
    encode,
    encode_value,
    rebuild,
    register_codec,
    store,
)
from redrive.storage import MemoryJournal
from tests.conftest import Drive, Loop
from tests.strategies import text


class Colour(enum.Enum):
    """An enum a tool hands back (rebuilt by value, its class being imported)."""

    RED = "red"
    BLUE = 2


class Level(enum.IntEnum):
    """An int enum: it must not come back as a plain int."""

    LOW = 1


@dataclasses.dataclass
class Money:
    """A user model handed back through a registered codec."""

    amount: decimal.Decimal
    currency: str


register_codec(
    Money,
    lambda m: {"amount": m.amount, "currency": m.currency},
    lambda d: Money(d["amount"], d["currency"]),
)

_offsets = st.integers(min_value=-23 * 60, max_value=23 * 60).map(
    lambda minutes: dt.timezone(dt.timedelta(minutes=minutes))
)
_zones = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]).map(
    zoneinfo.ZoneInfo
)

#: Scalars of the supported set, with the edges the canonical form normalizes.
handed_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(),  # -0.0, NaN, inf included
    st.sampled_from([-0.0, math.inf, -math.inf, math.nan]),
    text,
    st.binary(max_size=20),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.sampled_from([decimal.Decimal("10.50"), decimal.Decimal("-0E+3"), decimal.Decimal("1E+2")]),
    st.datetimes(),
    st.datetimes(timezones=st.one_of(st.just(dt.UTC), _offsets, _zones)),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.uuids().map(lambda u: uuid.UUID(str(u))),
    st.sampled_from([Colour.RED, Colour.BLUE, Level.LOW]),
    st.builds(Money, st.decimals(allow_nan=False, allow_infinity=False), text),
)

#: Values of the supported set: tuples apart from lists, dicts in any key order.
handed_values: st.SearchStrategy[Any] = st.recursive(
    handed_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(text, children, max_size=4),
    ),
    max_leaves=20,
)


def _dumps(value: Any) -> str | None:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return None


def assert_same_shape(live: Any, replayed: Any) -> None:
    """The two values are the same object shape: type, repr, json.dumps and key order."""
    assert type(replayed) is type(live)
    assert repr(replayed) == repr(live)
    assert _dumps(replayed) == _dumps(live)
    if isinstance(live, dict):
        assert list(replayed) == list(live)
        for key in live:
            assert_same_shape(live[key], replayed[key])
    elif isinstance(live, list | tuple):
        for a, b in zip(live, replayed, strict=True):
            assert_same_shape(a, b)


def _loop_handing(drive: Drive, value: Any) -> Callable[[redrive.Run], Loop]:
    """A loop whose tool and model both answer ``value``; it returns what it got."""

    @drive.tool(restart_safe=False)
    def lookup(x: int) -> Any:
        return value

    @drive.model
    def think(prompt: str) -> Any:
        return value

    def loop(run: redrive.Run) -> Loop:
        got = yield lookup(1)
        answer = yield think("p")
        stamp = redrive.now()
        ident = redrive.uuid4()
        run.finish(None)
        return [got, answer, stamp, ident]

    return loop


def check_round_trip(drive: Drive, journal: Any, replay_from: Any, value: Any) -> None:
    """Record ``value`` through a tool and a model on ``journal``, replay from ``replay_from``."""
    loop = _loop_handing(drive, value)
    live = drive.run(journal, "r1", loop).value
    assert_same_shape(value, live[0])
    assert_same_shape(value, live[1])
    replayed = drive.run(replay_from(), "r1", loop, live=False).value
    for got, want in zip(replayed, live, strict=True):
        assert_same_shape(want, got)


def _settings(examples: int) -> settings:
    """Settings for the round-trip properties (journals are slow; fixtures are per test)."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@_settings(60)
@given(value=handed_values, face=st.sampled_from(("sync", "async")))
def test_values_round_trip_on_the_memory_journal(value: Any, face: Any) -> None:
    """Memory journal: a tool and a model answering v give the loop v's shape, both times."""
    journal = MemoryJournal()
    check_round_trip(Drive(face), journal, lambda: journal, value)


@_settings(8)
@given(value=handed_values, face=st.sampled_from(("sync", "async")))
def test_values_round_trip_on_duckdb_and_an_rdj_export(value: Any, face: Any) -> None:
    """DuckDB, then the run exported to ``.rdj`` and replayed from the file."""
    with tempfile.TemporaryDirectory() as tmp:
        journal = redrive.open_journal(os.path.join(tmp, "runs.duckdb"))
        try:
            check_round_trip(Drive(face), journal, lambda: journal, value)
            path = os.path.join(tmp, "r1.rdj")
            redrive.export_run(journal, "r1", path)
        finally:
            journal.close()
        rdj = redrive.open_journal(path)
        try:
            loop = _loop_handing(Drive(face), value)
            got = Drive(face).run(rdj, "r1", loop, live=False).value
            assert_same_shape(value, got[0])
            assert_same_shape(value, got[1])
        finally:
            rdj.close()


@pytest.fixture
def pg_journal(pg_url: str, pg_schema: str) -> Iterator[Any]:
    """A Postgres journal in a fresh schema."""
    from redrive.storage.postgres import PostgresJournal

    journal = PostgresJournal(pg_url, schema=pg_schema, max_size=2)
    yield journal
    journal.close()


@_settings(8)
@given(value=handed_values, face=st.sampled_from(("sync", "async")))
def test_values_round_trip_on_postgres(pg_journal: Any, value: Any, face: Any) -> None:
    """Postgres: the same property (one run id per example)."""
    run_id = f"r{uuid.uuid4().hex}"
    drive = Drive(face)
    loop = _loop_handing(drive, value)
    live = drive.run(pg_journal, run_id, loop).value
    replayed = drive.run(pg_journal, run_id, loop, live=False).value
    for got, want in zip(replayed, live, strict=True):
        assert_same_shape(want, got)
    assert_same_shape(value, replayed[0])


# -- the examples of issue 11, item 1 --------------------------------------------------------


def test_a_tool_answering_datetimes_and_decimals_gets_them_back(drive: Drive) -> None:
    """A datetime, a date and Decimal("10.50") come back as themselves, live and replayed,
    and the loop's json.dumps(default=str) gives the same text both times."""
    value = {
        "when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        "day": dt.date(2026, 1, 2),
        "total": decimal.Decimal("10.50"),
    }
    journal = MemoryJournal()
    loop = _loop_handing(drive, value)
    live = drive.run(journal, "r1", loop).value[0]
    replayed = drive.run(journal, "r1", loop, live=False).value[0]
    assert live == value and list(live) == ["when", "day", "total"]
    assert repr(live["total"]) == "Decimal('10.50')"
    assert live["when"].utcoffset() == dt.timedelta(hours=2)
    assert json.dumps(live, default=str) == json.dumps(replayed, default=str)
    assert_same_shape(live, replayed)


def test_a_model_answering_a_big_int_gets_an_int(drive: Drive) -> None:
    """A ``redrive.model`` answering -(2**63)-1 hands back that int, not an ExtType."""
    journal = MemoryJournal()
    loop = _loop_handing(drive, -(2**63) - 1)
    assert drive.run(journal, "r1", loop).value[1] == -(2**63) - 1
    replayed = drive.run(journal, "r1", loop, live=False).value[1]
    assert type(replayed) is int and replayed == -(2**63) - 1


def test_keys_stay_canonical() -> None:
    """The match key ignores dict order and decimal spelling, as before."""
    assert call_key("t", {"a": 1, "b": decimal.Decimal("1.50")}) == call_key(
        "t", {"b": decimal.Decimal("1.5"), "a": 1}
    )
    stored, _ = store({"b": 1, "a": 2})
    assert list(decode(encode({"result": stored}))["result"]) == ["b", "a"]


# -- item 7: the tell_model placeholder, recover() ------------------------------------------


def test_tell_model_placeholder_keeps_its_key_order(drive: Drive) -> None:
    """The not-safely-resumable outcome comes back in the same key order live and replayed,
    so a loop that puts its json.dumps in the next model request replays without drift."""
    journal = MemoryJournal()
    ran: list[int] = []

    @drive.tool(restart_safe=False)
    def pay(cents: int, when: dt.datetime) -> str:
        ran.append(cents)
        return "ok"

    @drive.model
    def think(content: str) -> str:
        return "noted"

    when = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)

    def loop(run: redrive.Run) -> Loop:
        outcome = yield pay(5, when)
        yield think(json.dumps(outcome, default=str))
        run.finish(None)
        return outcome

    drive.crash(journal, "r1", "tool_body_done", "pay", loop)
    live = drive.run(journal, "r1", loop, on_in_flight="tell_model").value
    assert list(live)[:2] == ["status", "tool"]
    assert live["arguments"] == {"cents": 5, "when": when}
    for _ in range(2):  # every later replay, not only the first
        replayed = drive.run(journal, "r1", loop, live=False).value
        assert_same_shape(live, replayed)
    assert ran == [5]


def test_recover_done_result_keeps_its_shape(drive: Drive) -> None:
    """A result settled by recover() is handed back as itself, live and replayed."""
    journal = MemoryJournal()
    settled = {"z": decimal.Decimal("1.10"), "a": (1, 2), "at": dt.date(2026, 1, 1)}

    @drive.tool(restart_safe=False, recover=lambda args, key: redrive.Recovery.done(settled))
    def pay(cents: int) -> Any:
        return settled

    def loop(run: redrive.Run) -> Loop:
        got = yield pay(5)
        run.finish(None)
        return got

    drive.crash(journal, "r1", "tool_body_done", "pay", loop)
    live = drive.run(journal, "r1", loop).value
    assert_same_shape(settled, live)
    assert_same_shape(live, drive.run(journal, "r1", loop, live=False).value)


@_settings(25)
@given(value=handed_values, face=st.sampled_from(("sync", "async")))
def test_recover_and_tell_model_hand_back_any_value_the_same(value: Any, face: Any) -> None:
    """recover() settling an in-flight call with a generated value, and the placeholder of a
    tool taking it as an argument, hand the loop the same shape live and replayed."""
    drive = Drive(face)
    journal = MemoryJournal()

    @drive.tool(restart_safe=False, recover=lambda args, key: redrive.Recovery.done(value))
    def settle(x: int) -> Any:
        return value

    @drive.tool(restart_safe=False)
    def send(payload: Any) -> None:
        return None

    def loop(run: redrive.Run) -> Loop:
        got = yield settle(1)
        told = yield send(got)
        run.finish(None)
        return [got, told]

    drive.crash(journal, "r1", "tool_body_done", "settle", loop)
    drive.crash(journal, "r1", "tool_body_done", "send", loop)
    live = drive.run(journal, "r1", loop, on_in_flight="tell_model").value
    assert_same_shape(value, live[0])
    assert live[1]["status"] == "not_safely_resumable"
    assert_same_shape(live, drive.run(journal, "r1", loop, live=False).value)


# -- outside the set ------------------------------------------------------------------------


class Opaque:
    """Nothing redrive knows how to journal."""


def test_a_value_outside_the_set_fails_the_step_at_record_time(drive: Drive) -> None:
    """The TypeError names the run, seq, tool and path; the step is journaled as failed."""
    journal = MemoryJournal()

    @drive.tool(restart_safe=False)
    def fetch(x: int) -> Any:
        return {"items": [1, Opaque()]}

    def loop(run: redrive.Run) -> Loop:
        yield fetch(1)

    with pytest.raises(TypeError) as info:
        drive.run(journal, "r1", loop)
    message = str(info.value)
    assert "'r1'" in message and "seq 1" in message and "'fetch'" in message
    assert "result.items[1]" in message and "Opaque" in message
    kinds = [f.kind for f in journal.frames("r1")]
    assert kinds[1:3] == ["tool_start", "tool_error"]


def test_a_model_answering_outside_the_set_names_run_model_and_path(drive: Drive) -> None:
    """A model response outside the set is a TypeError naming the run, model and path."""
    journal = MemoryJournal()

    @drive.model
    def think(prompt: str) -> Any:
        return {"choices": [{"at": Opaque()}]}

    def loop(run: redrive.Run) -> Loop:
        yield think("p")

    with pytest.raises(TypeError) as info:
        drive.run(journal, "r1", loop)
    message = str(info.value)
    assert "'r1'" in message and "think" in message
    assert "response.choices[0].at" in message


def test_an_enum_whose_class_is_not_imported_is_a_clear_error() -> None:
    """Replay never imports code: an enum from a module not imported names the fix."""
    stored, _ = store(Colour.RED)
    raw = decode(encode({"v": stored}))["v"]
    raw = type(raw)(raw.kind, "no_such_module:Colour", raw.value)
    with pytest.raises(TypeError, match="no_such_module"):
        rebuild(raw, where="run 'r1' seq 3: tool 'x' result")


def test_user_models_without_a_codec_come_back_as_dicts_both_times(drive: Drive) -> None:
    """A dataclass without a codec is a dict live and replayed; result_type builds it."""

    @dataclasses.dataclass
    class Point:
        y: int
        x: int

    journal = MemoryJournal()

    @drive.tool(restart_safe=True, result_type=lambda d: Point(**d))
    def where() -> Point:
        return Point(2, 1)

    def loop(run: redrive.Run) -> Loop:
        got = yield where()
        run.finish(None)
        return got

    assert drive.run(journal, "r1", loop).value == Point(2, 1)
    assert drive.run(journal, "r1", loop, live=False).value == Point(2, 1)
    assert list(decode_value(encode_value(Point(2, 1)))) == ["y", "x"]


@settings(max_examples=200)
@given(data=st.binary(max_size=64))
def test_decode_value_takes_untrusted_bytes(data: bytes) -> None:
    """Whatever the bytes, decoding a stored value gives a value or ValueError."""
    with contextlib.suppress(ValueError):
        decode_value(data)
    with contextlib.suppress(ValueError):
        decode(b"\xc7" + bytes([len(data)]) + b"\x0a" + data)  # ext 10 holding those bytes


@pytest.mark.parametrize("depth", [300, 5000])
def test_a_deeply_nested_stored_value_is_refused_not_a_crash(depth: int) -> None:
    """Tuples nested past the limit (as a hostile file may hold) give ValueError: decoding
    is one msgpack call whatever the nesting, so it cannot exhaust the C stack."""
    import msgpack

    tree: list[Any] = []
    for _ in range(min(depth, 400)):
        tree = [msgpack.ExtType(23, b""), tree]
    bombs = [msgpack.packb(tree), b"\x91" * depth + b"\x90"]
    for data in bombs:
        with pytest.raises(ValueError):
            decode_value(data)
        with pytest.raises(ValueError):
            decode(msgpack.packb(msgpack.ExtType(10, data)))
