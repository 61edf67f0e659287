"""Randomized crash harness: agent loops SIGKILLed at random boundaries, resumed, checked.

Each case runs an agent loop in child processes (forked from a forkserver
that has redrive preloaded), killing the child with SIGKILL at a random step
boundary (``redrive.replay.set_boundary_hook``, plus a point inside tool
bodies just after their side effect), several times per run, then resuming
it in a fresh child. After every kill the journal chain is verified and the
side-effect log (a file outside the children) is checked: no side-effecting
step's effect happened twice. The finished run's output must equal an
uninterrupted run's, and replaying it must make no model call and run no
tool body.

Shapes: seeded random loops (tools of every declaration: read-only,
restart-safe deduping on the idempotency key, unsafe with a ``recover()``
hook, unsafe without one; sync and async with parallel tool calls), and the
79 real tau-bench airline conversations as scripted model and user replies.

Size: ``REDRIVE_HARNESS_N`` random runs (default 30, each a seeded random shape; 60 for
the earlier default, 200 for the full size) and every tau-bench run once; ``--runslow``
(when the suite defines it) or ``REDRIVE_HARNESS_N`` >= 200 raise the kills per run for
thousands of crash points.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import signal
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from redrive.replay import set_boundary_hook
from redrive.storage import verify_frames

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]
TAU = (
    ROOT.parent / "shared" / "realdata" / "trajectories" / "tau-bench__gpt-4o-airline__trimmed.json"
)
RANDOM_RUNS = int(os.environ.get("REDRIVE_HARNESS_N", "30"))

EXIT_OK, EXIT_BLOCKED, EXIT_ERROR = 0, 3, 1

# -- state of the process running a loop (a child, or the test for references) --------

_LOG: str = ""
_HOOK: Callable[[str, dict[str, Any]], None] | None = None
_SCRIPT: dict[str, Any] = {}
_TAU_NEXT: list[Any] = [None]


def _log(**event: Any) -> None:
    with open(_LOG, "a") as fh:
        fh.write(json.dumps(event, sort_keys=True) + "\n")


def _events(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.endswith("\n")]


def _mid_body(name: str) -> None:
    if _HOOK is not None:
        _HOOK("tool_mid_body", {"name": name})


def _result(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(args, sort_keys=True)
    return {"tool": tool, "echo": args, "digest": sum(map(ord, text)) % 9973}


def _effects(key: str) -> list[dict[str, Any]]:
    return [e for e in _events(_LOG) if e["event"] == "effect" and e["key"] == key]


def _recover(tool: str) -> Callable[[dict[str, Any], str], redrive.Recovery]:
    def recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        found = _effects(key)
        return redrive.Recovery.done(found[0]["result"]) if found else redrive.Recovery.not_done()

    return recover


# -- random-shape tools: one of each declaration, sync and async ----------------------


@redrive.tool(read_only=True)
def lookup_record(query: str) -> dict[str, Any]:
    _log(event="exec", tool="lookup_record", key="", args={"query": query})
    return _result("lookup_record", {"query": query})


@redrive.tool(restart_safe=True)
def upsert_note(note: str, idempotency_key: str) -> dict[str, Any]:
    result = _result("upsert_note", {"note": note})
    _log(event="exec", tool="upsert_note", key=idempotency_key, args={"note": note})
    if not _effects(idempotency_key):  # dedupes on the idempotency key, like a real API
        _log(
            event="effect",
            tool="upsert_note",
            key=idempotency_key,
            args={"note": note},
            result=result,
        )
    _mid_body("upsert_note")
    return result


@redrive.tool(restart_safe=False, recover=_recover("charge_card"))
def charge_card(amount: int, idempotency_key: str) -> dict[str, Any]:
    result = _result("charge_card", {"amount": amount})
    _log(
        event="effect",
        tool="charge_card",
        key=idempotency_key,
        args={"amount": amount},
        result=result,
    )
    _mid_body("charge_card")
    return result


@redrive.tool(restart_safe=False)
def send_email(to: str, idempotency_key: str) -> dict[str, Any]:
    result = _result("send_email", {"to": to})
    _log(event="effect", tool="send_email", key=idempotency_key, args={"to": to}, result=result)
    _mid_body("send_email")
    return result


@redrive.tool(name="lookup_record_async", read_only=True)
async def alookup_record(query: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    return lookup_record.__wrapped__(query)  # type: ignore[attr-defined, no-any-return]


@redrive.tool(name="upsert_note_async", restart_safe=True)
async def aupsert_note(note: str, idempotency_key: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    return upsert_note.__wrapped__(note, idempotency_key)  # type: ignore[attr-defined, no-any-return]


@redrive.tool(name="charge_card_async", restart_safe=False, recover=_recover("charge_card"))
async def acharge_card(amount: int, idempotency_key: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    return charge_card.__wrapped__(amount, idempotency_key)  # type: ignore[attr-defined, no-any-return]


@redrive.tool(name="send_email_async", restart_safe=False)
async def asend_email(to: str, idempotency_key: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    return send_email.__wrapped__(to, idempotency_key)  # type: ignore[attr-defined, no-any-return]


SYNC_TOOLS: dict[str, Callable[..., Any]] = {
    "lookup_record": lookup_record,
    "upsert_note": upsert_note,
    "charge_card": charge_card,
    "send_email": send_email,
}
ASYNC_TOOLS: dict[str, Callable[..., Any]] = {
    "lookup_record": alookup_record,
    "upsert_note": aupsert_note,
    "charge_card": acharge_card,
    "send_email": asend_email,
}
ARG = {"lookup_record": "query", "upsert_note": "note", "charge_card": "amount", "send_email": "to"}


@redrive.model(name="model:scripted")  # type: ignore[untyped-decorator]
def think(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model: the reply for this turn of the shape."""
    turn = sum(1 for m in messages if m["role"] == "assistant")
    calls = _SCRIPT["turns"][turn] if turn < len(_SCRIPT["turns"]) else []
    return {
        "role": "assistant",
        "content": None if calls else f"done after {turn} turns",
        "tool_calls": [
            {"id": f"call_{turn}_{i}", "name": tool, "arguments": {ARG[tool]: value}}
            for i, (tool, value) in enumerate(calls)
        ],
    }


