"""One delivery of a LangGraph human-in-the-loop job in a child process that may die mid-draw.

Usage: ``python -m tests.integrations.lg_kill_child JOB.json`` (or
``tests.integrations.lg_kill_child:main`` from a warm parent,
tests/crash/warm.py). The job names the journal, the ``SqliteSaver`` file,
the side-effect log (outside the process), the scripted server, the model's
parallel tool calls and the graph's layout (:func:`tests.integrations.lg_graphs.approval_graph`:
``ask_N`` asks a person, then draws ``N``; ``charge_N`` draws ``N`` at once;
``per_call``: a task per call), the face (``sync``: ``invoke``, ``async``:
``ainvoke``) and the message: ``null`` (the first delivery) or ``{interrupt
id: answer}`` (``Command(resume=...)``). The child runs the delivery in
``redrive.run(journal, "job:7")`` and prints one JSON line: the run's status
and output and the interrupts pending after it, or the error.

A draw is a ``restart_safe=False`` redrive tool whose body appends ``draw N
key=<idempotency key>`` to the log (fsynced), then, when the job's ``kill``
is ``N``, SIGKILLs this process: the side effect happened, its result is not
journaled (the step is in flight). With ``recover`` set, its ``recover()``
looks the key up in the log, as one asks a payment provider.

``lose`` makes the checkpointer lose every checkpoint after the first
``ToolNode`` in this delivery (the process dies before it lands).

``waits`` forces an order of the parallel calls: ``{point: other}`` makes the
call at ``point`` (a call's name as it begins, or ``draw_N`` before the
draw's step) wait, at most :data:`HOLD` seconds (or the job's ``hold``),
until ``other`` was reached, or, for ``other == "returned"``, until the
graph returned and the run's block ended (the call begins late: refused,
nothing runs).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import redrive

CONFIG = {"configurable": {"thread_id": "ticket-7"}}
RUN_ID = "job:7"
#: the longest a forced wait holds a call by default (seconds); reaching it only loosens the order
HOLD = 10.0


class Draws:
    """The side-effect log outside the process (one fsynced line per draw), and the order."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.path: str = job["effects"]
        self.kill: int | None = job.get("kill")
        self.recovers = bool(job.get("recover"))
        self.waits: dict[str, str] = job.get("waits") or {}
        self.hold = float(job.get("hold") or HOLD)
        self.reached: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.run: Any = None

    def _event(self, point: str) -> threading.Event:
        with self.lock:
            return self.reached.setdefault(point, threading.Event())

    def before(self, point: str) -> None:
        """A call reached ``point``: wait for what the job orders first, then say so."""
        other = self.waits.get(point)
        if other is not None:
            self._event(other).wait(self.hold)
            if other == "returned":
                until = time.monotonic() + self.hold
                while self.run is not None and self.run.status == "running":
                    if time.monotonic() > until:
                        break
                    time.sleep(0.01)
        self._event(point).set()

    def returned(self) -> None:
        """The graph's invoke returned."""
        self._event("returned").set()

    def draw(self, number: int) -> str:
        """Draw ``number`` (append its line), then maybe die with the result unjournaled."""
        key = redrive.idempotency_key()
        with open(self.path, "a") as log:
            log.write(f"draw {number} key={key}\n")
            log.flush()
            os.fsync(log.fileno())
        if self.kill == number:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"drew {number}"

    def recover(self, args: dict[str, Any], key: str) -> redrive.Recovery:
        """Settle an in-flight draw: drawn when the log holds its key."""
        lines = Path(self.path).read_text().splitlines() if Path(self.path).exists() else []
        for line in lines:
            if line.endswith(f" key={key}"):
                return redrive.Recovery.done(f"drew {line.split()[1]}")
        return redrive.Recovery.not_done()

    def graph(self, job: dict[str, Any], saver: Any, clients: list[Any]) -> Any:
        from tests.integrations.lg_graphs import approval_graph

        return approval_graph(
            job["base"],
            job["calls"],
            self.draw,
            saver,
            clients,
            self.recover if self.recovers else None,
            per_call=bool(job.get("per_call")),
            before=self.before,
        )


