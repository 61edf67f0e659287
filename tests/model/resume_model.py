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
* R3 (C1, I5) Match. A step is answered by an unreplayed record of the same kind, name
  and key (arguments) in the caller's *turn* (the model steps completed along its causal
  path); among several, the one at the caller's issue position (parent = the last step
  the flow completed, occ = how many steps of that name the run issued from that parent
  before). Tool steps of one turn may come in any order; a model step follows the steps
  recorded before it (all of its recorded ancestors replayed first). A tool parameter
  added since the record with its default, not passed, keeps the key.
* R4 (I11, C8) Callers are told apart by where they came from: batch members start from
  their starter's position and take occurrences in the order they are started, so
  identical concurrent requests each get their own recorded answer.
* R5 (I5, C3) Drift (no match; the record at the caller's position has its name, other
  arguments): strict -> DivergenceError before the call; warn -> the recorded answer
  replays (with a warning), except a side-effecting tool's, which never answers another
  call (DivergenceError: the drifted call may be a new side effect); a record at the
  caller's position with the caller's very arguments did not drift: it stopped matching
  only because steps recorded before it were not replayed (R3's order), which warn
  treats as strict does (ReplayPolicy: warn relaxes drifted arguments only); lenient -> a record
  with the same key in any turn answers it, else the call goes live;
  on_drift="continue_live" -> a model step is re-asked live (sync and async faces alike).
* R6 (C2) A model step re-asked live takes the superseded recorded model step's place:
  the flow stands where that record stood, so the records after it still wait to be
  replayed (or diverge).
* R7 (I15, C4) A call with no match goes live only when none of its flow's records wait
  (the unreplayed records descending from where the flow started). Where some wait: a
  side-effecting body never starts while a recorded side-effecting step waits (done,
  in flight or retried), under every policy: DivergenceError before the body; otherwise
  a lenient rule for the call's kind or continue_live lets it go live (A2), strict and
  warn raise DivergenceError.
* R8 (C6) At the loop's end unreplayed records: strict/warn -> DivergenceError; a record
  whose kind has a lenient rule, or any model/value/read-only record under continue_live,
  is superseded; a side-effecting leftover always raises (advice: PERSON).
* R9 (C7) A body that raises a framework retry signal records an error marked
  ``retry_requested``; the next call of that tool with the same arguments is the same
  logical operation: its body runs again (one logical operation, two executions).
  Replayed, the signal is raised again (I9): a loop that does not catch it where the
  record's caller did (code changed) ends with it (error ``RetrySignal``, the run
  ``failed``).
* R10 (C5, I17) Advice: a FORK only before a step with no finished or in-flight
  side-effecting step at or after it; otherwise PERSON first, then RESUME
  ``{"code": "recorded"}``. A blocked step: RESOLVE first.
* R11 (I12, I13) Status: success -> ``succeeded``; a kill, a blocked step or a
  divergence leave the run ``running`` (resumable), an error the run was told is
  retryable ``paused`` (resumable, issue 25); an approval with no decision
  -> ``suspended``. A finished run replays only: a step it never recorded is
  ReplayMissError.
* R12 (C10) what-changed and check call a run unreplayable exactly where the strict
  replay-only attempt (``attempt(..., replay_only=True)``) stops: a divergence, or for a
  finished run any step it cannot answer.

Where the contract is ambiguous, the model chooses (and says so):

* A1 "A flow's recorded steps" (C2, C4): the unreplayed records descending (by parent
  links) from where the flow started; a batch member counts as started where its starter
  started (it may not go live past records its starter still waits for). "At the same
  issue position" (C1) is relaxed to "in the same turn" for distinct requests, as
  ``ReplayPolicy`` documents for strict (the steps of one turn may arrive in any order);
  the position decides between identical ones. A position is (parent, spawn, occ): a
  batch member's spawn is its index in the batch (C8: "told apart by the flow that
  started them"), so a main-flow call and the first member of a batch started from the
  same point never share one; among identical requests, a record of a flow the caller
  starts (``started_by``) is never the caller's, so a call moved before the batch finds
  no record of its own and diverges under strict (rule "C1-order").
* A2 C2 says a step with no record at its position goes live only when none waits; C3 and
  C4 relax it: under a lenient rule for the call's kind, or continue_live, a model or
  read-only call (or a side effect, where no side effect waits) with no match goes live
  while records wait. Under continue_live only a *model* record at the caller's position
  is superseded by the re-ask; an inserted model step goes live beside the records
  (not past a tool record of its turn that waits, A12).
* A3 continue_live does not cover value steps: a drifted value step follows the value
  rule (C3/C4 name model and read-only steps only); leftover value steps are superseded
  (C6 names them).
* A4 live_tools re-runs a matched tool's body by design (tests' own resources): those
  executions are counted apart, not as a second run of a logical operation.