def random_shape(seed: int) -> dict[str, Any]:
    """Return a seeded loop shape: turns of tool calls (a tool-less final turn ends it)."""
    rng = random.Random(seed)
    weights = {"lookup_record": 3, "upsert_note": 3, "charge_card": 3, "send_email": 1}
    turns = []
    for turn in range(rng.randint(1, 7)):
        calls = []
        for i in range(rng.choice((1, 1, 1, 2, 3))):
            tool = rng.choices(list(weights), list(weights.values()))[0]
            value: Any = rng.randint(1, 500) if tool == "charge_card" else f"{tool[:3]}-{turn}-{i}"
            calls.append([tool, value])
        turns.append(calls)
    return {"kind": "random", "seed": seed, "turns": turns, "async": rng.random() < 0.3}


def random_agent() -> list[dict[str, Any]]:
    """The loop of a random shape: model, then its tool calls, until a tool-less reply."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"shape {_SCRIPT['seed']}"}]
    while True:
        reply = think(messages)
        messages.append(reply)
        if not reply["tool_calls"]:
            return messages
        for call in reply["tool_calls"]:
            result = SYNC_TOOLS[call["name"]](**call["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


async def random_agent_async() -> list[dict[str, Any]]:
    """The async loop: a reply's tool calls run in parallel (asyncio.gather)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"shape {_SCRIPT['seed']}"}]
    while True:
        reply = think(messages)
        messages.append(reply)
        if not reply["tool_calls"]:
            return messages
        results = await asyncio.gather(
            *(ASYNC_TOOLS[c["name"]](**c["arguments"]) for c in reply["tool_calls"])
        )
        for call, result in zip(reply["tool_calls"], results, strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


# -- tau-bench: recorded conversations as scripted model and user replies ---------------

TAU_READ = {
    "get_reservation_details",
    "search_direct_flight",
    "get_user_details",
    "think",
    "calculate",
    "search_onestop_flight",
    "list_all_airports",
}


def _tau_tool(name: str) -> Callable[..., Any]:
    def body(arguments: dict[str, Any], idempotency_key: str = "") -> Any:
        recorded = _TAU_NEXT[0]
        if name not in TAU_READ:
            _log(event="effect", tool=name, key=idempotency_key, args=arguments, result=recorded)
            _mid_body(name)
        return recorded

    if name in TAU_READ:

        def read(arguments: dict[str, Any]) -> Any:
            return body(arguments)

        return redrive.tool(name=name, read_only=True)(read)

    def write(arguments: dict[str, Any], idempotency_key: str) -> Any:
        return body(arguments, idempotency_key)

    return redrive.tool(name=name, restart_safe=False, recover=_recover(name))(write)


TAU_TOOLS: dict[str, Callable[..., Any]] = {}


@redrive.model(name="model:gpt-4o")  # type: ignore[untyped-decorator]
def tau_assistant(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """gpt-4o, scripted: the assistant message recorded at this point of the conversation."""
    reply: dict[str, Any] = _SCRIPT["traj"][len(messages)]
    assert reply["role"] == "assistant", reply
    return reply


@redrive.model(name="model:user-simulator")  # type: ignore[untyped-decorator]
def tau_user(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The simulated user, scripted: the user message recorded at this point."""
    reply: dict[str, Any] = _SCRIPT["traj"][len(messages)]
    assert reply["role"] == "user", reply
    return reply


def tau_agent() -> list[dict[str, Any]]:
    """A tau-bench airline loop: assistant turns with tool calls, user turns, to the end."""
    traj = _SCRIPT["traj"]
    messages: list[dict[str, Any]] = [traj[0], traj[1]]
    while len(messages) < len(traj):
        if traj[len(messages)]["role"] == "user":
            messages.append(tau_user(messages))
            continue
        reply = tau_assistant(messages)
        messages.append(reply)
        for call in reply.get("tool_calls") or []:
            name = call["function"]["name"]
            tool = TAU_TOOLS.setdefault(name, _tau_tool(name))
            _TAU_NEXT[0] = traj[len(messages)]["content"]
            result = tool(json.loads(call["function"]["arguments"]))
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "name": name, "content": result}
            )
    return messages


# -- running one attempt ---------------------------------------------------------------


def _drive(script: dict[str, Any], journal: Any, run_id: str) -> Any:
    global _SCRIPT
    _SCRIPT = script
    with redrive.run(journal, run_id, input={"kind": script["kind"], "id": script["id"]}) as run:
        if script["kind"] == "tau":
            out = tau_agent()
        elif script["async"]:
            out = asyncio.run(random_agent_async())
        else:
            out = random_agent()
        run.finish(out)
    return run


def child(
    script: dict[str, Any], journal_path: str, log: str, hits: str, kill_at: int | None
) -> None:
    """One attempt, in a child process: resume the run, dying at boundary number ``kill_at``."""
    global _LOG, _HOOK
    _LOG = log
    count = [0]
    hits_fh = open(hits, "a", buffering=1)  # noqa: SIM115 - open until the process dies

    def hook(point: str, info: dict[str, Any]) -> None:
        count[0] += 1
        hits_fh.write(f"{point} {info.get('name')}\n")
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    _HOOK = hook
    set_boundary_hook(hook)
    try:
        journal = redrive.open_journal(journal_path)
        _drive(script, journal, script["id"])
        journal.close()
    except redrive.SideEffectRetryBlockedError as exc:
        hits_fh.write(f"BLOCKED {getattr(exc, 'tool', '')}\n")
        os._exit(EXIT_BLOCKED)
    except BaseException:
        hits_fh.write("ERROR " + traceback.format_exc().replace("\n", " | ") + "\n")
        os._exit(EXIT_ERROR)
    os._exit(EXIT_OK)


@pytest.fixture(scope="module")
def spawn() -> Iterator[multiprocessing.context.BaseContext]:
    """A forkserver context with redrive and this module preloaded (fast, thread-free forks)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["redrive", "duckdb", __name__])
    yield ctx


def reference(script: dict[str, Any], log: str) -> tuple[Any, int]:
    """Run the loop uninterrupted in this process; return (output, boundaries passed)."""
    global _LOG, _HOOK
    _LOG = log
    count = [0]

    def hook(point: str, info: dict[str, Any]) -> None:
        count[0] += 1

    _HOOK = hook
    set_boundary_hook(hook)
    try:
        run = _drive(script, redrive.open_journal(":memory:"), script["id"])
    finally:
        set_boundary_hook(None)
        _HOOK = None
    return run.output, count[0]


def check_log(log: str) -> None:
    """No effect of a side-effecting step happened twice (per idempotency key)."""
    twice = {
        k: n
        for k, n in Counter(e["key"] for e in _events(log) if e["event"] == "effect").items()
        if n > 1
    }
    assert not twice, f"side effects repeated: {twice}"


def crash_and_resume(
    ctx: Any, script: dict[str, Any], tmp: Path, rng: random.Random, kills: int
) -> tuple[str, int]:
    """Run ``script`` with up to ``kills`` SIGKILLs, resuming each time; check every invariant.

    Returns ``(outcome, kills done)``: outcome "finished" or "blocked" (an unsafe
    tool without recover() was in flight, and resume refused to re-run it).
    """
    tmp.mkdir(parents=True, exist_ok=True)
    expected, boundaries = reference(script, str(tmp / "reference.log"))
    if script["kind"] == "tau":
        assert expected == script["traj"], f"{script['id']}: the scripted loop lost its way"
    journal_path, log, hits = str(tmp / "run.duckdb"), str(tmp / "effects.log"), str(tmp / "hits")
    done = 0
    used = 0
    for attempt in range(kills + 1):
        kill_at = None
        if attempt < kills:
            kill_at = rng.randint(1, max(1, boundaries - used + 1))
        proc = ctx.Process(target=child, args=(script, journal_path, log, hits, kill_at))
        proc.start()
        proc.join(120)
        assert proc.exitcode is not None, f"{script['id']}: the child hung"
        journal = redrive.open_journal(journal_path)
        try:
            verify_frames(journal.frames(script["id"]), source=journal_path)
            record = journal.get_run(script["id"])
        finally:
            journal.close()
        check_log(log)
        if proc.exitcode == -signal.SIGKILL:
            done += 1
            used += kill_at or 0
            continue
        with open(hits) as fh:
            last = fh.read().splitlines()[-1:] or [""]
        if proc.exitcode == EXIT_BLOCKED:
            # only an unsafe tool with no recover() may block, and its body ran at most once
            assert last[0].startswith("BLOCKED"), last
            assert record is not None and record.status == "running"
            return "blocked", done
        assert proc.exitcode == EXIT_OK, f"{script['id']}: {last[0][:2000]}"
        assert record is not None and record.status == "succeeded"
        assert record.output_value() == expected, f"{script['id']}: output differs"
        break

    # the effects are those of the uninterrupted run: the same calls, each once
    def effects(path: str) -> Counter[str]:
        return Counter(
            json.dumps([e["tool"], e["args"]], sort_keys=True)
            for e in _events(path)
            if e["event"] == "effect"
        )

    assert effects(log) == effects(str(tmp / "reference.log")), script["id"]
    # replaying the finished run: no model call, no tool body, the recorded output
    before = len(_events(log))
    global _LOG
    _LOG = log
    journal = redrive.open_journal(journal_path)
    try:
        run = _drive(script, journal, script["id"])
    finally:
        journal.close()
    assert run.live_steps == 0 and run.output == expected
    assert len(_events(log)) == before
    return "finished", done


def test_random_shapes_survive_repeated_kills(
    spawn: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Seeded random loops killed at random boundaries several times end like uninterrupted runs."""
    slow = bool(request.config.getoption("--runslow", default=False))
    max_kills = 8 if slow or RANDOM_RUNS >= 200 else 4
    outcomes: Counter[str] = Counter()
    total = 0
    for seed in range(RANDOM_RUNS):
        rng = random.Random(1000 + seed)
        script = {**random_shape(seed), "id": f"shape-{seed}"}
        outcome, kills = crash_and_resume(
            spawn, script, tmp_path / f"s{seed}", rng, rng.randint(1, max_kills)
        )
        outcomes[outcome] += 1
        total += kills
    assert outcomes["finished"] > 0 and total >= RANDOM_RUNS, (outcomes, total)
    print(f"random shapes: {RANDOM_RUNS} runs, {total} kills, {dict(outcomes)}", file=sys.stderr)


def _tau_runs() -> list[dict[str, Any]]:
    if not TAU.exists():
        pytest.skip(f"the tau-bench trajectories are not here: {TAU} (shared/ absent)")
    with open(TAU) as fh:
        runs: list[dict[str, Any]] = json.load(fh)
    return runs


def test_tau_bench_runs_survive_kills(
    spawn: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """All 79 real tau-bench airline runs, killed and resumed, end with the original transcript."""
    slow = bool(request.config.getoption("--runslow", default=False))
    total = 0
    runs = _tau_runs()
    assert len(runs) == 79
    for index, entry in enumerate(runs):
        rng = random.Random(index)
        traj = entry["traj"]
        script = {
            "kind": "tau",
            "id": f"tau-{entry['task_id']}-{entry['trial']}-{index}",
            "traj": traj,
        }
        outcome, kills = crash_and_resume(
            spawn, script, tmp_path / f"t{index}", rng, rng.randint(1, 6 if slow else 3)
        )
        assert outcome == "finished", script["id"]
        total += kills
    print(f"tau-bench: {len(runs)} runs, {total} kills", file=sys.stderr)