def _losing(saver: Any) -> Any:
    """``saver``, losing every checkpoint after the first ``ToolNode`` (the process dies before
    it lands; the task writes saved before it stay): LangGraph then hands the ``ToolNode``'s
    writes back on the next resume instead of running it again.
    """

    def lost(config: Any, checkpoint: Any, metadata: Any) -> Any:
        step = (metadata or {}).get("step")
        if isinstance(step, int) and step >= 2:
            return {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}
        return None

    put, aput = saver.put, getattr(saver, "aput", None)

    def losing_put(config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        return lost(config, checkpoint, metadata) or put(config, checkpoint, metadata, versions)

    async def losing_aput(config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        found = lost(config, checkpoint, metadata)
        return found or await aput(config, checkpoint, metadata, versions)  # type: ignore[misc]

    saver.put = losing_put
    if aput is not None:
        saver.aput = losing_aput
    return saver


def _message(job: dict[str, Any]) -> Any:
    from langgraph.types import Command

    if job.get("resume") is None:
        return {"messages": [("user", "draw the shapes")]}
    return Command(resume=job["resume"])


def _pending(snapshot: Any) -> list[dict[str, str]]:
    return [{"id": str(i.id), "value": str(i.value)} for i in snapshot.interrupts]


def _sync(job: dict[str, Any], journal: Any, draws: Draws) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from redrive.integrations.langgraph import invoke

    conn = sqlite3.connect(job["checkpoints"], check_same_thread=False)
    clients: list[Any] = []
    try:
        saver = SqliteSaver(conn)
        graph = draws.graph(job, _losing(saver) if job.get("lose") else saver, clients)
        with redrive.run(journal, RUN_ID) as run:
            draws.run = run
            try:
                state = invoke(graph, _message(job), CONFIG)
            finally:
                draws.returned()
            run.finish(state["messages"][-1].content)
        return {
            "status": run.status,
            "output": run.output,
            "interrupts": _pending(graph.get_state(CONFIG)),
        }
    finally:
        for client in clients:
            if hasattr(client, "aclose"):
                asyncio.run(client.aclose())
            else:
                client.close()
        conn.close()


async def _async(job: dict[str, Any], journal: Any, draws: Draws) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from redrive.integrations.langgraph import ainvoke

    clients: list[Any] = []
    try:
        async with AsyncSqliteSaver.from_conn_string(job["checkpoints"]) as saver:
            graph = draws.graph(job, _losing(saver) if job.get("lose") else saver, clients)
            async with redrive.run(journal, RUN_ID) as run:
                draws.run = run
                try:
                    state = await ainvoke(graph, _message(job), CONFIG)
                finally:
                    draws.returned()
                run.finish(state["messages"][-1].content)
            pending = _pending(await graph.aget_state(CONFIG))
            return {"status": run.status, "output": run.output, "interrupts": pending}
    finally:
        for client in clients:
            if hasattr(client, "aclose"):
                await client.aclose()
            else:
                client.close()


def deliver(
    path: str,
    sync: Callable[[dict[str, Any], Any, Draws], dict[str, Any]],
    async_: Callable[[dict[str, Any], Any, Draws], Coroutine[Any, Any, dict[str, Any]]],
) -> None:
    """Run the delivery the JOB file at ``path`` describes on its face (``sync`` or
    ``async_``); print its JSON line (or the error's)."""
    job = json.loads(Path(path).read_text())
    draws = Draws(job)
    journal = redrive.open_journal(job["journal"])
    try:
        if job["face"] == "sync":
            line = sync(job, journal, draws)
        else:
            line = asyncio.run(async_(job, journal, draws))
    except Exception as exc:
        line = {"error": f"{type(exc).__name__}: {exc}"[:3000]}
    finally:
        journal.close()
    print(json.dumps(line, default=str), flush=True)


def main(path: str) -> None:
    """Run the delivery JOB describes; print its JSON line (or the error's)."""
    deliver(path, _sync, _async)


if __name__ == "__main__":
    main(sys.argv[1])
