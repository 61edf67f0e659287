"""A reference model of redrive's resume contract (issue 23; DESIGN invariants 1-18).

A pure simulation, no I/O and no redrive import: a run's *attempts* over an abstract
journal. Given a program (the calls a loop makes, in order, with parallel batches), a
replay policy, a crash point and the program of the next attempt (a code change), it says
which tool bodies run, which answer each caller gets (a recorded one, named by the caller
that recorded it, or a live one), which error is raised (and before which body) and
which status the run ends in. ``tests/unit/test_differential.py`` holds the library to it.

Rules implemented (CONTRACT = /work/wt/CONTRACT.md, "Cn"; DESIGN invariant numbers "In"):

* R1 (I1, I3) A live side-effecting body runs once: claim (``in_flight``), body, outcome
  (``done``). A finished step is replayed from its record and never runs again (I2, I3).
* R2 (I4, C5) A side-effecting step found ``in_flight`` is never re-run:
  ``on_in_flight="raise"`` -> SideEffectRetryBlockedError before the body, the run stays
  ``running``, advice RESOLVE then POLICY ``{"on_in_flight": "tell_model"}``;
  ``"tell_model"`` -> the caller gets a told outcome. A read-only step in flight re-runs
  (harmless). A model step is journaled with its answer: a cut before it leaves no record.
* R3 (C1) Match: same kind, name and key (arguments) at the caller's position. A tool
  parameter added since the record with its default, not passed, keeps the key.
* R4 (I11, C8) Callers are told apart by where they came from: each batch member is its
  own flow (batch ordinal, member index), so identical concurrent requests each get the
  answer recorded for their own flow, whatever the completion order.
* R5 (I5, C3) Drift at a position: strict -> DivergenceError before the call; warn ->
  (same name) the recorded answer replays with a warning; lenient -> a record of the same
  key elsewhere in the flow answers it, else the call goes live; on_drift="continue_live"
  -> a model step is re-asked live (sync and async faces alike).
* R6 (C2) A model step re-asked live takes the superseded recorded model step's place;
  the flow's later records still wait to be replayed.
* R7 (I15, C4) A side-effecting body never starts while a recorded side-effecting step
  of the same flow (done, in flight or failed) waits unreplayed, under every policy:
  DivergenceError before the body. A read-only tool or a side-effecting one where only
  model/value/read-only records wait goes live under a lenient tool rule or continue_live.
* R8 (C6) At the loop's end unreplayed records: strict/warn -> DivergenceError; a record
  whose kind has a lenient rule, or any model/value/read-only record under continue_live,
  is superseded; a side-effecting leftover always raises (advice: PERSON).
* R9 (C7) A body that raises a framework retry signal records an error marked
  ``retry_requested``; the next call of that tool with the same arguments is the same
  logical operation: its body runs again (one logical operation, two executions).
* R10 (C5, I17) Advice: a FORK only before a step with no finished or in-flight
  side-effecting step at or after it; otherwise PERSON first, then RESUME
  ``{"code": "recorded"}``.
* R11 (I12, I13) Status: success -> ``succeeded``; a crash, a blocked step or a
  divergence leave the run ``running`` (resumable); an approval with no decision
  -> ``suspended``. A finished run replays only: a step it never recorded is
  ReplayMissError.
* R12 (C10) what-changed/check agree with a strict resume: both see exactly the
  divergences :func:`attempt` reports under the strict policy.

Where the contract is ambiguous, the model chooses (and says so):

* A1 "Position" is per flow: the first unreplayed record of the caller's flow is the one
  "at the position" (C1, C2); the library's (parent seq, occurrence) positions reduce to
  this for the programs generated here (batches are spawned by the main flow only).
* A2 C2 says a step with no record at its position goes live only when none waits; C4 and
  C3 relax it: under a lenient rule for the call's kind, or continue_live, a model,
  value or read-only call with no match goes live while records wait (R7 still guards
  side effects). Under continue_live a *model* call facing a non-model record goes live
  too (continue_live re-asks model steps); only a model record is superseded by it.
* A3 continue_live does not cover value steps: a drifted value step follows the value
  rule (C3/C4 name model and read-only steps only); leftover value steps are superseded
  (C6 names them).
* A4 live_tools re-runs a matched tool's body by design (tests' own resources): those
  executions are counted apart, not as a second run of a logical operation.
* A6 A value step is written with the next durable write (a step's claim or answer, or
  the run's exit): values after the last model or tool record are lost to a kill and
  drawn again on resume (no side effect depended on them).
* A5 Approvals are value steps named ``approval``; with no decision the attempt ends
  ``suspended`` before anything else of the loop runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Literal

__all__ = [
    "Attempt",
    "Batch",
    "Call",
    "Crash",
    "Journal",
    "Policy",
    "Record",
    "Flow",
    "attempt",
    "callers",
    "fork_is_safe",
]

Kind = Literal["model", "effect", "read", "value", "approval"]
Rule = Literal["strict", "warn", "lenient"]
#: Boundaries a crash can hit, per step kind, in the order a step passes them.
TOOL_BOUNDARIES = ("tool_claimed", "tool_body_done", "tool_recorded")
MODEL_BOUNDARIES = ("model_before", "model_after", "model_recorded")


@dataclasses.dataclass(frozen=True)
class Call:
    """One call of the loop.

    Attributes:
        kind: model, effect (side-effecting tool), read (read-only tool), value, approval.
        name: the step's name (tool name, value label, approval name; "chat" for models).
        arg: the call's argument (the prompt of a model step).
        added_default: the tool now declares a parameter with a default that the call
            does not pass (C1: the key is unchanged).
        retry_signal: the body raises a retry signal on its first execution and the loop
            calls it again with the same arguments (C7).
    """

    kind: Kind
    name: str
    arg: str = ""
    added_default: bool = False
    retry_signal: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        """The match key (R3): kind class, name, arguments; ``added_default`` is not in it."""
        return (self.rule_kind, self.name, self.arg)

    @property
    def rule_kind(self) -> str:
        """The policy kind whose rule applies: model, tool or value."""
        return {"effect": "tool", "read": "tool", "approval": "value"}.get(self.kind, self.kind)


@dataclasses.dataclass(frozen=True)
class Batch:
    """Calls made at once, each from its own asyncio task or thread (R4)."""

    calls: tuple[Call, ...]
    via: Literal["tasks", "threads"] = "tasks"


Item = Call | Batch


@dataclasses.dataclass(frozen=True)
class Policy:
    """A replay policy and the run options the model needs."""

    tool: Rule = "strict"
    model: Rule = "strict"
    value: Rule = "strict"
    on_drift: Literal["raise", "continue_live"] = "raise"
    live_tools: bool = False
    on_in_flight: Literal["raise", "tell_model"] = "raise"

    def rule(self, call: Call) -> Rule:
        """The rule for ``call``'s kind."""
        rule: Rule = getattr(self, call.rule_kind)
        return rule

    def relaxed(self, call: Call) -> bool:
        """Whether a call with no matching record may go live while records wait (A2)."""
        if self.rule(call) == "lenient":
            return True
        return self.on_drift == "continue_live" and call.kind in ("model", "read", "effect")


