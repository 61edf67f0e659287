"""The Agents SDK's runner, held so a session redrive does not own is refused when a run starts.

A session (``agents.SQLiteSession`` and the SDK's other stores) keeps the
conversation in a store of its own: the Runner reads it before its first
model call and writes each turn to it. Under a redrive run that store is
written by every attempt, so a resumed attempt sends the stored items plus the
input again, a request the journal never saw (``DivergenceError``), after the
first attempt has already paid and acted. :class:`RecordedSession` makes the
two agree; a bare session cannot, so it is refused *before* the first model
call of the run, not at the resume where the work is already half done.

How: ``Runner.run``, ``run_sync`` and ``run_streamed`` hand every call to the
SDK's default agent runner (``agents.run.get_default_agent_runner``,
openai-agents 0.2 and later). :func:`install` sets a :class:`SessionGuard`
holding the runner that was there as the default; it checks the ``session``
argument and hands the call on unchanged. Outside a redrive run, and for a
:class:`RecordedSession` or no session, it only hands the call on.

The same holder sees a run paused for tool approvals (``run``, ``run_sync``
and ``run_streamed``) and its continuation from a ``RunState``
(:mod:`._agents_state`): under a redrive run it journals the pause, and a
continuation of a stored state resumes the run's journal after that pause.
"""

from __future__ import annotations

from typing import Any

from agents import RunState

from ..errors import NextStep, NextStepAction, ReplayError
from ..replay import current_run
from ._agents_state import after_result, after_streamed, before_state
from .agents_session import RecordedSession

__all__ = ["SessionGuard", "UnrecordedSessionError", "install"]


class UnrecordedSessionError(ReplayError):
    """An Agents SDK run under a redrive run was given a session redrive does not own.

    Raised by ``Runner.run`` / ``run_sync`` / ``run_streamed`` before any model
    call, when a redrive run is active and ``session=`` is neither None nor a
    :class:`~redrive.integrations.openai_agents.RecordedSession`. Nothing was
    sent or written.

    What to do: wrap the session,
    ``session=RecordedSession(SQLiteSession(...))``, so a resumed run reads the
    history the interrupted attempt read and stores each item once; or build
    the conversation from the run's input and pass no session.
    """


def _refusal(run_id: str, session: Any) -> UnrecordedSessionError:
    kind = f"{type(session).__module__}.{type(session).__qualname__}"
    return UnrecordedSessionError(
        f"run {run_id!r}: the Agents SDK Runner was given a session of type {kind}, which "
        "keeps the conversation in a store redrive does not journal. A resumed attempt would "
        "send the stored items plus the input again (a request the journal never saw) and "
        "store the input once more per attempt. Nothing was sent. Wrap it: "
        "session=RecordedSession(session) (from redrive.integrations.openai_agents).",
        run_id=run_id,
    ).with_next_steps(
        (
            NextStep(
                NextStepAction.PERSON,
                "pass session=RecordedSession(session), then run again with the same run id",
                {"commands": []},
            ),
        )
    )


class SessionGuard:
    """The SDK's default agent runner, with sessions checked against the active redrive run.

    Args:
        inner: the runner that was the default (an ``agents.run.AgentRunner``).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def _check(self, input: Any, session: Any) -> Any:
        """Refuse a bare session; prepare a continued ``RunState``; return the active run."""
        run = current_run()
        if run is None:
            return None
        if session is not None and not isinstance(session, RecordedSession):
            raise _refusal(run.run_id, session)
        if isinstance(input, RunState):
            before_state(run, input)
        return run

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        """``AgentRunner.run``, after the checks (raises UnrecordedSessionError...)."""
        run = self._check(input, kwargs.get("session"))
        result = await self.inner.run(starting_agent, input, **kwargs)
        if run is not None:
            after_result(run, result)
        return result

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        """``AgentRunner.run_sync``, after the checks (raises UnrecordedSessionError...)."""
        run = self._check(input, kwargs.get("session"))
        result = self.inner.run_sync(starting_agent, input, **kwargs)
        if run is not None:
            after_result(run, result)
        return result

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        """``AgentRunner.run_streamed``, after the checks (raises UnrecordedSessionError...)."""
        run = self._check(input, kwargs.get("session"))
        result = self.inner.run_streamed(starting_agent, input, **kwargs)
        if run is not None:
            after_streamed(run, result)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def install() -> None:
    """Make the SDK's default agent runner a :class:`SessionGuard` (once; idempotent).

    Does nothing with an SDK that has no default agent runner (before 0.2).
    """
    try:
        from agents import run as sdk_run
    except ImportError:  # pragma: no cover - the integration imports agents first
        return
    getter = getattr(sdk_run, "get_default_agent_runner", None)
    setter = getattr(sdk_run, "set_default_agent_runner", None)
    if getter is None or setter is None:  # pragma: no cover - openai-agents < 0.2
        return
    current = getter()
    if not isinstance(current, SessionGuard):
        setter(SessionGuard(current))
