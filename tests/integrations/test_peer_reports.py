"""Public bug reports on peers' trackers, turned into small inputs against redrive.

Each test names the report it comes from. The report is the shape of the
input (what an application does around the framework); the assertions are
redrive's claims for that shape (docs/framework-state.md, docs/plan-and-pause.md):

- openai/openai-agents-python#4827 and openai/openai-agents-js#701: a session
  together with a stored ``RunState`` approval. The session ends with one
  ``function_call`` and its one ``function_call_output``, none orphaned or
  duplicated, also after the finished run is replayed.
- openai/openai-agents-python#2658: ``state.reject(item, rejection_message=...)``
  on a stored state. The tool never runs and the model reads the reviewer's words.
- strands-agents/harness-sdk#3615 ("an approved tool runs twice"): the
  continuation stops on a 503 after the approved tool ran. The run pauses, and
  the same stored state continued again runs the tool once.
- pydantic/pydantic-ai#5113: an app's retry wrapper stores what a failed
  attempt said, so the retry re-sends a grown history. It gets a
  ``DivergenceError`` that names the grown history, and nothing is sent.
- langchain-ai/langgraph#8136 and openai/openai-agents-python#2854: SQLite's
  ``database is locked`` from a checkpointer or a session write pauses the run
  (``retries_exhausted``). It resumes once the lock is gone, with the effect
  once and the paid model call not asked again.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redrive
from tests.integrations.conftest import need
from tests.integrations.fakeapi import FINAL, chat
from tests.integrations.matrix_child import PROMPT
from tests.integrations.test_agents_run_state import _agent, _approve, _deliver
from tests.sdkserver import Reply, serve

BUSY = Reply(status=503, body={"error": {"message": "overloaded", "type": "server_error"}})


@pytest.fixture(autouse=True)
def _collect_the_sdks_loops() -> Iterator[None]:
    """Finalize the loops and clients the SDK leaves behind here (see the session guard)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _kinds(db: str) -> list[str]:
    import agents

    items = asyncio.run(agents.SQLiteSession("conv-1", db).get_items())
    return [str(item.get("type") or item.get("role")) for item in items]


def _deliver_with_session(
    journal: Any, run_id: str, url: str, tmp: Path, inner: Any = None, **options: Any
) -> Any:
    """One delivery with ``RecordedSession(SQLiteSession)``; store the state of a pause."""
    from redrive.integrations.openai_agents import RecordedSession

    agents, agent = _agent(url, tmp / "effects.log")
    store = tmp / "state.json"
    given: Any = PROMPT
    if store.exists():
        given = asyncio.run(agents.RunState.from_string(agent, store.read_text()))
    session = RecordedSession(inner or agents.SQLiteSession("conv-1", str(tmp / "chats.db")))

    async def deliver() -> Any:
        async with redrive.run(journal, run_id, **options) as run:
            result = await agents.Runner.run(agent, given, session=session)
            if result.interruptions:
                store.write_text(result.to_state().to_string())
                return None
            return run.finish(result.final_output)

    return asyncio.run(deliver())


def test_a_session_with_a_stored_approval_holds_the_call_and_its_output_once(
    tmp_path: Path,
) -> None:
    """openai/openai-agents-python#4827, openai/openai-agents-js#701."""
    need("agents")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    db, effects = str(tmp_path / "chats.db"), tmp_path / "effects.log"
    with serve() as server:
        server.add(chat(False), chat(True))
        url = server.url + "/v1"
        assert _deliver_with_session(journal, "s:1", url, tmp_path) is None
        record = journal.get_run("s:1")
        assert record is not None and record.status == "suspended"
        _approve(url, effects, tmp_path / "state.json")
        assert _deliver_with_session(journal, "s:1", url, tmp_path) == FINAL
        assert len(server.requests) == 2 and len(effects.read_text().splitlines()) == 1
        kinds = ["user", "function_call", "function_call_output", "message"]
        assert _kinds(db) == kinds
        # the finished run replayed offline writes nothing twice and runs nothing
        assert _deliver_with_session(journal, "s:1", url, tmp_path, live=False) == FINAL
        assert len(server.requests) == 2 and len(effects.read_text().splitlines()) == 1
        assert _kinds(db) == kinds
    journal.close()


