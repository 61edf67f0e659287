"""An OpenAI Agents SDK session whose history redrive owns while a run is replayed.

A session (``agents.SQLiteSession``, ``agents.extensions.memory.*``, any
object of the SDK's ``Session`` protocol,
https://openai.github.io/openai-agents-python/sessions/) keeps a
conversation's items in a store of its own: the Runner reads them before its
first model call and writes the user's input and each turn's items as it
goes. A run killed half-way leaves its items in the store, so on resume the
Runner would send the stored history *plus* the input again: a request the
journal never saw (``DivergenceError``), and one more copy of the input
written on each failed attempt.

Who owns what: the session owns the conversation *before* a run starts;
redrive owns what the run writes. :class:`RecordedSession` journals the
session's length when a run first touches it (a value step named
``agents_session``, labelled with the session id); on every execution of the
run, reads see the items the session held at that point plus the items this
execution has written, and a write of an item the interrupted attempt had
already stored at the same position is not written again. So a resumed run
reads what the interrupted one read, its model steps replay, and the store
ends with exactly one copy of each item. Outside a run it is a plain
pass-through.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import attrs

from ..errors import NextStep, NextStepAction, ReplayError
from ..replay import Run, current_run, write_queued

__all__ = ["RecordedSession", "SessionHistoryError"]

#: value-step name of the session length journaled when a run first touches a session
SESSION_STEP = "agents_session"


class SessionHistoryError(ReplayError):
    """The session's stored items do not fit what the run recorded or writes now.

    Raised by :class:`RecordedSession` when the store lost items the run saw
    (it was cleared or truncated since), or holds, after the run's start,
    items this execution writes differently (another attempt ran other code).
    Nothing is deleted from the store: a person decides.
    """


def _same(a: Any, b: Any) -> bool:
    """Whether two session items are the same JSON (what a store round-trips)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@attrs.define
class _Scope:
    """One run's view of the session.

    Attributes:
        run: the run this view belongs to.
        start: how many items the session held when the run first touched it (journaled).
        mirror: the store's items as this execution knows them (read once, then kept in step).
        added: the items this execution has written (or found already written), in order.
    """

    run: Run
    start: int
    mirror: list[Any]
    added: list[Any] = attrs.Factory(list)

    def view(self) -> list[Any]:
        return self.mirror[: self.start] + self.added


