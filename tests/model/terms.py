"""The vocabulary of the reference model (``tests/model/resume_model.py``): programs,
policies, the abstract journal and what an attempt does. Plain data, no logic but keys."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

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
    """Calls made at once, each from its own asyncio task or thread (R4).

    ``via`` is informational: the driver makes asyncio tasks on the async face and
    ``redrive.executor()`` threads on the sync face (the model treats both alike).
    """

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
            not_done (in flight, resolved as not done: re-run in place, A11), superseded
            (re-asked or left over).
        origin: the caller (and attempt) whose live answer this record holds; its id.
        spawn: the issuing flow's spawn path from ``parent`` (``()``: the flow that
            completed ``parent``; ``(k,)``: the k-th member of a batch it started), C8.
    """

    call: Call
    turn: int
    parent: tuple[int, str] | None
    occ: int
    state: str
    origin: tuple[int, str]
    consumed: bool = False
    spawn: tuple[int, ...] = ()


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
    answers: dict[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    error: str | None = None
    at: str = ""
    advice: str = ""
    status: str = "running"
    journal: Journal = dataclasses.field(default_factory=Journal)
    warned: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Flow:
    """Where a flow stands: its turn, the last step it completed (``parent``, for the
    positions of its live steps), the last recorded step it replayed or superseded
    (``point``: the position of its next step, R6) and where it started (``start``: the
    unreplayed records after it are this flow's, and wait, R7); ``spawn``: its spawn path
    since ``parent`` (a batch member's index until it completes a step)."""

    turn: int = 0
    parent: tuple[int, str] | None = None
    point: tuple[int, str] | None = None
    start: tuple[int, str] | None = None
    spawn: tuple[int, ...] = ()