def test_a_stored_rejection_reaches_the_model_and_the_tool_never_runs(tmp_path: Path) -> None:
    """openai/openai-agents-python#2658 (rejection messages across resume flows)."""
    need("agents")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects, store = tmp_path / "effects.log", tmp_path / "state.json"
    with serve() as server:
        server.add(chat(False), chat(True))
        url = server.url + "/v1"
        assert _deliver("async", journal, "r:1", url, effects, store) == ("suspended", None)
        agents, agent = _agent(url, effects)
        state = asyncio.run(agents.RunState.from_string(agent, store.read_text()))
        for item in state.get_interruptions():
            state.reject(item, rejection_message="A person declined this email.")
        store.write_text(state.to_string())
        assert _deliver("async", journal, "r:1", url, effects, store) == ("succeeded", FINAL)
        sent = json.loads(server.requests[1].body)["messages"]
        assert [m["content"] for m in sent if m["role"] == "tool"] == [
            "A person declined this email."
        ]
        replayed = _deliver("async", journal, "r:1", url, effects, store, live=False)
        assert replayed == ("succeeded", FINAL)
        assert len(server.requests) == 2 and not effects.exists()
    journal.close()


def test_a_continuation_paused_after_the_approved_tool_runs_it_once(tmp_path: Path) -> None:
    """strands-agents/harness-sdk#3615 (an approved tool runs twice on a stop after it)."""
    need("agents")
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    effects, store = tmp_path / "effects.log", tmp_path / "state.json"
    with serve() as server:
        server.add(chat(False), BUSY, chat(True))
        url = server.url + "/v1"
        assert _deliver("sync", journal, "p:1", url, effects, store) == ("suspended", None)
        _approve(url, effects, store)
        with pytest.raises(Exception, match=r"503|overloaded"):
            _deliver("sync", journal, "p:1", url, effects, store)
        record = journal.get_run("p:1")
        assert record is not None and record.status == "paused"
        assert len(effects.read_text().splitlines()) == 1
        # the same stored state, continued again: the tool's outcome is replayed
        assert _deliver("sync", journal, "p:1", url, effects, store) == ("succeeded", FINAL)
        assert len(server.requests) == 3 and len(effects.read_text().splitlines()) == 1
    journal.close()


def test_a_history_a_failed_attempt_stored_is_refused_with_the_grown_history(
    tmp_path: Path,
) -> None:
    """pydantic/pydantic-ai#5113 (retries re-send the full history; stored duplicates)."""
    need("pydantic")
    import pydantic_ai
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from tests.integrations import matrix_drivers, matrix_more

    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    store, effects = tmp_path / "history.json", tmp_path / "effects.log"
    with serve() as server:
        job = {
            "base_url": server.url + "/v1",
            "effects": str(effects),
            "workdir": str(tmp_path),
            "scenario": "pydantic-history",
        }
        server.add(chat(False), BUSY)

        async def attempt() -> Any:
            history = matrix_more._history(store)
            with pydantic_ai.capture_run_messages() as said:
                try:
                    async with redrive.run(journal, "ticket-9") as run:
                        agent = matrix_drivers._pydantic_agent(job)
                        try:
                            result = await agent.run("Email Ada.", message_history=history)
                        finally:
                            await agent.model.client.close()
                        return run.finish(result.output)
                except Exception:
                    # the app's retry wrapper keeps what the failed attempt said
                    store.write_bytes(ModelMessagesTypeAdapter.dump_json(list(said)))
                    raise

        with pytest.raises(Exception, match=r"503|overloaded"):
            asyncio.run(attempt())
        asked = len(server.requests)
        with pytest.raises(redrive.DivergenceError) as caught:
            asyncio.run(attempt())
        assert len(server.requests) == asked  # nothing sent
    told = str(caught.value)
    assert "$.body.messages holds the 4 recorded items, in order, and 3 more" in told
    assert "message_history" in told and "only after run.finish" in told
    assert len(effects.read_text().splitlines()) == 1
    journal.close()


