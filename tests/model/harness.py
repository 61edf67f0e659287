"""The differential test's harness (issue 23): the CONTRACT rules switched on, the
policies, and :class:`Check`, which runs one scenario through the real library
(``tests/model/driver.py``) and the reference model (``tests/model/resume_model.py``)
attempt by attempt and compares them (see ``tests/unit/test_differential.py``)."""

from __future__ import annotations

import collections
import os
import tempfile
import uuid
from typing import Any

import redrive
from redrive.replay import resolve_step
from tests.model import driver
from tests.model import resume_model as m

#: CONTRACT rules the library implements today. Flip one on when its fix lands.
#: The default holds the rules the differential test passes on (issue 23's fixes landed);
#: ``REDRIVE_CONTRACT_RULES=C1,...`` replaces it (to try one that is off). Each rule turned
#: on keeps the example that failed before its fix as an @example in
#: tests/unit/test_differential.py, now drawing the real case:
#:   C1-order: a step moved across a batch: [Batch(lookup b, lookup b), chat p, chat q]
#:       -> chat p first, cut before chat q: the members, now in turn 1, took their turn-0
#:       records through a fallback kept for journals whose turns were numbered by
#:       completion, or went live past "their flow's record" (the frontier rule) while
#:       records the root had started before chat p waited; with side effects in the batch
#:       the second case ran send twice again. Fixed: no cross-turn fallback in a causal
#:       record, and a record no flow of the execution can ask for any more (its point left
#:       behind) keeps a flow from going live (_cursor.Cursor.frontier).
#:   C6: lenient model rule, [send(a) cut in flight, chat p] -> insert chat p first: send,
#:       now in turn 1, found its turn-0 in-flight record through the same fallback
#:       (SideEffectRetryBlockedError) where the model diverges (R7); fixed with C1-order.
#:   warn-drift: [chat p, chat q] finished, reordered to [chat q, chat p], warn: chat p,
#:       whose own record was already handed out, took chat q's record as a drift. Fixed:
#:       under warn a request already replayed is asked again, not a drift (A8).
#:   C7: the driver's loop caught any error as a retry signal; the model asked again after
#:       a retry-signalling call that got none (resume_model R9); live_tools is not drawn
#:       with retry signals (A10).
#:   Off again after a thorough-profile run (randomized) found, with C6 and C7 drawing:
#:   C6: (a) lenient, [chat p, lookup a, chat p] cut with the lookup in flight, changed to
#:       [chat p, chat p]: the engine diverged at the end (it superseded only finished
#:       read-only leftovers), the model supersedes it (R8). Engine fixed (_drift._superseding:
#:       a read-only step in flight is harmless to leave unasked; its outcome was never seen).
#:       (b) lenient_model, [now, send a, lookup a] cut in flight at the lookup, send dropped:
#:       what-changed said "nothing changed" (its dry replay stops where the run goes live)
#:       where the model's strict dry replay diverges (C10). Engine fixed: a dry replay that
#:       stops where an unfinished run goes live while recorded steps wait reports
#:       ``undetermined`` (could not tell; CLI exit 1), never "nothing changed"; C10 accepts
#:       it for an unfinished run only. The same mechanism was the default profile's C10
#:       failure (seed 117559340341482539206366892311309413258: a model step inserted before
#:       a recorded `now`, the resume goes live past the value). (c) live_tools, a send
#:       moved before a batch: not reproduced as described (fork vs person advice); what was
#:       found there (also with C6 off): the batch's model member diverges while its lookup
#:       sibling, started with it, replays and re-runs its body (live_tools by design): the
#:       harness allows those siblings' re-runs (A4).
#:       (e) lenient, [Batch(chat p, chat p), ok] with chat p inserted before the batch
#:       (thorough, seed 11): the lenient fallback handed the inserted call batch member 0's
#:       record (a flow it starts: never its own, R4/C1-order, I11), the members shifted and
#:       the last went live. (f) lenient, [chat p, chat p, lookup a, chat p] finished, the
#:       second chat p dropped, replayed: the fallback handed the last chat p the record at
#:       its position one turn ahead (after the lookup) instead of the dropped one's of its
#:       turn (R3). Engine fixed (_bycontent.by_content: among identical records, none a flow
#:       the caller starts; the caller's turn first, its position within it). (g) continue_
#:       live, async, [send a cut in flight, Batch(lookup a, chat p)], send dropped: the
#:       lookup answered before its sibling diverged; the async driver lost the answer
#:       (gather raised at once). Driver fixed (members' answers up to the first error, as
#:       the sync face). All kept as @examples and in test_differential_found.py.
#:       Still open (C6 stays off; thorough, all rules on, seeds 11 and 33, found with an
#:       intermediate engine, to re-check): (h) lenient, a model record that follows a
#:       dropped step: the model's R3 excludes it (follows), the engine matches it by content
#:       as ReplayPolicy documents and tests/unit/test_policy.py holds
#:       (test_lenient_matches_by_content_across_order): e.g. finished [chat p, send a, chat
#:       q] reordered to [chat q, send a, chat p] and replayed: the model stops
#:       (ReplayMissError), the engine replays; DESIGN.md does not settle lenient matching,
#:       so neither side was changed. (i) a model step superseded under a lenient model rule
#:       leaves no note in the journal (continue_live writes `reasked`): a later replay finds
#:       the superseded record alive and hands it out (a batch member got it). (k) advice:
#:       fork where the model says person (seeds 11 and 33, both under C6). Also seen, now
#:       fixed: a `reasked` note for a model step inserted under continue_live with no model
#:       record left in its turn carried step None, which the frame check refuses (`step` is
#:       a seq wherever it appears): JournalWriteError after the model call. The note now
#:       carries no `step` (_drift._reasked_note); held by test_differential_found.py and
#:       test_frames_written.py (every frame written passes the journal's full check).
#:   Not gated by C6 (found under C6, thorough seed 11; strict, async; a side effect run
#:   again): [chat q, Batch(chat q, send a, send a), chat p, send a] cut in flight at the
#:   last send, the first chat q dropped: member chat q took the root's chat q record, so
#:   no step of the starter waited at its point (_starter_waits) and both sends went live
#:   past "their flow's record", each running again under a new key (I15). A first fix (a
#:   tool call is not past its flow's record while any side effect recorded after the
#:   caller's point waits) was reverted: it also stopped LangGraph's parallel tool calls
#:   resumed in another order (a new draw while a sibling task's recorded draw waited).
#:   Fixed: the rule tells the caller's own flow from a sibling's by the branch points of
#:   the flow that issued each record (its starter's path and spawn indexes): a waiting side
#:   effect recorded by the flow the same starter started under the caller's spawn path,
#:   from a later point of its own, holds the caller; a sibling's (another index) does not
#:   (_frontier._own_effect_waits). Kept as an @example.
#:   C7: (d) [send a, send a(retry)] reordered: the replayed retry signal leaves the loop (the
#:       driver catches it only where declared), the model took it as an answer, and
#:       what-changed reported nothing (its dry replay counted the raise as the code failing).
#:       Model fixed (R9: a replayed retry signal its caller does not catch ends the attempt,
#:       error RetrySignal, the run failed, as the library does); what-changed fixed: the code
#:       raising where a finished run succeeded breaks the replay (as `check` fails it).
#:       (thorough, seed 33) warn, [chat p, lookup a, send a(retry), chat q, lookup a] cut
#:       in flight, the first lookup dropped: chat q's record, the very request, follows the
#:       unreplayed lookup; the model replayed it as drift, the library diverges. The model
#:       was wrong: warn relaxes drifted arguments only (ReplayPolicy; R5 "other
#:       arguments"); the order of steps is strict's. Model fixed (R5); not C7's own (the
#:       retry only makes it likelier). (thorough, seed 7) live_tools with a code change
#:       that inserts a retry signal: outside A10, which the generator checked on the
#:       recorded program only. Generator fixed. With C7 on (C6 off) the thorough profile
#:       passed seeds 33 and 7 in full (seed 7 on 4 December 2026, 1,000 examples, 13 min),
#:       and the ci profile passes: C7 is on since then. Thorough seed 44 then found two
#:       disagreements that are not C7's (no retry signal in either; listed below).
#:   Not gated by C6/C7 (found with C7 on, thorough seed 44; a side effect run again):
#:   strict, [chat p, Batch(send a, send a), chat p, chat p] cut before the second chat p,
#:   the first chat p dropped: both batch members went live (the frontier rule did not count
#:   the root's waiting chat p, recorded where their starter stood, A1), so each send ran
#:   again under a new idempotency key while its record waited (I15). Fixed:
#:   _frontier._starter_waits; kept as an @example.
#:   Also open, not gated, flaky (thorough seed 66 under load; Hypothesis could not
#:   reproduce it): strict, [chat q, Batch(search a x3), Batch(send a x2), lookup b,
#:   search b] cut in flight at search b, lookup renamed search: the second search b
#:   re-ran its in-flight record where the model diverges (read-only only; timing).
#:   Also open, not gated: warn, [chat q, search a, search a, Batch(search a,
#:   search a)] finished, one search dropped, replayed (thorough, seed 22): the two identical
#:   batch members get each other's records (loose comparison of changed code).
#:   Also open, not gated (thorough seed 44, 4 December 2026): strict, [chat p, now, chat p,
#:   chat q] cut before the last chat (kill), the first chat p dropped, so the value step
#:   `now` is asked before any model call: the model answers it from its record (A8: values
#:   have no issue position) and diverges at the third call; the library diverges at once
#:   (seq 1: "asked for value 'now' where the journal has model 'model:chat'"). Both stop
#:   with DivergenceError and run nothing; where they stop differs. The same program with
#:   a retryable crash at the second chat: what-changed reports seq 1 unreplayable where the
#:   model's strict dry replay stops at m2 with ReplayMissError. The generator keeps value
#:   steps in place but a dropped model call before one moves it across the turn; whether
#:   a value may be answered ahead of the model record it followed is A8's open question.
_ON = "C1,C2,C3,C4,C5,C7,C8,C10,C1-order,warn-drift"
IMPLEMENTED: frozenset[str] = frozenset(
    rule for rule in os.environ.get("REDRIVE_CONTRACT_RULES", _ON).split(",") if rule
)
#: What each rule switches on in the generators (shown by the skips).
RULES = {
    "C1": "the code change 'add a defaulted parameter' (match ignores it)",
    "C2": "code changes under lenient rules and continue_live (live step takes its place)",
    "C3": "on_drift='continue_live' on the async face",
    "C4": "code changes under lenient rules and continue_live (no side effect while one waits)",
    "C5": "errors' next steps compared with the model and followed",
    "C6": "code changes under lenient rules and continue_live (leftover steps)",
    "C7": "tools raising pydantic-ai ModelRetry, called again with the same arguments",
    "C8": "identical concurrent requests in a cold process (tests/crash/test_differential_cold.py)",
    "C10": "what-changed and check compared with the model's strict dry replay",
    "C1-order": "code changes in programs with parallel batches (a main-flow call and a "
    "batch member never share a position; a step moved across a batch diverges)",
    "warn-drift": "warn with a code change: a call at a recorded step's position (same name, "
    "other arguments) is drift and gets the recorded outcome, unless the record's own copy of "
    "that request was replayed already (then it diverges, A8)",
}