@dataclasses.dataclass
class Record:
    """One recorded step of the abstract journal.

    Attributes:
        call: what was called.
        turn: the issuing flow's turn (model steps completed along its causal path).
        parent: the id (``origin``) of the last step the issuing flow completed, or None.
        occ: how many steps of the same name the run issued from ``parent`` before it.
        state: done, in_flight (claimed, no outcome), retry (a retry signal was recorded),
            superseded (re-asked or left over).
        origin: the caller (and attempt) whose live answer this record holds; its id.
    """

    call: Call
    turn: int
    parent: tuple[int, str] | None
    occ: int
    state: str
    origin: tuple[int, str]
    consumed: bool = False


@dataclasses.dataclass
class Journal:
    """The abstract journal of one run: its records in issue order, its status, decisions."""

    records: list[Record] = dataclasses.field(default_factory=list)
    status: str = "new"
    decided: set[str] = dataclasses.field(default_factory=set)
    attempts: int = 0

    def copy(self) -> Journal:
        """A copy whose records start unconsumed (calls are frozen)."""
        return Journal(
            [dataclasses.replace(r, consumed=r.state == "superseded") for r in self.records],
            self.status,
            set(self.decided),
            self.attempts,
        )


@dataclasses.dataclass(frozen=True)
class Crash:
    """Abandon the attempt at ``boundary`` of the (live) step of caller ``caller``."""

    caller: str
    boundary: str
    how: str = "kill"


@dataclasses.dataclass
class Attempt:
    """What one attempt does.

    Attributes:
        bodies: (name, arg) of every tool body started, in order (live_tools ones apart).
        rerun: bodies re-run by live_tools (A4).
        answers: caller -> ("recorded", origin) | ("live",) | ("told",) | ("retry",).
        error: None, "crash", "suspended", or an error class name.
        at: the caller the error was raised at (before its body), or "end" (R8).
        advice: the first next step the error must propose (R10), or "".
        status: the run's status afterwards.
        journal: the journal afterwards.
        warned: callers answered under ``warn`` with a drift warning.
    """

    bodies: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    rerun: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    answers: dict[str, tuple[object, ...]] = dataclasses.field(default_factory=dict)
    error: str | None = None
    at: str = ""
    advice: str = ""
    status: str = "running"
    journal: Journal = dataclasses.field(default_factory=Journal)
    warned: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Flow:
    """Where a flow stands: its turn, the last step it completed (``parent``, for the
    positions of its live steps) and the last recorded step it replayed or superseded
    (``point``: the records after it are this flow's, and wait, R6/R7)."""

    turn: int = 0
    parent: tuple[int, str] | None = None
    point: tuple[int, str] | None = None


