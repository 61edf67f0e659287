"""Journal size with an accumulated-messages state: redrive against LangGraph's SQLite saver.

A chat agent re-sends the whole conversation with every model request. In
LangGraph the conversation is the graph state (a ``messages`` list with an
appending reducer) and every checkpoint stores it; redrive stores each model
request (deltas against the previous request of the run, see
:mod:`redrive.replay`) and each result. Both run the same N steps (N/2 model
+ N/2 tool calls, :mod:`benchmarks.workload`'s stubs) and report the bytes
on disk after closing.

Run: ``python -m benchmarks.messages SYSTEM N DIR`` (SYSTEM ``redrive`` or
``langgraph``); prints JSON ``{"file_bytes": ..., "record_s": ...}``.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from typing import Annotated, Any, TypedDict

from . import workload as w


def _user(i: int) -> dict[str, Any]:
    message: dict[str, Any] = w.model_request(i)["messages"][-1]
    return message


def redrive_size(n: int, directory: str) -> dict[str, float]:
    """Record N steps of a growing conversation on a DuckDB journal; bytes on disk."""
    import redrive

    path = os.path.join(directory, "messages.duckdb")
    t0 = time.perf_counter()
    journal = redrive.open_journal(path)
    with redrive.run(journal, "messages"):
        messages: list[dict[str, Any]] = [{"role": "system", "content": w.SYSTEM}]
        for i in range(n // 2):
            messages.append(_user(i))
            reply = w._model({"model": "stub-1", "messages": messages})
            messages.append(reply)
            messages.append(
                {
                    "role": "tool",
                    "content": str(w._tool(reply["tool_calls"][0]["arguments"]["ref"])),
                }
            )
    journal.close()
    return {
        "file_bytes": float(w.file_size(path) + w.file_size(path + ".rdlog")),
        "record_s": time.perf_counter() - t0,
    }


def agent_graph(state: Any, model_node: Any, tool_node: Any) -> Any:
    """The benchmark's LangGraph graph: model -> tool, looping while ``i < n // 2``."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(state)
    graph.add_node("model", model_node)
    graph.add_node("tool", tool_node)
    graph.add_edge(START, "model")
    graph.add_edge("model", "tool")
    graph.add_conditional_edges(
        "tool", lambda s: "model" if s["i"] < s["n"] // 2 else END, ["model", END]
    )
    return graph


def langgraph_size(n: int, directory: str) -> dict[str, float]:
    """Run N steps with the conversation as LangGraph state (SqliteSaver); bytes on disk."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    class State(TypedDict, total=False):
        messages: Annotated[list[dict[str, Any]], operator.add]
        i: int
        n: int

    def model_node(state: State) -> State:
        i = state["i"]
        request = {"model": "stub-1", "messages": [*state["messages"], _user(i)]}
        return {"messages": [_user(i), w.model_stub(request)]}

    def tool_node(state: State) -> State:
        ref = state["messages"][-1]["tool_calls"][0]["arguments"]["ref"]
        return {
            "messages": [{"role": "tool", "content": str(w.tool_result(ref))}],
            "i": state["i"] + 1,
        }

    graph = agent_graph(State, model_node, tool_node)
    db = os.path.join(directory, "messages.sqlite")
    t0 = time.perf_counter()
    conn = sqlite3.connect(db, check_same_thread=False)
    app = graph.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "messages"}, "recursion_limit": n + 20}
    start: State = {"messages": [{"role": "system", "content": w.SYSTEM}], "i": 0, "n": n}
    app.invoke(start, config, durability="sync")
    conn.close()
    return {"file_bytes": float(w.file_size(db)), "record_s": time.perf_counter() - t0}


def main(argv: list[str]) -> None:
    """``python -m benchmarks.messages SYSTEM N DIR``: print the figures as JSON."""
    system, n, directory = argv[0], int(argv[1]), argv[2]
    os.makedirs(directory, exist_ok=True)
    fn = redrive_size if system == "redrive" else langgraph_size
    print(json.dumps(fn(n, directory)))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