POLICIES: dict[str, tuple[m.Policy, dict[str, Any]]] = {
    "strict": (m.Policy(), {"replay": "strict"}),
    "warn": (
        m.Policy(tool="warn", model="warn", value="warn"),
        {"replay": redrive.ReplayPolicy(tool="warn", model="warn", value="warn")},
    ),
    "lenient": (m.Policy(tool="lenient", model="lenient", value="lenient"), {"replay": "lenient"}),
    "lenient_model": (m.Policy(model="lenient"), {"replay": redrive.ReplayPolicy(model="lenient")}),
    "lenient_tool": (m.Policy(tool="lenient"), {"replay": redrive.ReplayPolicy(tool="lenient")}),
    "continue_live": (
        m.Policy(on_drift="continue_live"),
        {"replay": redrive.ReplayPolicy(on_drift="continue_live")},
    ),
    "live_tools": (m.Policy(live_tools=True), {"replay": "strict", "live_tools": True}),
}
RELAXED = ("lenient", "lenient_model", "lenient_tool", "continue_live")


def on(rule: str) -> bool:
    """Whether CONTRACT rule ``rule`` is switched on."""
    return rule in IMPLEMENTED


#: Tool names by kind (a name is always of one kind).
NAMES = {"effect": ("send", "refund"), "read": ("lookup", "search")}


