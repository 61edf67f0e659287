"""A property test of the step engine over generated loop programs (DESIGN invariants 1-4, 9).

Hypothesis draws a loop program (model steps, tool steps that are restart safe, read-only
or unsafe, with or without a truthful ``recover()``, and recorded values), the crashes of
its successive executions (where: before a body, inside it after its side effect, after
it returned, after its outcome is durable; how: abandoned unexited like a SIGKILL,
``SystemExit`` like a deploy, or an exception the run was told is resumable), a replay
policy, a face (sync or async) and, for a few examples, DuckDB instead of the memory
journal. It runs the program until the run finishes, resuming after every crash (with
``on_in_flight="tell_model"`` after a blocked step), and checks:

* an unsafe body's side effect (counted outside the runs) happens at most once per step;
* a blocked step is an unsafe tool that was in flight, and its body did not run again;
* a resumed execution calls no model and runs no tool whose outcome was already journaled;
* replaying the finished run with ``live=False`` calls nothing and hands the loop exactly
  what it got live: the same values, types, ``repr`` (dict key order) and ``json.dumps``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

import redrive
from redrive.replay import set_boundary_hook
from redrive.storage import MemoryJournal
from tests.conftest import PROFILES, Drive, DriveCrash, Loop, Step, hypothesis_profile
from tests.strategies import loop_programs, values


class Interrupted(Exception):
    """An interruption the run is told is resumable (``redrive.run(retryable=...)``)."""


#: (step kind, where) -> the boundary of :func:`redrive.replay.set_boundary_hook`
BOUNDARY = {
    ("tool", "before"): "tool_claimed",
    ("tool", "after_effect"): "tool_body_done",
    ("tool", "after_outcome"): "tool_recorded",
    ("model", "before"): "model_before",
    ("model", "after_effect"): "model_after",
    ("model", "after_outcome"): "model_recorded",
}


def _crash_error(how: str) -> BaseException:
    return {"abandon": DriveCrash, "exit": SystemExit, "resumable": Interrupted}[how]()


class World:
    """Everything outside the runs: side effects, model calls, the crash to inject.

    Attributes:
        effects: (step index, idempotency key) for every tool body that ran.
        model_calls: the step index of every model call made.
        called: step indexes called (body or model) in the current execution.
        received: step indexes whose result the loop got in the current execution.
    """

    def __init__(self, program: dict[str, Any]) -> None:
        self.program = program
        self.effects: list[tuple[int, str]] = []
        self.model_calls: list[int] = []
        self.called: set[int] = set()
        self.received: set[int] = set()
        self.crash: tuple[int, str, str] | None = None
        self.fired = False

    def execution(self, crash: tuple[int, str, str] | None) -> None:
        """Start an execution that crashes as ``crash`` says (None: no crash)."""
        self.crash, self.fired = crash, False
        self.called, self.received = set(), set()

    def maybe_crash(self, index: int, where: str | None) -> None:
        """Raise the planned crash if it is at step ``index``, ``where`` (None: anywhere)."""
        if self.crash is None or self.fired or self.crash[0] != index:
            return
        if where is None or self.crash[1] == where:
            self.fired = True
            raise _crash_error(self.crash[2])

    def hook(self, boundary: str, info: dict[str, Any]) -> None:
        """The boundary hook: crash at the planned boundary of the planned step."""
        if self.crash is None or self.fired:
            return
        index, where, _ = self.crash
        kind = self.program["steps"][index][0]
        if BOUNDARY.get((kind, where)) == boundary and info["name"] == step_name(self, index):
            self.maybe_crash(index, where)


def step_name(world: World, index: int) -> str:
    """The journaled name of step ``index`` (unique in the program)."""
    step = world.program["steps"][index]
    return f"model:m{index}" if step[0] == "model" else f"t{index}_{step[1]}"


def build(drive: Drive, world: World) -> Callable[[redrive.Run], Loop]:
    """Make the program's tools and models for ``drive``'s face; return its loop."""
    program = world.program
    made: dict[int, Step] = {}
    for index, step in enumerate(program["steps"]):
        if step[0] == "model":
            made[index] = drive.model(_model_body(world, index), name=step_name(world, index))
        elif step[0] == "tool":
            made[index] = _tool(drive, world, index)

    def loop(run: redrive.Run) -> Loop:
        got: list[Any] = []
        prev: Any = None
        for index, step in enumerate(program["steps"]):
            if step[0] == "value":
                world.maybe_crash(index, None)  # between steps: the loop is stopped
                value: Any = getattr(redrive, step[1])()
            else:
                value = yield made[index](n=index, prev=repr(prev))
                world.received.add(index)
            got.append(value)
            prev = value
        return got

    return loop


def _model_body(world: World, index: int) -> Callable[..., Any]:
    def ask(n: int, prev: str) -> dict[str, Any]:
        world.model_calls.append(index)
        world.called.add(index)
        world.maybe_crash(index, "in_body")
        return {"z": n, "text": world.program["results"][index], "a": prev[:8]}

    return ask


def _tool(drive: Drive, world: World, index: int) -> Step:
    _, kind, recover = world.program["steps"][index]
    result = world.program["results"][index]

    def body(n: int, prev: str, idempotency_key: str) -> Any:
        world.effects.append((index, idempotency_key))
        world.called.add(index)
        world.maybe_crash(index, "in_body")
        return result

    def truthful_recover(args: dict[str, Any], key: str) -> redrive.Recovery:
        if any(k == key for _, k in world.effects):
            return redrive.Recovery.done(result)
        return redrive.Recovery.not_done()

    body.__name__ = body.__qualname__ = step_name(world, index)
    declaration: dict[str, Any] = {
        "safe": {"restart_safe": True},
        "read_only": {"read_only": True},
        "unsafe": {"restart_safe": False},
    }[kind]
    if recover == "yes":
        declaration["recover"] = truthful_recover
    made: Step = drive.tool(**declaration)(body)
    return made


def drive_to_the_end(drive: Drive, journal: Any, world: World, policy: str) -> list[Any]:
    """Execute the program until its run finishes, crashing and resuming; check each execution.

    Returns:
        What the loop got in the execution that finished the run.
    """
    loop = build(drive, world)
    steps = world.program["steps"]
    crashes = list(world.program["crashes"])
    finished: set[int] = set()  # steps whose outcome is journaled
    tell = False
    set_boundary_hook(world.hook)
    try:
        for execution in range(len(crashes) + len(steps) + 2):
            crash = crashes[execution] if execution < len(crashes) else None
            world.execution(crash)
            options: dict[str, Any] = {
                "replay": policy,
                "retryable": (Interrupted,),
                "max_attempts": 100,
                "on_in_flight": "tell_model" if tell else "raise",
            }
            try:
                if crash is not None and crash[2] == "abandon":
                    drive.enter_only(journal, "job", loop, **options)
                    done = False  # never exited: the run is still running
                else:
                    ran = drive.run(journal, "job", loop, **options)
                    done = True
            except redrive.SideEffectRetryBlockedError as blocked:
                index = next(i for i in range(len(steps)) if step_name(world, i) == blocked.tool)  # type: ignore[attr-defined]
                assert steps[index][1:] == ("unsafe", "no"), f"blocked {steps[index]}"
                assert index not in world.called, "a blocked step ran its body"
                tell, done = True, False
                event("blocked: an unsafe step in flight")
            except (DriveCrash, SystemExit, Interrupted):
                assert world.fired, "a crash nobody planned"
                done = False
                event(f"crashed {crash[2]} at {crash[1]}")  # type: ignore[index]
            again = world.called & finished
            assert not again, f"execution {execution} called finished steps {sorted(again)}"
            if done:
                got = list(ran.value)
                skipped = [i for i in _must_call(steps, got) if i not in finished | world.called]
                assert not skipped, f"unfinished steps {skipped} were never called"
                return got
            finished |= world.received
            if crash is not None and world.fired and crash[1] == "after_outcome":
                finished.add(crash[0])
        raise AssertionError("the run never finished")
    finally:
        set_boundary_hook(None)


def _must_call(steps: list[tuple[str, ...]], got: list[Any]) -> list[int]:
    """The steps whose outcome can only come from calling them: every model step, and every
    tool step without recover() that was not answered with a not-safely-resumable outcome."""
    return [
        i
        for i, step in enumerate(steps)
        if step[0] == "model" or (step[0] == "tool" and step[2] == "no" and not _told(got[i]))
    ]


def _told(value: Any) -> bool:
    return isinstance(value, dict) and value.get("status") == "not_safely_resumable"


def check_program(drive: Drive, journal: Any, program: dict[str, Any], policy: str) -> None:
    """Run ``program`` to its end through crashes, then check the properties."""
    world = World(program)
    live = drive_to_the_end(drive, journal, world, policy)
    steps = program["steps"]
    for index, step in enumerate(steps):
        runs = sum(1 for i, _ in world.effects if i == index)
        if step[:2] == ("tool", "unsafe"):
            assert runs <= 1, f"unsafe step {index} ran {runs} times"
        if step[0] == "tool" and not _told(live[index]):
            assert live[index] == program["results"][index]
    effects, model_calls = len(world.effects), len(world.model_calls)
    world.execution(None)
    replayed = drive.run(journal, "job", build(drive, world), replay=policy, live=False).value
    assert (len(world.effects), len(world.model_calls)) == (effects, model_calls)
    assert [type(v) for v in replayed] == [type(v) for v in live]
    assert [repr(v) for v in replayed] == [repr(v) for v in live]
    assert json.dumps(replayed, default=repr) == json.dumps(live, default=repr)
    assert replayed == live


@given(
    program=loop_programs(),
    policy=st.sampled_from(("strict", "lenient")),
    face=st.sampled_from(("sync", "async")),
)
@example(  # a safe tool's retryable error ended an execution; the resume re-ran it
    program={
        "steps": [("tool", "safe", "no")],
        "results": [1],
        "crashes": [(0, "in_body", "resumable")],
    },
    policy="strict",
    face="sync",
)
@example(  # an unsafe tool's body ran, then a SIGKILL: blocked, then told to the model
    program={
        "steps": [("model",), ("tool", "unsafe", "no"), ("value", "now")],
        "results": [1, 2, 3],
        "crashes": [(1, "after_effect", "abandon")],
    },
    policy="lenient",
    face="async",
)
@example(  # the same, then a resumable stop after the re-run: the resume reads its own journal
    program={
        "steps": [("tool", "safe", "no"), ("value", "now")],
        "results": [1, 2],
        "crashes": [(0, "in_body", "resumable"), (1, "before", "resumable")],
    },
    policy="strict",
    face="async",
)
@example(  # a told outcome, then a resume: the steps after it must replay, not run again
    program={
        "steps": [("tool", "unsafe", "no"), ("model",), ("tool", "safe", "no"), ("value", "now")],
        "results": [1, 2, 3, 4],
        "crashes": [
            (0, "after_effect", "abandon"),
            (0, "before", "exit"),
            (3, "before", "resumable"),
        ],
    },
    policy="lenient",
    face="sync",
)
def test_engine_on_the_memory_journal(program: dict[str, Any], policy: str, face: str) -> None:
    """Crash-resume of random programs keeps bodies at most once and replay exact (memory).

    Tools and models answer JSON-shaped data here, so that a fidelity bug (next test)
    does not hide a resume bug.
    """
    check_program(Drive(face), MemoryJournal(), program, policy)  # type: ignore[arg-type]


@given(
    program=loop_programs(results=values, max_crashes=0),
    face=st.sampled_from(("sync", "async")),
)
@example(  # a tool answering a datetime, a model answering an int below int64
    program={
        "steps": [("tool", "read_only", "no"), ("model",)],
        "results": [dt.datetime(2000, 1, 1, tzinfo=dt.UTC), -(2**63) - 1],
        "crashes": [],
    },
    face="sync",
)
def test_engine_hands_the_same_values_live_and_replayed(program: dict[str, Any], face: str) -> None:
    """Whatever plain value a tool or model answers (datetimes, bytes, UUIDs, big ints...),
    the loop gets the same value, type and repr live and on replay (invariant 9)."""
    check_program(Drive(face), MemoryJournal(), program, "strict")  # type: ignore[arg-type]


@settings(max_examples=5)
@given(
    program=loop_programs(max_steps=4),
    policy=st.sampled_from(("strict", "lenient")),
    face=st.sampled_from(("sync", "async")),
)
@example(  # an unsafe tool claimed, then a SIGKILL: blocked, then told to the model
    program={
        "steps": [("model",), ("tool", "unsafe", "no")],
        "results": [None, None],
        "crashes": [(1, "before", "abandon")],
    },
    policy="strict",
    face="sync",
)
def test_engine_on_duckdb(program: dict[str, Any], policy: str, face: str) -> None:
    """The same properties on the default DuckDB journal (a few examples: it is slower)."""
    with tempfile.TemporaryDirectory() as tmp:
        journal = redrive.open_journal(os.path.join(tmp, "runs.duckdb"))
        try:
            check_program(Drive(face), journal, program, policy)  # type: ignore[arg-type]
        finally:
            journal.close()


@pytest.fixture
def environ() -> Iterator[dict[str, str]]:
    """A fake environment for the profile choice."""
    yield {}


def test_hypothesis_profiles_are_registered_and_chosen(environ: dict[str, str]) -> None:
    """default / ci / thorough exist; HYPOTHESIS_PROFILE wins, CI=true picks ci (reproducible)."""
    assert set(PROFILES) == {"default", "ci", "thorough"}
    assert PROFILES["ci"].derandomize and PROFILES["ci"].deadline is None
    assert PROFILES["ci"].max_examples > PROFILES["default"].max_examples
    assert PROFILES["thorough"].max_examples > PROFILES["ci"].max_examples
    assert hypothesis_profile(environ) == "default"
    environ["CI"] = "true"
    assert hypothesis_profile(environ) == "ci"
    environ["HYPOTHESIS_PROFILE"] = "thorough"
    assert hypothesis_profile(environ) == "thorough"
    environ["HYPOTHESIS_PROFILE"] = "nope"
    with pytest.raises(ValueError, match="HYPOTHESIS_PROFILE"):
        hypothesis_profile(environ)
