"""Issue 23 items 1, 3 and 6 as kinds: Hypothesis properties over programs, code changes and
policies (CONTRACT C2-C6); randomized at 10x and more in the ``thorough`` profile.

The numbered failures themselves are tests in tests/unit/test_policy_kinds.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redrive
from redrive import NextStepAction
from redrive.replay import ReplayPolicy
from redrive.storage import MemoryJournal
from tests.conftest import Drive, Loop

CONTINUE = ReplayPolicy(on_drift="continue_live")

# -- the kinds, as properties -------------------------------------------------------------

#: tool names: "se_*" are side-effecting (restart_safe=False), "ro_*" read-only
_TOOLS = ("se_a", "se_b", "ro_c", "ro_d")
_POLICIES = {
    "strict": ReplayPolicy(),
    "continue_live": CONTINUE,
    "lenient": ReplayPolicy.of("lenient"),
    "model-lenient": ReplayPolicy(model="lenient", tool="strict"),
    "tool-lenient": ReplayPolicy(tool="lenient"),
    "warn-continue": ReplayPolicy(model="warn", tool="warn", on_drift="continue_live"),
}


class Program:
    """A loop of (model step, tool call) pairs the test can change, and its side-effect log.

    ``calls[i]`` is the tool and argument of the i-th call (arguments are unique, so a
    side-effecting (tool, argument) seen twice in :attr:`ledger` is one operation run
    twice); ``prompts[i]`` is the system prompt of the model step before it. The ledger
    holds ``(tool, argument, side-effecting (tool, argument) pairs the loop had replayed
    or run before)`` for every body that ran.
    """

    def __init__(self, drive: Drive, calls: list[tuple[str, int]]) -> None:
        self.calls = list(calls)
        self.recorded = list(calls)  # the code the run was recorded with
        self.prompts = ["p"] * len(calls)
        self.ledger: list[tuple[str, int, frozenset[tuple[str, int]]]] = []
        self.asked: set[tuple[str, int]] = set()

        @drive.model
        def ask(system: str, n: int) -> str:
            return f"{system}:{n}"

        def make(name: str) -> Any:
            def body(arg: int) -> int:
                self.ledger.append((name, arg, frozenset(self.asked)))
                return arg

            return drive.tool(name=name, read_only=name.startswith("ro_"), restart_safe=False)(body)

        self.ask = ask
        self.tools = {name: make(name) for name in _TOOLS}

    def loop(self, run: redrive.Run) -> Loop:
        self.asked = set()
        for n, (name, arg) in enumerate(self.calls):
            yield self.ask(system=self.prompts[n], n=n)
            yield self.tools[name](arg)
            if name.startswith("se_"):
                self.asked.add((name, arg))
        return run.finish(len(self.calls))

    def side_effects(self) -> list[tuple[str, int]]:
        """The side-effecting bodies that ran, as (tool, argument)."""
        return [(name, arg) for name, arg, _ in self.ledger if name.startswith("se_")]

    def change(self, how: str, at: int, other: str) -> None:
        """Change the code: insert, drop, rename a call, change its argument or its prompt."""
        at = min(at, len(self.calls) - 1)
        name, arg = self.calls[at]
        if how == "insert":
            self.calls.insert(at, (other, 100 + at))
            self.prompts.insert(at, "p")
        elif how == "drop":
            if len(self.calls) > 1:
                del self.calls[at], self.prompts[at]
        elif how == "rename":
            if other == name:
                other = _TOOLS[(_TOOLS.index(name) + 1) % len(_TOOLS)]
            self.calls[at] = (other, arg)
        elif how == "args":
            self.calls[at] = (name, arg + 50)
        elif how == "prompt":
            self.prompts[at] = "p2"
        else:  # the model is re-asked and the call it leads to changes (item 1)
            self.prompts[at], self.calls[at] = "p2", (name, arg + 50)


def _check(program: Program, recorded: list[tuple[str, int]], since: int) -> None:
    """C4 over the ledger entries from ``since`` on: no recorded side effect runs again,
    and no new side effect runs before every recorded one was replayed."""
    new = program.ledger[since:]
    again = [(n, a) for n, a, _ in new if (n, a) in recorded]
    assert not again, f"a finished side effect ran again: {again}"
    for name, arg, asked in new:
        if name.startswith("se_"):
            waiting = set(recorded) - asked
            assert not waiting, f"{name}({arg}) ran while {sorted(waiting)} waited"


def _take(
    drive: Drive, journal: Any, program: Program, step: redrive.NextStep, policy: ReplayPolicy
) -> None:
    """Take one next step an error proposed (a fork, a policy, a resume on recorded code)."""
    with contextlib.suppress(redrive.ReplayError):
        if step.action == NextStepAction.FORK:
            redrive.fork(journal, "r", step.params["before"], f"fork-{step.params['before']}")
            drive.run(journal, f"fork-{step.params['before']}", program.loop, replay=policy)
        elif step.action == NextStepAction.POLICY:
            options = step.params["options"]
            drive.run(journal, "r", program.loop, replay=ReplayPolicy(**options["replay"]))
        elif step.action == NextStepAction.RESUME and step.params == {"code": "recorded"}:
            program.calls, program.prompts = list(program.recorded), ["p"] * len(program.recorded)
            drive.run(journal, "r", program.loop, replay=policy)


_calls = st.lists(st.sampled_from(_TOOLS), min_size=1, max_size=4).map(
    lambda names: [(name, n) for n, name in enumerate(names)]
)


@given(
    face=st.sampled_from(["sync", "async"]),
    duck=st.booleans(),
    calls=_calls,
    crash_at=st.integers(min_value=1, max_value=4),
    how=st.sampled_from(["insert", "drop", "rename", "args", "prompt", "reasked"]),
    at=st.integers(min_value=0, max_value=3),
    other=st.sampled_from(_TOOLS),
    policy=st.sampled_from(sorted(_POLICIES)),
    pick=st.integers(min_value=0, max_value=3),
)
@settings(deadline=None)
def test_property_no_policy_runs_a_finished_side_effect_again(
    face: str,
    duck: bool,
    calls: list[tuple[str, int]],
    crash_at: int,
    how: str,
    at: int,
    other: str,
    policy: str,
    pick: int,
) -> None:
    """Kind of items 1 and 3 (C2, C4, C5, C6): a run cut after a tool step, resumed on
    changed code (a call inserted, dropped, renamed, with other arguments, a prompt
    changed, a re-asked model leading to another call) under any policy, on either face:
    no side-effecting body runs twice, none runs while a recorded one waits unreplayed,
    and every next step its error proposes (a fork, a policy) keeps both when taken."""
    drive = Drive(face)  # type: ignore[arg-type]
    journal = redrive.open_journal(":memory:") if duck else MemoryJournal()
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore", redrive.ReplayDriftWarning)  # model="warn" replays
        patch.setattr("redrive.replay._state._SIBLING_WAIT", 0.01)
        program = Program(drive, calls)
        crash_at = min(crash_at, len(calls))
        drive.crash(
            journal,
            "r",
            "tool_recorded",
            calls[crash_at - 1][0],
            program.loop,
            occurrence=sum(1 for n, _ in calls[:crash_at] if n == calls[crash_at - 1][0]),
        )
        recorded = program.side_effects()
        assert len(recorded) == len(set(recorded))
        program.change(how, at, other)
        chosen = _POLICIES[policy]
        since = len(program.ledger)
        try:
            drive.run(journal, "r", program.loop, replay=chosen)
        except redrive.DivergenceError as exc:
            _check(program, recorded, since)
            steps = exc.next_steps
            assert steps, "a divergence proposes next steps"
            if recorded:
                forks = [s for s in steps if s.action == NextStepAction.FORK]
                for fork in forks:  # a fork never drops a recorded side effect
                    assert fork.params["before"] > max(
                        s.seq for s in _recorded_side_effects(journal)
                    )
            # the steps are alternatives: take one of those a program can take
            takeable = [s for s in steps if s.action != NextStepAction.PERSON]
            if takeable:
                before = len(program.ledger)
                _take(drive, journal, program, takeable[pick % len(takeable)], chosen)
                _check(program, recorded, before)
        except redrive.ReplayError:
            pass
        _check(program, recorded, since)
        assert len(program.side_effects()) == len(set(program.side_effects()))
    journal.close()


def _recorded_side_effects(journal: Any) -> list[Any]:
    from redrive.replay._steps import iter_steps

    steps = iter_steps(journal.frames("r"), "r", verify=False)
    return [s for s in steps if s.kind == "tool" and s.name.startswith("se_")]


class Recorder:
    """A loop that opens model steps through the recorder handles, as an SDK client does.

    ``program`` is a list of ``"m"`` (a model step: ``begin_model`` then ``record``, or
    their async forms) and ``"t"`` (a side-effecting tool) steps; ``prompts[i]`` is the
    i-th model step's prompt. The run stops (resumably) after ``stop`` steps.
    """

    def __init__(self, program: list[str]) -> None:
        self.program = program
        self.prompts = ["p"] * len(program)
        self.ledger: list[int] = []

        @redrive.tool(restart_safe=False)
        def act(n: int) -> int:
            self.ledger.append(n)
            return n

        @redrive.tool(restart_safe=False, name="act")
        async def aact(n: int) -> int:
            self.ledger.append(n)
            return n

        self.act, self.aact = act, aact

    def sync(self, journal: Any, stop: int, **options: Any) -> str:
        with redrive.run(journal, "h", **options) as run:
            for n, kind in enumerate(self.program):
                if n == stop:
                    raise ConnectionError("cut off")
                if kind == "m":
                    step = run.begin_model("model:x", {"prompt": self.prompts[n], "n": n})
                    if not step.recorded:
                        step.record({"answer": n})
                else:
                    self.act(n)
            run.finish("done")
        return run.status

    async def _async(self, journal: Any, stop: int, **options: Any) -> str:
        async with redrive.run(journal, "h", **options) as run:
            for n, kind in enumerate(self.program):
                if n == stop:
                    raise ConnectionError("cut off")
                if kind == "m":
                    step = await run.abegin_model("model:x", {"prompt": self.prompts[n], "n": n})
                    if not step.recorded:
                        await step.arecord({"answer": n})
                else:
                    await self.aact(n)
            run.finish("done")
        return run.status

    def face(self, face: str, journal: Any, stop: int, **options: Any) -> str:
        """Run the loop on ``face``; the outcome's name (a status or an error class)."""
        try:
            if face == "sync":
                return self.sync(journal, stop, **options)
            return asyncio.run(self._async(journal, stop, **options))
        except (ConnectionError, redrive.ReplayError) as exc:
            return type(exc).__name__


