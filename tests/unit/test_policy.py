"""Replay policies (issue 4, item 6): strict, warn and lenient per step kind, ignored paths."""

from __future__ import annotations

from typing import Any

import pytest

import redrive
from redrive.replay import ReplayDriftWarning
from redrive.replay._policy import REDACTED, compile_paths, match_view, redact_paths
from redrive.storage import MemoryJournal


def test_policy_of_names_and_rules() -> None:
    """ "strict" and "lenient" set every kind; a policy object is used as is."""
    assert redrive.ReplayPolicy.of("lenient").rule("value") == "lenient"
    assert redrive.ReplayPolicy.of("strict").rule("model") == "strict"
    mixed = redrive.ReplayPolicy(tool="strict", model="warn", value="lenient")
    assert redrive.ReplayPolicy.of(mixed) is mixed
    assert (mixed.rule("tool"), mixed.rule("model"), mixed.rule("value")) == (
        "strict",
        "warn",
        "lenient",
    )


@pytest.mark.parametrize("bad", [{"tool": "loose"}, {"model": "STRICT"}])
def test_policy_rejects_unknown_rules(bad: dict[str, Any]) -> None:
    """An unknown rule name is a ValueError naming the kind."""
    with pytest.raises(ValueError, match="replay policy for"):
        redrive.ReplayPolicy(**bad)
    with pytest.raises(ValueError, match="replay="):
        redrive.ReplayPolicy.of("warn")


def test_match_view_drops_minted_ids_and_ignored_paths() -> None:
    """Model-minted ids, the idempotency key and ignored paths never decide a match."""
    args = {
        "messages": [
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            {"type": "function", "id": "fc_9", "name": "f"},
        ],
        "meta": {"request_id": "abc", "user": "u"},
        "idempotency_key": "r:1:f",
    }
    view = match_view(args, compile_paths(["$..request_id"]))
    assert view == {
        "messages": [{"role": "tool", "content": "ok"}, {"type": "function", "name": "f"}],
        "meta": {"user": "u"},
    }


def test_path_patterns() -> None:
    """Patterns support $.a.b, [*] and .. (any depth); non-strings are refused."""
    body = {"a": {"b": 1, "c": 2}, "items": [{"id": 1, "x": 1}], "deep": {"x": {"ts": 5}}}
    out = redact_paths(body, compile_paths(["a.b", "$.items[*].id", "$..ts"]))
    assert out == {
        "a": {"b": REDACTED, "c": 2},
        "items": [{"id": REDACTED, "x": 1}],
        "deep": {"x": {"ts": REDACTED}},
    }
    with pytest.raises(TypeError):
        compile_paths([3])  # type: ignore[list-item]


def _tools(calls: list[str]) -> tuple[Any, Any, Any]:
    @redrive.model
    def think(prompt: str) -> str:
        calls.append(f"model:{prompt}")
        return "go"

    @redrive.tool(restart_safe=False)
    def send(to: str) -> str:
        calls.append(f"send:{to}")
        return f"sent {to}"

    @redrive.tool(read_only=True)
    def search(q: str) -> str:
        calls.append(f"search:{q}")
        return f"found {q}"

    return think, send, search


def test_model_warn_tool_strict() -> None:
    """Per kind: model drift warns and replays the recorded response; tool drift diverges."""
    journal = MemoryJournal()
    calls: list[str] = []
    think, send, _ = _tools(calls)
    with redrive.run(journal, "r1") as run:
        think("hello")
        send("a")
        run.finish(None)
    calls.clear()
    policy = redrive.ReplayPolicy(tool="strict", model="warn")
    with (
        pytest.warns(ReplayDriftWarning, match=r"\$\.prompt: 'hello' -> 'hello!'"),
        redrive.run(journal, "r1", replay=policy),
    ):
        assert think("hello!") == "go"
        send("a")
    assert calls == []
    with (
        pytest.raises(redrive.DivergenceError, match=r"\$\.to: 'a' -> 'b'"),
        pytest.warns(ReplayDriftWarning),
        redrive.run(journal, "r1", replay=policy),
    ):
        think("hello!")
        send("b")


def test_ignored_paths_do_not_diverge() -> None:
    """A drift confined to an ignored path replays under strict rules."""
    journal = MemoryJournal()

    @redrive.model
    def think(prompt: str, meta: dict[str, Any]) -> str:
        return "go"

    with redrive.run(journal, "r1") as run:
        think("hi", {"request_id": "1"})
        run.finish(None)
    with pytest.raises(redrive.DivergenceError), redrive.run(journal, "r1"):
        think("hi", {"request_id": "2"})
    policy = redrive.ReplayPolicy(ignore=("$..request_id",))
    with redrive.run(journal, "r1", replay=policy) as again:
        think("hi", {"request_id": "2"})
    assert again.replayed_steps == 1