class RecordedSession:
    """Wrap an Agents SDK session so that a resumed run sees the history it saw live.

    Pass it where the session goes: ``Runner.run(agent, text, session=RecordedSession(
    SQLiteSession("conv-1", "chats.db")))``. Every method keeps the SDK's
    ``Session`` protocol.

    Args:
        inner: the session that stores the items (any ``Session``).
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._scope: _Scope | None = None

    def __repr__(self) -> str:
        return f"RecordedSession({self._inner!r})"

    @property
    def inner(self) -> Any:
        """The wrapped session."""
        return self._inner

    @property
    def session_id(self) -> str:
        """The wrapped session's id."""
        return str(self._inner.session_id)

    @property
    def session_settings(self) -> Any:
        """The wrapped session's settings (``SessionSettings`` or None)."""
        return getattr(self._inner, "session_settings", None)

    async def _scope_of(self, run: Run) -> _Scope:
        """This run's view, made (and its start journaled) on the run's first touch.

        Raises:
            SessionHistoryError: the store now holds fewer items than the run
                recorded at its start.
        """
        if self._scope is not None and self._scope.run is run:
            return self._scope
        stored = list(await self._inner.get_items())
        start = run.value_step(SESSION_STEP, self.session_id, lambda: len(stored))
        write_queued(run)  # durable before the Runner writes the store
        if not isinstance(start, int) or start > len(stored):
            raise SessionHistoryError(
                f"run {run.run_id!r}: session {self.session_id!r} held {start} item(s) when "
                f"the run started, and holds {len(stored)} now: it was cleared or truncated "
                "since, so the history the run's recorded model calls were made with is gone.",
                run_id=run.run_id,
            ).with_next_steps(
                (
                    NextStep(
                        NextStepAction.RERECORD,
                        "start a new run (a new run_id) on the session as it is now; the "
                        "recorded run cannot be resumed on a history it never had",
                    ),
                )
            )
        self._scope = _Scope(run, start, stored)
        return self._scope

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """Return the conversation, oldest first (the last ``limit`` items, when given).

        Inside a run: the items the session held when the run started, then
        the items this execution wrote; not items an interrupted attempt of
        the run left in the store beyond what this execution has written.
        """
        run = current_run()
        if run is None:
            return list(await self._inner.get_items(limit))
        view = (await self._scope_of(run)).view()
        if limit is not None:
            view = view[-limit:] if limit > 0 else []
        return copy.deepcopy(view)

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items``; inside a run, each item already stored at its position is skipped.

        An item the interrupted attempt of this run stored at the same
        position is the same write: it is not stored twice. A replay that does
        not go live (``live=False``) writes nothing.

        Raises:
            SessionHistoryError: the store holds another item at an item's
                position (written by an attempt that ran other code); nothing is written.
        """
        run = current_run()
        if run is None:
            await self._inner.add_items(items)
            return
        scope = await self._scope_of(run)
        fresh: list[Any] = []
        for offset, item in enumerate(items):
            pos = scope.start + len(scope.added) + offset
            if pos >= len(scope.mirror):
                fresh.append(item)
            elif fresh or not _same(scope.mirror[pos], item):
                raise self._conflict(run, scope, pos, item)
        if fresh and run.live:
            await self._inner.add_items(list(fresh))
        scope.mirror.extend(copy.deepcopy(fresh))
        scope.added.extend(copy.deepcopy(list(items)))

    def _conflict(self, run: Run, scope: _Scope, pos: int, item: Any) -> SessionHistoryError:
        return SessionHistoryError(
            f"run {run.run_id!r}: session {self.session_id!r} holds, at position {pos} (after "
            f"the {scope.start} item(s) it held when the run started), an item other than the "
            f"one this execution writes there.\n  stored: {scope.mirror[pos]!r}\n  "
            f"written: {item!r}\nAn earlier attempt of this run wrote a different "
            "conversation (other code, or another run on the same session).",
            run_id=run.run_id,
        ).with_next_steps(
            (
                NextStep(
                    NextStepAction.PERSON,
                    f"inspect the session (session_id {self.session_id!r}); remove the items "
                    f"after position {scope.start - 1} that the run should not keep, then "
                    "resume the run",
                    {"commands": []},
                ),
            )
        )

    async def pop_item(self) -> Any:
        """Remove and return the newest item (the SDK rolls back a failed write with it).

        Inside a run: the newest item this execution wrote (None when it wrote
        none: the history before the run is not the run's to remove).
        """
        run = current_run()
        if run is None:
            return await self._inner.pop_item()
        scope = await self._scope_of(run)
        if not scope.added:
            return None
        item = scope.added.pop()
        if scope.start + len(scope.added) == len(scope.mirror) - 1:
            scope.mirror.pop()
            if run.live:
                await self._inner.pop_item()
        return item

    async def clear_session(self) -> None:
        """Clear the wrapped session (outside a run only).

        Raises:
            SessionHistoryError: called inside a run, whose recorded model
                calls were made with the history a clear would lose.
        """
        run = current_run()
        if run is not None:
            raise SessionHistoryError(
                f"run {run.run_id!r}: clear_session() on session {self.session_id!r} inside "
                "the run would delete the history its recorded steps were made with.",
                run_id=run.run_id,
            ).with_next_steps(
                (
                    NextStep(
                        NextStepAction.PERSON,
                        "clear the session before the run starts or after it ends",
                        {"commands": []},
                    ),
                )
            )
        await self._inner.clear_session()