* A5 Approvals are value steps named ``approval``; with no decision the attempt ends
  ``suspended`` before anything else of the loop runs. A decision belongs to the run it
  was made for (the request a person saw, its payload and the steps before it): a fork
  (R10's advice) keeps the approvals recorded before its cut and asks again for any
  after it (the fork's ``decided`` is its kept approval records), as the library does.
* A6 A value step is written with the next durable write (a step's claim or answer, or
  the run's exit): values after the last model or tool record are lost to a kill and
  drawn again on resume (no side effect depended on them).
* A8 Value steps (clock, uuid, approvals) have no issue position and no turn: they are
  matched by key in their own order; in a live run a value record that waits keeps only
  value steps from going live (a model or tool call goes live beside it: a value has no
  side effect); a value never asked is a leftover (R8). A replay-only run (finished, or
  ``live=False``) treats any waiting record as waiting. Warn replays a drifted record
  only if it has an outcome (not one in flight) and the call is not one already
  replayed (the code making a recorded call again is not a drift). The differential
  test never moves, adds, drops or renames a value step: where a value waits is not
  settled by the contract (the library matches values in record order, apart from
  the issue positions of model and tool steps).
* A9 Changed code replayed over a *finished* run (replay only): the contract says it
  makes no call (I2) and stops if it cannot be answered (R11); whether the stop is a
  DivergenceError or a ReplayMissError, and at which step, is the library's choice: the
  test compares only that it stops, that no body runs, and what each answered caller got.
* A10 ``live_tools`` re-runs a replayed tool's body and holds its outcome to the record
  (A4); a recorded retry signal (R9) is replayed as recorded, its body not re-run here,
  while the library re-runs it and compares. The test world raises a name's retry signal
  at its first execution only, so a re-run never repeats it: the differential test does
  not draw ``live_tools`` for programs with a retry signal (which reading is right for a
  tool whose retry signal depends on the outside world is open).
* A11 A step in flight a person resolved as not done (``redrive resolve --not-done``)
  stays in the record, at its position: the call that matches it runs its body live in
  its place (as a read-only step in flight does, R2), with its idempotency key; it
  waits (R7) and counts as a recorded side effect (R10) until then.
* A12 continue_live re-asks (or inserts) a model step live only while no tool step of
  the caller's turn waits unasked, as ``ReplayPolicy`` documents (a loop that skips a
  recorded tool step, a side effect it would not see, never continues): a model call
  asked where a tool record of its turn still waits diverges (DivergenceError before
  the call), finished read-only or in flight; a lenient model rule is not bound by it.
  (Found at the thorough profile: [lookup b, chat p] cut before chat p, reordered.)
* A7 C4 says DivergenceError; where the waiting side effect is a call of the *same tool*
  still in flight and the tool rule is lenient, the model expects
  SideEffectRetryBlockedError (as R2: its outcome must be settled first; both stop
  before the body, and the blocked error's RESOLVE advice is the one that helps).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from tests.model.terms import (
    MODEL_BOUNDARIES,
    TOOL_BOUNDARIES,
    Attempt,
    Batch,
    Call,
    Crash,
    Flow,
    Item,
    Journal,
    Policy,
    Record,
)

__all__ = [
    "MODEL_BOUNDARIES",
    "TOOL_BOUNDARIES",
    "Item",
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


def started_by(rec: Record, flow: Flow) -> bool:
    """R4: ``rec`` was recorded by a flow ``flow`` starts (a batch member, at its point):
    among identical requests, never ``flow``'s own."""
    deeper = len(rec.spawn) > len(flow.spawn) and rec.spawn[: len(flow.spawn)] == flow.spawn
    return rec.parent == flow.parent and deeper


def fork_is_safe(records: list[Record], before: int) -> bool:
    """R10: a fork keeping the first ``before`` records re-runs no finished side effect."""
    return not any(
        r.call.kind == "effect" and r.state in ("done", "in_flight", "retry", "not_done")
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
                self.call(dataclasses.replace(main, spawn=(k,)), f"b{batch}.{k}", call)
            batch += 1

    def call(self, flow: Flow, caller: str, call: Call) -> None:
        self.step(flow, caller, call)
        if not call.retry_signal and self.out.answers.get(caller) == ("retry",):
            del self.out.answers[caller]  # R9: replayed, raised out of the loop
            raise _Stop("RetrySignal", caller)
        if call.retry_signal and self.out.answers.get(caller) == ("retry",):
            # the loop calls again after the retry signal (R9), only when it got one
            crash, self.crash = self.crash, None
            self.step(flow, caller + "'", call)
            self.crash = crash

    def waiting(self, flow: Flow, call: Call) -> list[Record]:
        """Unreplayed records after the flow's start (R7); value records keep only value
        steps from going live (A8)."""
        return [
            r
            for r in self.j.records
            if not r.consumed
            and self.after(r, flow.start)
            and (self.replay_only or call.rule_kind == "value" or r.call.rule_kind != "value")
        ]

    def follows(self, rec: Record) -> bool:
        """A model record answers only once the steps before it in its flow replayed."""
        parent = rec.parent
        while parent is not None:
            up = self.by_id.get(parent)
            if up is None:
                return True
            if not up.consumed:
                return False
            parent = up.parent
        return True

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
        same = [
            r for r in open_ if r.call.key == call.key and (call.kind != "model" or self.follows(r))
        ]
        if sum(r.call.key == call.key for r in self.j.records) > 1:
            same = [r for r in same if not started_by(r, flow)]  # identical: R4
        here = [r for r in same if r.turn == flow.turn or call.rule_kind == "value"]
        mine = [
            r
            for r in here
            if (r.parent, r.spawn, r.occ) == (flow.parent, flow.spawn, occ)
            and call.rule_kind != "value"
        ]  # values: in record order (A8)
        rule = self.policy.rule(call)
        cands = mine or here or (same if rule == "lenient" else [])
        found = cands[0] if cands else None
        if found is not None:
            return self.replay(flow, caller, found, call, occ)
        waiting = self.waiting(flow, call)
        if not waiting:
            if self.replay_only:
                raise _Stop("ReplayMissError", caller)
            return self.live(flow, caller, call, occ)
        drifted = next(  # the record at the caller's position, of its kind and name
            (
                r
                for r in waiting
                if (r.parent, r.spawn, r.occ) == (flow.parent, flow.spawn, occ)
                and r.call.rule_kind == call.rule_kind
                and r.call.name == call.name
            ),
            None,
        )
        again = any(r.consumed and r.call.key == call.key for r in self.j.records)
        if (
            rule == "warn"
            and drifted is not None
            and drifted.call.kind != "effect"
            and drifted.state != "in_flight"
            and drifted.call.key != call.key  # same request: out of order (R3), no drift
            and not again
        ):
            self.out.warned.append(caller)
            return self.replay(flow, caller, drifted, call, occ)
        advice = self.advice()
        unsettled = [r for r in waiting if r.call.name == call.name and r.state == "in_flight"]
        if call.kind == "effect" and rule == "lenient" and unsettled:
            raise _Stop("SideEffectRetryBlockedError", caller, "resolve")  # A7
        if call.kind == "effect" and any(r.call.kind == "effect" for r in waiting):
            raise _Stop("DivergenceError", caller, advice)  # R7
        if not self.policy.relaxed(call):
            raise _Stop("DivergenceError", caller, advice)  # R5
        if (
            call.kind == "model"
            and self.policy.rule(call) != "lenient"
            and any(r.call.kind in ("effect", "read") and r.turn == flow.turn for r in waiting)
        ):
            raise _Stop("DivergenceError", caller, advice)  # A12: no re-ask past a tool step
        if self.replay_only:
            raise _Stop("ReplayMissError", caller)
        if call.kind == "model" and drifted is not None and drifted.call.kind == "model":
            drifted.consumed, drifted.state = True, "superseded"  # R6: takes its place
            self.live(flow, caller, call, occ)
            flow.point = flow.parent = drifted.origin
            flow.spawn = ()
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
        if (rec.state == "in_flight" and call.kind == "read") or rec.state == "not_done":
            rec.state = "superseded"  # run again live in its place (R2, A11)
            self.live(flow, caller, call, occ)
            flow.point = flow.parent = rec.origin
            flow.spawn = ()
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
            flow.spawn = ()
        if call.kind == "model":
            flow.turn = rec.turn + 1
        return None

    def live(self, flow: Flow, caller: str, call: Call, occ: int) -> None:
        origin = (self.j.attempts, caller)
        boundary = self.crash.boundary if self.crash and self.crash.caller == caller else None
        rec = Record(
            call, flow.turn, flow.parent, occ, "in_flight", origin, consumed=True, spawn=flow.spawn
        )
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
            flow.turn, flow.parent, flow.spawn = flow.turn + 1, origin, ()
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
        flow.parent, flow.spawn = origin, ()
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
        elif stop.error == "RetrySignal" and j.status != "succeeded":
            j.status = "failed"  # the loop raised: the run ends failed (R9)
        elif j.status != "succeeded":
            # R11: an error the run was told is retryable that ends it pauses it (resumable,
            # kind retries_exhausted); a kill, a divergence or a blocked step leave it running
            retryable = stop.error == "crash" and crash is not None and crash.how == "retryable"
            j.status = "paused" if retryable else "running"
        out.status = j.status
        return out
    j.status = sim.out.status = "succeeded"
    return sim.out