def _positions(journal: Any) -> list[tuple[str, int, Any]]:
    frames = [f for f in journal.frames("h") if f.kind in ("model_request", "tool_start")]
    return [(f.kind, f.data()["turn"], f.data().get("issue")) for f in frames]


@given(
    program=st.lists(st.sampled_from(["m", "t"]), min_size=1, max_size=6),
    stop=st.integers(min_value=1, max_value=6),
    changed=st.integers(min_value=0, max_value=5),
    how=st.sampled_from(["policy", "env"]),
)
@settings(deadline=None)
def test_property_both_faces_record_and_continue_live_alike(
    program: list[str], stop: int, changed: int, how: str
) -> None:
    """Kind of item 6 (C3): the sync and the async face of the recorder handles record
    the same issue positions and turns, and a run cut off, its prompt edited, and
    resumed under on_drift="continue_live" (a ReplayPolicy or REDRIVE_ON_DRIFT) ends
    the same on both faces, every side effect run once."""
    outcomes = {}
    with pytest.MonkeyPatch.context() as patch:
        for face in ("sync", "async"):
            journal = MemoryJournal()
            loop = Recorder(program)
            first = loop.face(face, journal, stop % len(program))  # cut before the end
            recorded = _positions(journal)
            loop.prompts[min(changed, len(program) - 1)] = "p2"
            if how == "env":
                patch.setenv("REDRIVE_ON_DRIFT", "continue_live")
                options: dict[str, Any] = {}
            else:
                options = {"replay": CONTINUE}
            second = loop.face(face, journal, len(program), **options)
            patch.delenv("REDRIVE_ON_DRIFT", raising=False)
            assert len(loop.ledger) == len(set(loop.ledger)), loop.ledger
            outcomes[face] = (first, recorded, second, sorted(loop.ledger))
    assert outcomes["sync"] == outcomes["async"]
    assert outcomes["sync"][2] == "succeeded"