# -- one example ---------------------------------------------------------------------------


class Check:
    """One example's real run and model run side by side, attempt after attempt."""

    def __init__(self, scenario: dict[str, Any], journal: Any) -> None:
        self.s, self.journal = scenario, journal
        self.run_id = f"d-{uuid.uuid4().hex[:8]}"
        self.policy, self.options = POLICIES[scenario["policy"]]
        self.world = driver.World(unique_tools=not self.policy.live_tools)
        self.mj = m.Journal()
        self.answers: dict[tuple[int, str], Any] = {}  # record origin -> the real answer
        self.seen: list[Any] = []
        self.items: tuple[m.Item, ...] = scenario["changed"]

    def program(self, items: tuple[m.Item, ...]) -> driver.Program:
        return driver.Program(items, self.world, self.s["face"])

    def crash(self) -> tuple[m.Crash | None, driver.Crash | None]:
        if self.s["crash"] is None:
            return None, None
        caller, boundary, how = self.s["crash"]
        order = [(c, call) for c, _f, call in m.callers(self.s["program"])]
        target = next(call for c, call in order if c == caller)
        name = driver.step_name(target)
        nth = 1 + sum(
            1
            for c, call in order[: [c for c, _ in order].index(caller)]
            if driver.step_name(call) == name
        )
        return m.Crash(caller, boundary, how), driver.Crash(boundary, name, nth, how)

    def step(
        self,
        items: tuple[m.Item, ...],
        policy: m.Policy,
        options: dict[str, Any],
        crash: Any = None,
    ) -> m.Attempt:
        """One attempt through both; compare; return the model's attempt."""
        mcrash, rcrash = crash if crash is not None else (None, None)
        want = m.attempt(items, self.mj, policy, mcrash)
        got = driver.attempt(self.journal, self.run_id, self.program(items), options, rcrash)
        where = f"attempt {want.journal.attempts} of {self.s}: model {want}, real {got}"
        self.compare(want, got, where, items=items)
        self.mj = want.journal
        return want

    def compare(
        self,
        want: m.Attempt,
        got: driver.Observed,
        where: str,
        *,
        loose: bool = False,
        items: tuple[m.Item, ...] | None = None,
    ) -> None:
        """The real attempt did what the model says. ``loose`` (changed code replayed over a
        finished run): only that it stops or not, runs no body, and hands out nothing but
        the callers' own records (the class and point of the stop are not compared).
        ``items``: the program attempted (default: the changed one)."""
        real_error = None if got.error is None else type(got.error).__name__
        if real_error in ("Killed", "Interrupted"):
            real_error = "crash"
        if isinstance(got.error, driver.RetrySignal):
            real_error = "RetrySignal"
        model_error = None if want.error == "suspended" else want.error
        if loose:
            assert (real_error is None) == (model_error is None), f"error {real_error}; {where}"
        else:
            assert real_error == model_error, f"error {real_error} != {model_error}; {where}"
        assert got.status == want.status, f"status {got.status} != {want.status}; {where}"
        bodies = collections.Counter((n, a) for n, a, _k in got.bodies)
        expected = collections.Counter(want.bodies + want.rerun)
        if self.policy.live_tools and want.at.startswith("b"):
            # A4: the members of the batch the model stops in run concurrently; a sibling
            # replayed before the stop re-ran its body, as live_tools does by design
            batch = want.at.split(".")[0] + "."
            siblings = collections.Counter(
                (c.name, c.arg)
                for caller, _f, c in m.callers(self.items if items is None else items)
                if caller.startswith(batch) and c.kind in ("effect", "read")
            )
            assert not (bodies - expected) - siblings, f"bodies; {where}"
            bodies = bodies & expected  # the model's own re-runs all happened
        if not (loose and self.policy.live_tools):
            assert bodies == expected, f"bodies; {where}"
        extra = set(got.got) - set(want.answers)
        assert loose or not extra, f"callers {extra} answered where the model stops; {where}"
        for caller, answer in want.answers.items():
            if loose and caller not in got.got:
                continue
            origin = (want.journal.attempts, caller)
            if caller not in got.got:  # cut after its record, before its caller saw it
                assert want.error == "crash" and caller == want.at, f"{caller} unanswered; {where}"
                self.answers[origin] = self.world.produced[-1]
                continue
            value = got.got[caller]
            if answer[0] == "recorded":
                assert value == self.answers[answer[1]], f"{caller} got {value!r}; {where}"
                self.answers[origin] = value
            elif answer[0] == "live":
                if isinstance(value, str) and self.world.unique_tools:
                    assert value not in self.seen, f"{caller} got an old answer; {where}"
                self.answers[origin] = value
            elif answer[0] == "retry":
                assert value == driver.RETRY, f"{caller}: {value!r}; {where}"
            else:
                assert isinstance(value, dict) and value.get("status") == "not_safely_resumable"
            self.seen.append(value)
        self.invariants(where)

    def invariants(self, where: str) -> None:
        """Independent of the model: at most once per idempotency key (I1)."""
        retrying = {
            c.name
            for items in (self.s["program"], self.s["changed"])  # a change may add a retry
            for _, _, c in m.callers(items)
            if c.retry_signal
        }
        if self.policy.live_tools:
            return
        counts = collections.Counter(
            (n, k) for n, _a, k in self.world.ledger if n in NAMES["effect"]
        )
        for (name, key), n in counts.items():
            assert n <= (2 if name in retrying else 1), f"{name} ran {n}x under {key}; {where}"

    def agree(self, items: tuple[m.Item, ...]) -> None:
        """C10: what-changed and check call a run unreplayable exactly where the model's
        strict dry replay of the new code stops (a divergence; for a finished run, any
        step it cannot answer)."""
        if not on("C10"):
            return
        driver.CURRENT[:] = [self.program(items)]
        dry = m.attempt(items, self.mj, m.Policy(), replay_only=True)
        finished = self.mj.status == "succeeded"
        breaks = dry.error is not None if finished else dry.error == "DivergenceError"
        found = redrive.what_changed(self.journal, self.run_id)
        if found.undetermined:
            # the dry replay stopped where the unfinished run goes live with records left
            # (the model's own dry replay may go on past a re-run read-only step): it says
            # it cannot tell, never "nothing changed"; a finished run is always decided
            assert not finished and not found.strict_replay_breaks, found.summary()
            assert "nothing changed" not in found.summary(), found.summary()
            return
        assert found.strict_replay_breaks == breaks, (
            f"what-changed: {found.summary()}\nmodel: {dry.error} at {dry.at}; {self.s}"
        )
        if finished:
            result = redrive.check_run((self.journal, self.run_id))
            assert result.passed == (not breaks), f"check {result} vs model {dry.error}; {self.s}"

    def follow(self, want: m.Attempt, got_error: BaseException | None) -> Any:
        """Take an error's first next step (C5); return (items, policy, options) or None."""
        steps = getattr(got_error, "next_steps", ())
        assert steps, f"{type(got_error).__name__} proposes no next step: {got_error}"
        first = steps[0]
        action = first.action.value
        assert action == want.advice, f"first next step {action} != model {want.advice}"
        if action == "resolve":
            return self.resolve(int(first.params["seq"]))
        if action == "fork":
            return self.fork(int(first.params["before"]))
        resume = [s for s in steps if s.action.value == "resume"]
        if action == "person" and resume and resume[0].params.get("code") == "recorded":
            return self.s["program"], self.policy, self.options
        return None

    def resolve(self, seq: int) -> Any:
        frame = next(f for f in self.journal.frames(self.run_id) if f.seq == seq)
        key = frame.data()["idempotency_key"]
        done = key in self.world.by_key
        rec = next(r for r in self.mj.records if r.state == "in_flight" and r.call.kind == "effect")
        if done:
            resolve_step(
                self.journal,
                self.run_id,
                seq,
                state="done",
                by="t",
                reason="ledger",
                result=self.world.by_key[key],
            )
            rec.state = "done"
            self.answers[rec.origin] = self.world.by_key[key]
        else:
            resolve_step(self.journal, self.run_id, seq, state="not_done", by="t", reason="ledger")
            rec.state = "not_done"  # re-run in its place by the next resume (A11)
        return self.items, self.policy, self.options

    def fork(self, before: int) -> Any:
        frames = list(self.journal.frames(self.run_id))
        effects = [
            f
            for f in frames
            if f.kind == "tool_start" and f.seq >= before and not f.data()["read_only"]
        ]
        assert not effects, f"a fork before seq {before} re-runs {[f.name for f in effects]}"
        opened = sum(
            1
            for f in frames
            if f.seq < before and f.kind in ("model_request", "tool_start", "value")
        )
        new_id = self.run_id + "-fork"
        redrive.fork(self.journal, self.run_id, before, new_id)
        self.run_id = new_id
        kept = self.mj.records[:opened]
        # decisions are the run's (A5): a fork keeps those its copied approval records
        # hold; an approval after the cut is asked again in the fork
        decided = {r.call.name for r in kept if r.call.kind == "approval"}
        self.mj = m.Journal(kept, "running", decided, self.mj.attempts)
        return self.items, self.policy, self.options

    def run(self) -> None:
        """Attempt 1 (the recorded program, maybe cut), then resumes of the changed one,
        taking the safe step each error names, until the run ends or stops; then replay."""
        first = self.step(self.s["program"], m.Policy(), {"replay": "strict"}, self.crash())
        self.finished_with = self.s["program"]
        self.items, policy, options = self.s["changed"], self.policy, self.options
        if self.s["how"] != "none" and first.error != "suspended":
            self.agree(self.items)
        for _ in range(5):
            if self.mj.status == "succeeded":
                return self.replayed()
            if self.mj.status == "failed":  # the loop raised (R9): the run ended
                return None
            if self.mj.status == "suspended":
                self.journal.decide(self.run_id, "ok", True, by="t")
                self.mj.decided.add("ok")
            want = m.attempt(self.items, self.mj, policy)
            got = driver.attempt(self.journal, self.run_id, self.program(self.items), options)
            self.compare(want, got, f"resume of {self.s}: model {want}, real {got}")
            self.finished_with = self.items
            self.mj = want.journal
            if want.error in ("DivergenceError", "SideEffectRetryBlockedError"):
                if on("C5"):
                    nxt = self.follow(want, got.error)
                elif want.error == "SideEffectRetryBlockedError":
                    # the step C5 names, taken without its advice: `redrive resolve` (I4)
                    nxt = self.resolve(int(getattr(got.error, "seq", -1)))
                else:
                    return None
                if nxt is None:
                    return None
                self.items, policy, options = nxt
        return None

    def replayed(self) -> None:
        """I2: the finished run replayed (``live=False``) calls nothing and answers as
        recorded; replayed by changed code, it stops (or not) as the model says."""
        want = m.attempt(self.items, self.mj, self.policy, replay_only=True)
        options = {**self.options, "live": False}
        got = driver.attempt(self.journal, self.run_id, self.program(self.items), options)
        loose = self.items != self.finished_with
        self.compare(want, got, f"replay of {self.s}: model {want}, real {got}", loose=loose)


def check(scenario: dict[str, Any]) -> None:
    """Run one scenario on a memory journal (or a DuckDB file)."""
    if scenario["duckdb"]:
        with tempfile.TemporaryDirectory() as tmp:
            journal = redrive.open_journal(os.path.join(tmp, "runs.duckdb"))
            try:
                Check(scenario, journal).run()
            finally:
                journal.close()
    else:
        Check(scenario, redrive.open_journal(":memory:")).run()