def test_a_locked_langgraph_checkpoint_pauses_and_the_run_resumes(tmp_path: Path) -> None:
    """langchain-ai/langgraph#8136 (``database is locked`` in SqliteSaver writes)."""
    need("langchain")
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    from redrive.integrations import langgraph as rlg

    db, effects = str(tmp_path / "checkpoints.sqlite"), tmp_path / "effects.log"
    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    # the blocker waits for its lock (the saver may be mid-write when the node runs: with
    # timeout=0 its BEGIN EXCLUSIVE failed instead, raising the same "database is locked"
    # from the node, and the test's ROLLBACK then found no transaction); the saver's own
    # connection has timeout=0, so its next write finds the file locked
    blocker = sqlite3.connect(db, timeout=10, isolation_level=None)
    armed = [True]

    @redrive.tool(restart_safe=False)
    def send_email(to: str) -> str:
        with effects.open("a") as log:
            log.write(f"email to {to}\n")
        return "sent"

    class State(TypedDict):
        to: str
        done: str

    def act(state: State) -> dict[str, str]:
        out = send_email(state["to"])
        if armed:  # another writer takes the file: the saver's next write finds it locked
            armed.pop()
            blocker.execute("BEGIN EXCLUSIVE")
        return {"done": out}

    def deliver() -> Any:
        conn = sqlite3.connect(db, timeout=0, check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            builder = StateGraph(State)
            builder.add_node("act", act)
            builder.add_edge(START, "act")
            builder.add_edge("act", END)
            graph = builder.compile(checkpointer=saver)
            with redrive.run(journal, "lock:1") as run:
                config = {"configurable": {"thread_id": "t1"}}
                out = rlg.invoke(graph, {"to": "ada@example.com", "done": ""}, config)
                return run.finish(out["done"])
        finally:
            conn.close()

    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        deliver()
    record = journal.get_run("lock:1")
    assert record is not None and record.status == "paused"
    assert "retries_exhausted" in (record.error or "")
    blocker.execute("ROLLBACK")
    blocker.close()
    assert deliver() == "sent"
    assert effects.read_text().splitlines() == ["email to ada@example.com"]
    journal.close()


def test_a_locked_agents_session_write_pauses_and_the_paid_call_is_replayed(
    tmp_path: Path,
) -> None:
    """openai/openai-agents-python#2854 (transient SQLite locks in session writes)."""
    need("agents")
    import agents

    db = str(tmp_path / "chats.db")
    agents.SQLiteSession("conv-1", db)  # its tables
    # the blocker waits for its lock (the saver may be mid-write when the node runs: with
    # timeout=0 its BEGIN EXCLUSIVE failed instead, raising the same "database is locked"
    # from the node, and the test's ROLLBACK then found no transaction); the saver's own
    # connection has timeout=0, so its next write finds the file locked
    blocker = sqlite3.connect(db, timeout=10, isolation_level=None)
    writes: list[int] = []

    class LockedOnItsOutput(agents.SQLiteSession):
        async def add_items(self, items: list[Any]) -> None:
            writes.append(len(items))
            if len(writes) == 2:  # the model's answer, after the call was paid
                blocker.execute("BEGIN EXCLUSIVE")
            await super().add_items(items)

    journal = redrive.open_journal(str(tmp_path / "runs.duckdb"))
    with serve() as server:
        server.add(chat(True), chat(True))
        url = server.url + "/v1"
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            _deliver_with_session(journal, "sl:1", url, tmp_path, LockedOnItsOutput("conv-1", db))
        record = journal.get_run("sl:1")
        assert record is not None and record.status == "paused"
        assert "retries_exhausted" in (record.error or "") and len(server.requests) == 1
        blocker.execute("ROLLBACK")
        blocker.close()
        assert _deliver_with_session(journal, "sl:1", url, tmp_path) == FINAL
        assert len(server.requests) == 1  # the answer it paid for is replayed
    assert _kinds(db) == ["user", "message"]
    journal.close()
