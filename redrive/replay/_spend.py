"""One execution's count of model spend, and the budget check before a live model call.

:class:`Spend` is held by the run's state. What earlier executions spent is
read from the journal (:func:`~._usage.read_usage` over the frames before the
resume point) once, when first needed; this execution's live calls and the
steps it replayed are added as they happen. :meth:`Spend.check` is the one
place a budget is enforced: :class:`~._models.ModelSteps` calls it when a
model step is about to go live, before the call is made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import BudgetExceededError
from ..frames import Frame
from ._steps import RecordedStep
from ._usage import Budget, Meter, RunUsage, Usage, read_usage, view_of

__all__ = ["Spend"]


def _number(value: float, what: str) -> str:
    return f"{int(value):,} tokens" if what == "tokens" else f"{value:,.6g}"


class Spend:
    """The model spend of a run as one execution sees it.

    Args:
        run_id: the run's id (for the error).
        budget: the run's limits and prices.
        earlier: returns the frames journaled before this execution (read
            once, when first needed); None for a new run.
    """

    def __init__(
        self, run_id: str, budget: Budget, earlier: Callable[[], Iterable[Frame]] | None = None
    ) -> None:
        self.run_id = run_id
        self.budget = budget
        self._earlier = earlier
        self._before: Usage | None = None
        self._live = Meter(budget.prices)
        #: what this execution's replay saved, added up as each step replays: the steps
        #: themselves (their frames and decoded payloads) are not kept, so a long replay
        #: holds no more of them than the cursor does
        self._saved = Meter(budget.prices)
        self._replayed: list[int] = []
        self._lock = threading.Lock()

    def resumed_from(self, earlier: Callable[[], Iterable[Frame]]) -> None:
        """Read what earlier executions spent from ``earlier()`` (when first needed)."""
        with self._lock:
            self._earlier, self._before = earlier, None

    def live(self, view: Any, seconds: float) -> None:
        """Count one model call made live (its semantic view, its wall time in seconds)."""
        with self._lock:
            self._live.add(view if isinstance(view, dict) else {}, seconds)

    def replayed(self, step: RecordedStep) -> None:
        """Count one model step answered from the journal (no call made)."""
        outcome = step.peek_outcome()  # read only: the reader's decode stays for the handle
        started = step.data.get("started_at")
        seconds = 0.0
        if step.end is not None and isinstance(started, int | float):
            seconds = step.end.at - float(started)
        view = view_of(step.data, outcome)
        with self._lock:
            self._replayed.append(step.seq)
            self._saved.add(view, seconds)

    @property
    def replayed_seqs(self) -> list[int]:
        """Seqs of the model steps this execution replayed, in order."""
        with self._lock:
            return list(self._replayed)

    def _spent_before(self) -> Usage:
        if self._before is None:
            frames = self._earlier() if self._earlier is not None else ()
            self._before = read_usage(frames, self.budget.prices).spent
        return self._before

    def usage(self) -> RunUsage:
        """What the run's live calls spent (every execution) and what this one's replay saved."""
        with self._lock:
            before, live, saved = self._spent_before(), self._live.usage(), self._saved.usage()
        cost = None
        if before.cost is not None or live.cost is not None:
            cost = (before.cost or 0.0) + (live.cost or 0.0)
        spent = Usage(
            calls=before.calls + live.calls,
            tokens=before.tokens + live.tokens,
            cost=cost,
            seconds=before.seconds + live.seconds,
            unpriced=tuple(sorted(set(before.unpriced) | set(live.unpriced))),
        )
        return RunUsage(spent=spent, saved=saved)

    def check(self, name: str, seq: int) -> None:
        """The budget check: raise before a live model call once a limit is reached.

        Args:
            name: the model step about to be called.
            seq: the seq it would get.

        Raises:
            BudgetExceededError: the run's live calls (all executions) used
                ``max_tokens`` or ``max_cost`` already; no call is made.
        """
        budget = self.budget
        if budget.max_tokens is None and budget.max_cost is None:
            return
        spent = self.usage().spent
        reached = budget.reached(spent)
        if reached is None:
            return
        what, used, limit = reached
        option = "max_tokens" if what == "tokens" else "max_cost"
        raise BudgetExceededError(
            f"run {self.run_id!r}: its budget {option}={limit:g} is reached "
            f"({_number(used, what)} used by {spent.calls} live model call(s) across its "
            f"executions), so model step {name!r} at seq {seq} was not called. Nothing was "
            "billed for it and the run stays resumable. What to do: if the run may spend "
            f"more, run it again with the same run_id and a larger {option}= (replayed steps "
            "are not charged again); otherwise leave it as it is.",
            run_id=self.run_id,
            seq=seq,
            limit_kind=what,
            used=used,
            limit=limit,
            step=name,
        )
