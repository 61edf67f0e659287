"""Conformance-matrix scenarios whose framework keeps a durable store the user handles.

* ``agents-approval-state`` / ``-sync`` / ``-stream``: the Agents SDK's
  human-in-the-loop as its documentation shows it: a ``needs_approval`` tool
  stops the run, the application stores ``result.to_state().to_string()``, a
  person approves on the stored state, and a later delivery continues it with
  ``Runner.run(agent, state)`` (or ``run_sync``, or ``run_streamed`` with its
  events consumed to the end) under the same run id.
* ``langgraph-interrupt-async``: the LangGraph interrupt job on
  ``AsyncSqliteSaver`` and ``ainvoke``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import redrive
from tests.integrations import matrix_drivers as first
from tests.integrations.matrix_child import PROMPT, die_at

# --- OpenAI Agents SDK: a RunState the application stores -------------------------------------


def _approval_agent(job: dict[str, Any]) -> tuple[Any, Any]:
    agents, model, send_email = first._agents_setup(job)
    send_email.needs_approval = True  # the SDK stops the run before each call
    agent = agents.Agent(name="support", instructions="Help.", model=model, tools=[send_email])
    return agents, agent


def _stored(job: dict[str, Any]) -> Path:
    return Path(job["workdir"]) / f"state-{job['cell']}.json"


def _given(job: dict[str, Any], agents: Any, agent: Any) -> Any:
    """What the application's handler runs: the stored state (continued), or the prompt."""
    store = _stored(job)
    if not store.exists():
        return PROMPT
    return asyncio.run(agents.RunState.from_string(agent, store.read_text()))


def _settle(job: dict[str, Any], run: redrive.Run, result: Any) -> Any:
    """Store the state of a run stopped for approval (None), or finish the run."""
    if result.interruptions:
        _stored(job).write_text(result.to_state().to_string())
        return None  # the block ends: the run is suspended until a delivery continues it
    output = first._agents_result(result)
    die_at("before_finish")
    return run.finish(output)


def _deliver(job: dict[str, Any], journal: Any, live: bool) -> Any:
    """One delivery of the job; the answer, or None when the run stopped for an approval."""
    agents, agent = _approval_agent(job)
    given = _given(job, agents, agent)
    if job["scenario"].endswith("-sync"):
        with redrive.run(journal, job["run_id"], live=live) as run:
            return _settle(job, run, agents.Runner.run_sync(agent, given))

    async def deliver() -> Any:
        async with redrive.run(journal, job["run_id"], live=live) as run:
            if job["scenario"].endswith("-stream"):
                result = agents.Runner.run_streamed(agent, given)
                async for _ in result.stream_events():
                    pass
            else:
                result = await agents.Runner.run(agent, given)
            return _settle(job, run, result)

    return asyncio.run(deliver())


async def _person_approves(job: dict[str, Any]) -> None:
    """A person approves every waiting call on the stored state (outside any run)."""
    agents, agent = _approval_agent(job)
    store = _stored(job)
    state = await agents.RunState.from_string(agent, store.read_text())
    for item in state.get_interruptions():
        state.approve(item)
    store.write_text(state.to_string())
    die_at("approved")


def agents_approval_state(job: dict[str, Any], journal: Any) -> Any:
    """Deliver, let a person approve on the stored state, deliver again (the same run id).

    A process killed anywhere gets the job again: its handler continues the
    stored state if there is one (approved or not yet), else starts.
    """
    if job.get("mode") == "offline":
        return _deliver(job, journal, live=False)
    output = _deliver(job, journal, live=True)
    if output is None:
        asyncio.run(_person_approves(job))
        output = _deliver(job, journal, live=True)
    return output


# --- LangGraph: AsyncSqliteSaver --------------------------------------------------------------


async def _interrupt_async(job: dict[str, Any], journal: Any) -> Any:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    from redrive.integrations.langgraph import ainvoke

    acked = Path(job["workdir"]) / f"acked-{job['cell']}.log"
    done = acked.read_text().splitlines() if acked.exists() else []
    path = str(Path(job["workdir"]) / f"checkpoints-{job['cell']}.db")
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        graph = first._graph(job, saver, human=True)
        config = {"configurable": {"thread_id": "ticket-7"}}
        messages = [{"messages": [("user", PROMPT)]}, Command(resume="yes")]
        output: Any = None  # a message that stops at the interrupt finishes nothing
        for message in messages[len(done) :]:
            async with redrive.run(journal, job["run_id"]) as run:
                state = await ainvoke(graph, message, config)
                die_at("before_finish")
                output = run.finish(state["messages"][-1].content)
            with acked.open("a") as log:
                log.write(json.dumps({"output": output, "status": run.status}) + "\n")
    return json.loads(acked.read_text().splitlines()[-1])


def langgraph_interrupt_async(job: dict[str, Any], journal: Any) -> Any:
    """:func:`first.langgraph_interrupt` on ``AsyncSqliteSaver`` (two messages, one run id)."""
    if job.get("mode") == "offline":
        acked = Path(job["workdir"]) / f"acked-{job['cell']}.log"
        return json.loads(acked.read_text().splitlines()[-1])
    return asyncio.run(_interrupt_async(job, journal))


#: scenario name -> (driver, face)
STATE_DRIVERS: dict[str, tuple[Any, str]] = {
    "agents-approval-state": (agents_approval_state, "own"),
    "agents-approval-state-sync": (agents_approval_state, "own"),
    "agents-approval-state-stream": (agents_approval_state, "own"),
    "langgraph-interrupt-async": (langgraph_interrupt_async, "own"),
}