class _Stop(Exception):
    """Ends the simulated attempt (an error, a crash or a suspension)."""

    def __init__(self, error: str, at: str, advice: str = "") -> None:
        super().__init__(error)
        self.error, self.at, self.advice = error, at, advice


def callers(program: tuple[Item, ...]) -> Iterator[tuple[str, str, Call]]:
    """Each call of ``program`` with its caller id and flow ("m" or a batch member's)."""
    main, batch = 0, 0
    for item in program:
        if isinstance(item, Call):
            yield f"m{main}", "m", item
            main += 1
        else:
            for j, call in enumerate(item.calls):
                yield f"b{batch}.{j}", f"b{batch}.{j}", call
            batch += 1


def fork_is_safe(records: list[Record], before: int) -> bool:
    """R10: a fork keeping the first ``before`` records re-runs no finished side effect."""
    return not any(
        r.call.kind == "effect" and r.state in ("done", "in_flight", "retry")
        for r in records[before:]
    )


class _Sim:
    """One attempt in progress."""

    def __init__(self, j: Journal, policy: Policy, crash: Crash | None, replay_only: bool):
        self.j, self.policy, self.crash, self.replay_only = j, policy, crash, replay_only
        self.out = Attempt(journal=j)
        self.issued: dict[tuple[tuple[int, str] | None, str], int] = {}
        self.by_id = {r.origin: r for r in j.records}

    def run(self, program: tuple[Item, ...]) -> None:
        main = Flow()
        batch = 0
        count = 0
        for item in program:
            if isinstance(item, Call):
                self.call(main, f"m{count}", item)
                count += 1
                continue
            for k, call in enumerate(item.calls):  # issued in the order they are started
                self.call(dataclasses.replace(main), f"b{batch}.{k}", call)
            batch += 1

    def call(self, flow: Flow, caller: str, call: Call) -> None:
        self.step(flow, caller, call)
        if call.retry_signal:  # the loop calls again after the retry signal (R9)
            crash, self.crash = self.crash, None
            self.step(flow, caller + "'", call)
            self.crash = crash

    def waiting(self, flow: Flow) -> list[Record]:
        """Unreplayed records after the flow's point (R6, R7)."""
        return [r for r in self.j.records if not r.consumed and self.after(r, flow.point)]

    def after(self, rec: Record, point: tuple[int, str] | None) -> bool:
        parent = rec.parent
        while parent is not None and parent != point:
            up = self.by_id.get(parent)
            parent = up.parent if up is not None else None
        return parent == point

    def step(self, flow: Flow, caller: str, call: Call) -> None:
        name = call.name if call.kind != "approval" else "approval"
        occ = self.issued.get((flow.parent, name), 0)
        if call.kind not in ("value", "approval"):
            self.issued[(flow.parent, name)] = occ + 1
        open_ = [r for r in self.j.records if not r.consumed]
        same = [r for r in open_ if r.call.key == call.key]
        here = [r for r in same if r.turn == flow.turn]
        mine = [r for r in here if (r.parent, r.occ) == (flow.parent, occ)]
        rule = self.policy.rule(call)
        found = (mine or here or (same if rule == "lenient" else []) or [None])[0]
        if found is not None:
            return self.replay(flow, caller, found, call, occ)
        waiting = self.waiting(flow)
        if not waiting:
            if self.replay_only:
                raise _Stop("ReplayMissError", caller)
            return self.live(flow, caller, call, occ)
        drifted = next(
            (
                r
                for r in waiting
                if r.turn == flow.turn
                and r.call.rule_kind == call.rule_kind
                and r.call.name == call.name
            ),
            None,
        )
        if rule == "warn" and drifted is not None:
            self.out.warned.append(caller)
            return self.replay(flow, caller, drifted, call, occ)
        advice = self.advice()
        if call.kind == "effect" and any(r.call.kind == "effect" for r in waiting):
            raise _Stop("DivergenceError", caller, advice)  # R7
        if not self.policy.relaxed(call):
            raise _Stop("DivergenceError", caller, advice)  # R5
        if self.replay_only:
            raise _Stop("ReplayMissError", caller)
        if call.kind == "model" and drifted is not None and drifted.call.kind == "model":
            drifted.consumed, drifted.state = True, "superseded"  # R6: takes its place
            self.live(flow, caller, call, occ)
            flow.point = flow.parent = drifted.origin
            return None
        return self.live(flow, caller, call, occ)

    def advice(self) -> str:
        """R10: the first next step of a DivergenceError."""
        first = next((i for i, r in enumerate(self.j.records) if not r.consumed), None)
        if first is None:
            return "fork"
        return "fork" if fork_is_safe(self.j.records, first) else "person"

    def replay(self, flow: Flow, caller: str, rec: Record, call: Call, occ: int) -> None:
        rec.consumed = True
        if rec.state == "in_flight" and call.kind == "read":
            rec.state = "superseded"  # run again live in its place (R2)
            self.live(flow, caller, call, occ)
            flow.point = flow.parent = rec.origin
            return None
        if rec.state == "in_flight" and call.kind == "effect":
            if self.policy.on_in_flight == "raise":
                raise _Stop("SideEffectRetryBlockedError", caller, "resolve")  # R2
            rec.state = "done"
            self.out.answers[caller] = ("told",)
        elif rec.state == "retry":
            self.out.answers[caller] = ("retry",)
        else:
            if call.kind in ("effect", "read") and self.policy.live_tools:
                self.out.rerun.append((call.name, call.arg))  # A4
            self.out.answers[caller] = ("recorded", rec.origin)
        if call.kind not in ("value", "approval"):
            flow.parent = flow.point = rec.origin
        if call.kind == "model":
            flow.turn = rec.turn + 1
        return None

    def live(self, flow: Flow, caller: str, call: Call, occ: int) -> None:
        origin = (self.j.attempts, caller)
        boundary = self.crash.boundary if self.crash and self.crash.caller == caller else None
        rec = Record(call, flow.turn, flow.parent, occ, "in_flight", origin, consumed=True)
        if call.kind == "approval" and call.name not in self.j.decided:
            raise _Stop("suspended", caller)
        if call.kind in ("value", "approval"):
            rec.state = "done"
            self.add(rec)
            self.out.answers[caller] = ("live",)
            return None
        if call.kind == "model":
            if boundary in ("model_before", "model_after"):
                raise _Stop("crash", caller)  # a model step's frames come with its answer
            rec.state = "done"
            self.add(rec)
            self.out.answers[caller] = ("live",)
            flow.turn, flow.parent = flow.turn + 1, origin
            if boundary == "model_recorded":
                raise _Stop("crash", caller)
            return None
        self.add(rec)  # the claim is durable before the body (I1)
        if boundary == "tool_claimed":
            raise _Stop("crash", caller)
        retried = any(
            r.call.key == call.key and r.state == "retry" and r.parent == rec.parent
            for r in self.j.records
            if r is not rec
        ) or any(r.call.key == call.key and r.state == "retry" for r in self.j.records)
        self.out.bodies.append((call.name, call.arg))
        flow.parent = origin
        if call.retry_signal and not retried:
            rec.state = "retry"  # R9: the body asked to be called again
            self.out.answers[caller] = ("retry",)
            return None
        if boundary == "tool_body_done":
            raise _Stop("crash", caller)
        rec.state = "done"
        self.out.answers[caller] = ("live",)
        if boundary == "tool_recorded":
            raise _Stop("crash", caller)
        return None

    def add(self, rec: Record) -> None:
        self.j.records.append(rec)
        self.by_id[rec.origin] = rec

    def leftovers(self) -> None:
        """R8: what the loop never asked for at its end."""
        for rec in self.j.records:
            if rec.consumed:
                continue
            if rec.call.kind == "effect":
                raise _Stop("DivergenceError", "end", "person")
            relaxed = self.policy.rule(rec.call) == "lenient"
            if not (relaxed or self.policy.on_drift == "continue_live"):
                raise _Stop("DivergenceError", "end", self.advice())
            rec.state = "superseded"


def attempt(
    program: tuple[Item, ...],
    journal: Journal,
    policy: Policy,
    crash: Crash | None = None,
    *,
    replay_only: bool = False,
) -> Attempt:
    """Simulate one attempt of ``program`` over ``journal`` (not modified; see ``.journal``).

    ``replay_only`` (``live=False``, what-changed's and check's dry replay): a step that
    would go live raises ReplayMissError instead; so does any step of a finished run.

    Returns:
        The :class:`Attempt`.
    """
    j = journal.copy()
    j.attempts += 1
    sim = _Sim(j, policy, crash, replay_only or j.status == "succeeded")
    try:
        sim.run(program)
        sim.leftovers()
    except _Stop as stop:
        out = sim.out
        if stop.error == "crash" and crash is not None and crash.how == "kill":
            while j.records and j.records[-1].call.kind in ("value", "approval"):
                j.records.pop()  # written with the next durable write, which never came (A6)
        out.error, out.at, out.advice = stop.error, stop.at, stop.advice
        if stop.error == "suspended":
            j.status = "suspended"
        elif j.status != "succeeded":
            j.status = "running"
        out.status = j.status
        return out
    j.status = sim.out.status = "succeeded"
    return sim.out