def _record_lenient(journal: MemoryJournal, calls: list[str]) -> None:
    think, send, search = _tools(calls)
    with pytest.raises(ConnectionError), redrive.run(journal, "r1"):
        think("p1")
        send("a")
        send("a")
        search("x")
        think("p2")
        send("b")
        raise ConnectionError("stop: the run stays resumable")


def test_lenient_matches_by_content_across_order() -> None:
    """Lenient: steps match by content among unconsumed ones, each recorded step used once."""
    journal = MemoryJournal()
    calls: list[str] = []
    _record_lenient(journal, calls)
    calls.clear()
    think, send, search = _tools(calls)
    with redrive.run(journal, "r1", replay="lenient") as run:
        think("rebuilt prompt")  # no match: live, recorded
        send("b")
        think("p2")
        send("a")
        send("a")
        send("a")  # a third identical call: the two recorded ones are used up
        search("x")
    assert calls == ["model:rebuilt prompt", "send:a"]
    assert (run.replayed_steps, run.live_steps) == (5, 2)
    assert run.status == "succeeded"


def test_strict_rejects_what_lenient_accepts() -> None:
    """The same reordered loop diverges under strict (one matcher, two policies)."""
    journal = MemoryJournal()
    calls: list[str] = []
    _record_lenient(journal, calls)
    think, send, _ = _tools(calls)
    with pytest.raises(redrive.DivergenceError), redrive.run(journal, "r1"):
        think("p1")
        send("b")


def test_lenient_read_only_tool_is_never_blocked() -> None:
    """Lenient: a read-only tool with new arguments just runs live; an in-flight one re-runs.

    The loop still asks for the recorded sends: a finished side effect left unasked
    fails the run's end under every rule (CONTRACT C6).
    """
    journal = MemoryJournal()
    calls: list[str] = []
    _record_lenient(journal, calls)
    calls.clear()
    _, send, search = _tools(calls)
    with redrive.run(journal, "r1", replay="lenient"):
        assert search("y") == "found y"
        assert search("x") == "found x"
        for to in ("a", "a", "b"):
            send(to)
    assert calls == ["search:y"]


def test_warn_never_hands_a_side_effecting_tool_another_calls_outcome() -> None:
    """Under tool='warn', a drifted call of a non-restart-safe tool is a divergence."""
    journal = MemoryJournal()
    charged: list[str] = []

    @redrive.tool
    def charge_card(card: str, amount: int) -> dict[str, Any]:
        charged.append(card)
        return {"charged": card}

    @redrive.tool(read_only=True)
    def get_rate(currency: str) -> float:
        return 1.5

    policy = redrive.ReplayPolicy(tool="warn")
    with redrive.run(journal, "w") as run:
        run.finish([charge_card("A", 5), get_rate("EUR")])
    with (
        pytest.raises(redrive.DivergenceError, match="charge_card"),
        redrive.run(journal, "w", replay=policy, live=False),
    ):
        charge_card("B", 7)
    with (
        pytest.warns(redrive.ReplayDriftWarning),
        redrive.run(journal, "w", replay=policy, live=False),
    ):
        charge_card("A", 5)
        assert get_rate("USD") == 1.5  # a read-only tool may drift with a warning
    assert charged == ["A"]


def test_lenient_does_not_follow_an_unsettled_side_effect_with_another_call() -> None:
    """Lenient replay blocks a new call of a tool whose earlier call is still in flight."""
    journal = MemoryJournal()
    charged: list[str] = []

    @redrive.tool
    def charge_card(card: str, memo: str) -> str:
        charged.append(memo)
        return "ok"

    class Crash(BaseException):
        pass

    def crash(point: str, info: dict[str, Any]) -> None:
        if point == "tool_body_done":
            raise Crash

    run = redrive.run(journal, "len", replay="lenient")
    run.__enter__()
    redrive.replay.set_boundary_hook(crash)
    try:
        with pytest.raises(Crash):
            charge_card("A", "attempt 1")
    finally:
        redrive.replay.set_boundary_hook(None)
        redrive.replay._context._current.set(None)
        redrive.replay._context._leave(run)
    with (
        pytest.raises(redrive.SideEffectRetryBlockedError) as info,
        redrive.run(journal, "len", replay="lenient"),
    ):
        charge_card("A", "attempt 2")
    assert info.value.arguments == {"card": "A", "memo": "attempt 1"}
    assert charged == ["attempt 1"]
