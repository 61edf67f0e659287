"""One system, one measurement: ``python -m benchmarks.peers SYSTEM MEASURE N DIR``.

Prints one JSON object on the last line of stdout. The orchestrator
(:mod:`benchmarks.run`) calls this in a fresh process per measurement, so
peak memory and start-up costs are not shared between systems.

Measures:
    record     run the N-step loop live (plain calls timed just before, in this process).
    replay     record N steps, then re-drive the loop over the finished run.
    interrupt  record N steps, then stop at the first step after N (a crash or a
               resumable stop), leaving the run resumable for ``resume``.
    resume     open the journal and resume the run left by ``interrupt``; time from
               opening to the first live call (step N+1).
    prepare    build a recorded run of N steps for ``peak`` (bulk, not timed).
    peak       replay the run built by ``prepare``; report peak memory growth.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import workload as w

RESULT_FILE = "result.json"


def _rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _plain(n: int) -> float:
    return w.timed(lambda: w.plain_loop(n, w.model_stub, w.tool_result))


def _exit_with(result: dict[str, Any], directory: str) -> None:
    """Write the result where the orchestrator finds it and end the process at once."""
    with open(os.path.join(directory, RESULT_FILE), "w") as fh:
        json.dump(result, fh)
    os._exit(0)


# -- redrive ---------------------------------------------------------------------


def _redrive_url(system: str, directory: str) -> str:
    if system == "redrive-duckdb":
        return os.path.join(directory, "journal.duckdb")
    if system == "redrive-memory":
        return ":memory:"
    return os.environ.get("REDRIVE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _run_id(directory: str, n: int) -> str:
    path = os.path.join(directory, f"run-id-{n}")
    if not os.path.exists(path):
        with open(path, "w") as fh:
            fh.write(f"bench:{n}:{uuid.uuid4().hex[:12]}")
    with open(path) as fh:
        return fh.read()


def redrive_measure(system: str, measure: str, n: int, directory: str) -> dict[str, Any]:
    """Measure redrive on DuckDB, memory or Postgres (see the module docstring)."""
    import redrive

    url = _redrive_url(system, directory)
    run_id = _run_id(directory, n)
    if measure == "record":
        plain = _plain(n)
        journal: Any = w.CountingJournal(redrive.open_journal(url))

        def record() -> None:
            with redrive.run(journal, run_id + ":rec", input={"n": n}):
                w.redrive_loop(n)

        took = w.timed(record)
        size = w.journal_bytes(journal, run_id + ":rec")
        journal.close()
        result = {
            "plain_s": plain,
            "record_s": took,
            "bytes": size,
            "durable_writes": journal.appends,
        }
        if system == "redrive-duckdb":
            result["file_bytes"] = w.file_size(url)
        return result
    if measure == "replay":
        journal = redrive.open_journal(url)
        with redrive.run(journal, run_id + ":rep", input={"n": n}):
            w.redrive_loop(n)
        plain = _plain(n)
        before = _rss_kb()

        def replay() -> None:
            with redrive.run(journal, run_id + ":rep", input={"n": n}) as run:
                w.redrive_loop(n)
            assert run.live_steps == 0 and run.replayed_steps == n, run

        took = w.timed(replay)
        journal.close()
        return {"plain_s": plain, "replay_s": took, "peak_kb": _rss_kb() - before}
    if measure in ("interrupt", "resume"):
        live_at = n // 2
        stamp: dict[str, float] = {}

        def stop_at_live(request: dict[str, Any]) -> dict[str, Any]:
            if int(request["messages"][-1]["content"][6:15]) >= live_at:
                stamp.setdefault("live", time.perf_counter())
                raise w.LiveCallReached(f"step {n}: first live call")
            return w.model_stub(request)

        w.set_model(stop_at_live)
        if measure == "interrupt" or system == "redrive-memory":
            journal = redrive.open_journal(url)
            try:
                with redrive.run(journal, run_id + ":res", input={"n": n}):
                    w.redrive_loop(n + 2)
            except w.LiveCallReached:
                pass
            if measure == "interrupt":
                journal.close()
                return {}
            stamp.clear()
            reopen: Callable[[], Any] = lambda: journal  # noqa: E731 - the same memory journal
        else:
            reopen = lambda: redrive.open_journal(url)  # noqa: E731
            # import the driver before the clock starts, as the peers do (LangGraph
            # imports sqlite3 and its saver first): a worker pays imports once
            if system == "redrive-duckdb":
                import redrive.storage.duckdb
            else:
                import redrive.storage.postgres
        t0 = time.perf_counter()
        journal = reopen()
        try:
            with redrive.run(journal, run_id + ":res", input={"n": n}):
                w.redrive_loop(n + 2)
        except w.LiveCallReached:
            pass
        journal.close()
        return {"resume_s": stamp["live"] - t0}
    if measure == "prepare":
        _prepare_redrive(url, run_id + ":big", n)
        return {}
    if measure == "peak":
        return _peak_redrive(url, run_id + ":big", n)
    raise ValueError(f"unknown measure {measure!r}")


def _prepare_redrive(url: str, run_id: str, n: int) -> None:
    """Record n steps in memory, then copy the frames to ``url`` in large batches."""
    import redrive
    from redrive.storage import MemoryJournal

    memory = MemoryJournal()
    with redrive.run(memory, run_id, input={"n": n}):
        w.redrive_loop(n)
    record = memory.get_run(run_id)
    assert record is not None
    target = redrive.open_journal(url)
    frames = memory.frames(run_id)
    first = next(frames)
    import attrs

    start = attrs.evolve(record, next_seq=0, last_chain="0" * 32, status="running", output=None)
    target.create_run(start, first)
    batch: list[Any] = []
    seq = 1
    from redrive.storage import RunUpdate

    for frame in frames:
        batch.append(frame)
        if len(batch) == 5000:
            target.append(run_id, batch, expected_seq=seq)
            seq += len(batch)
            batch = []
    target.append(
        run_id,
        batch,
        expected_seq=seq,
        update=RunUpdate(status=record.status, output=record.output),
    )
    target.close()


def _peak_redrive(url: str, run_id: str, n: int) -> dict[str, Any]:
    import redrive

    journal = redrive.open_journal(url)
    before = _rss_kb()
    t0 = time.perf_counter()
    with redrive.run(journal, run_id, input={"n": n}) as run:
        w.redrive_loop(n)
    took = time.perf_counter() - t0
    assert run.live_steps == 0 and run.replayed_steps == n, run
    frames = run.journal.get_run(run_id)
    journal.close()
    return {
        "replay_s": took,
        "peak_kb": _rss_kb() - before,
        "frames": frames.next_seq if frames else 0,
    }


# -- DBOS ------------------------------------------------------------------------


def dbos_measure(measure: str, n: int, directory: str) -> dict[str, Any]:
    """Measure DBOS with a SQLite system database, each model/tool call a DBOS step."""
    from dbos import DBOS, SetWorkflowID

    db = os.path.join(directory, "dbos.sqlite")
    live_at = n // 2
    stamp: dict[str, float] = {}
    mode = {"stop": measure in ("interrupt", "resume")}

    @DBOS.step()  # type: ignore[untyped-decorator, unused-ignore]
    def dbos_model(request: dict[str, Any]) -> dict[str, Any]:
        if mode["stop"] and int(request["messages"][-1]["content"][6:15]) >= live_at:
            if measure == "interrupt":
                os._exit(0)  # the worker dies; the workflow stays PENDING
            now = time.perf_counter()
            # start-up (DBOS() + launch) is reported apart from the recovery itself
            _exit_with(
                {"resume_s": now - stamp["t0"], "startup_s": stamp["launched"] - stamp["t0"]},
                directory,
            )
        return w.model_stub(request)

    @DBOS.step()  # type: ignore[untyped-decorator, unused-ignore]
    def dbos_tool(ref: str) -> dict[str, Any]:
        return w.tool_result(ref)

    @DBOS.workflow()  # type: ignore[untyped-decorator, unused-ignore]
    def agent(steps: int) -> int:
        return w.plain_loop(steps, dbos_model, dbos_tool)

    stamp["t0"] = time.perf_counter()
    DBOS(
        config={
            "name": "redrive-bench",
            "system_database_url": f"sqlite:///{db}",
            "log_level": "ERROR",
        }
    )
    DBOS.launch()  # on resume, DBOS recovers the pending workflow in the background
    stamp["launched"] = time.perf_counter()
    if measure == "resume":
        time.sleep(600)
        raise RuntimeError("DBOS did not resume the pending workflow within 600 s")
    wid = f"bench-{n}-{measure}"
    if measure == "interrupt":
        with SetWorkflowID(wid):
            agent(n + 2)
        raise RuntimeError("the interrupted workflow finished")
    if measure == "record":
        plain = _plain(n)
        size0 = w.file_size(db)

        def record() -> None:
            with SetWorkflowID(wid):
                agent(n)

        took = w.timed(record)
        DBOS.destroy()
        return {"plain_s": plain, "record_s": took, "file_bytes": w.file_size(db) - size0}
    raise ValueError(f"DBOS: unsupported measure {measure!r}")


# -- LangGraph -------------------------------------------------------------------


def langgraph_measure(measure: str, n: int, directory: str) -> dict[str, Any]:
    """Measure LangGraph with SqliteSaver (durability="sync"), each call a graph node."""
    import sqlite3
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver

    from .messages import agent_graph

    class State(TypedDict, total=False):
        i: int
        n: int
        reply: dict[str, Any]
        result: dict[str, Any]

    live_at = n // 2
    t0 = time.perf_counter()

    def model_node(state: State) -> State:
        i = state["i"]
        if measure in ("interrupt", "resume") and i >= live_at:
            if measure == "interrupt":
                os._exit(0)
            _exit_with({"resume_s": time.perf_counter() - t0}, directory)
        return {"reply": w.model_stub(w.model_request(i))}

    def tool_node(state: State) -> State:
        ref = state["reply"]["tool_calls"][0]["arguments"]["ref"]
        return {"result": w.tool_result(ref), "i": state["i"] + 1}

    graph = agent_graph(State, model_node, tool_node)
    db = os.path.join(directory, "langgraph.sqlite")
    conn = sqlite3.connect(db, check_same_thread=False)
    app = graph.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": f"bench-{n}"}, "recursion_limit": n + 20}
    if measure == "resume":
        app.invoke(None, config, durability="sync")
        raise RuntimeError("LangGraph finished without reaching the live step")
    if measure == "interrupt":
        app.invoke({"i": 0, "n": n + 2}, config, durability="sync")
        raise RuntimeError("the interrupted graph finished")
    if measure == "record":
        plain = _plain(n)
        size0 = w.file_size(db)
        took = w.timed(lambda: app.invoke({"i": 0, "n": n}, config, durability="sync"))
        conn.close()
        return {"plain_s": plain, "record_s": took, "file_bytes": w.file_size(db) - size0}
    raise ValueError(f"LangGraph: unsupported measure {measure!r}")


# -- vcrpy -----------------------------------------------------------------------


def vcrpy_measure(measure: str, n: int, directory: str, *, match_body: bool) -> dict[str, Any]:
    """Measure vcrpy recording then replaying the model's HTTP calls (tools: plain calls)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import httpx
    import vcr

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            data = json.dumps(w.model_stub(json.loads(body))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
    client = httpx.Client()

    def http_model(request: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = client.post(url, json=request).json()
        return reply

    cassette = os.path.join(directory, f"cassette-{n}.yaml")
    matchers = ["method", "scheme", "host", "port", "path", "query"]
    if match_body:
        matchers.append("body")
    recorder = vcr.VCR(match_on=matchers)
    w.plain_loop(4, http_model, w.tool_result)  # warm the connection
    plain = w.timed(lambda: w.plain_loop(n, http_model, w.tool_result))

    def record() -> None:
        with recorder.use_cassette(cassette, record_mode="all"):
            w.plain_loop(n, http_model, w.tool_result)

    took = w.timed(record)
    if measure == "record":
        return {"plain_s": plain, "record_s": took, "file_bytes": os.path.getsize(cassette)}
    server.shutdown()
    before = _rss_kb()

    def replay() -> None:
        with recorder.use_cassette(cassette, record_mode="none"):
            w.plain_loop(n, http_model, w.tool_result)

    took = w.timed(replay)
    return {"plain_s": plain, "replay_s": took, "peak_kb": _rss_kb() - before}


# -- entry point -----------------------------------------------------------------


def measure(system: str, what: str, n: int, directory: str) -> dict[str, Any]:
    """Run one measurement of one system; return its figures (seconds, bytes, KB)."""
    if system.startswith("redrive-"):
        return redrive_measure(system, what, n, directory)
    if system == "dbos":
        return dbos_measure(what, n, directory)
    if system == "langgraph":
        return langgraph_measure(what, n, directory)
    if system in ("vcrpy", "vcrpy-body"):
        return vcrpy_measure(what, n, directory, match_body=system == "vcrpy-body")
    raise ValueError(f"unknown system {system!r}")


def main(argv: list[str]) -> None:
    """``python -m benchmarks.peers SYSTEM MEASURE N DIR``: print the figures as JSON."""
    system, what, n, directory = argv[0], argv[1], int(argv[2]), argv[3]
    result = measure(system, what, n, directory)
    with open(os.path.join(directory, RESULT_FILE), "w") as fh:
        json.dump(result, fh)
    sys.stdout.flush()
    os._exit(0)  # skip library atexit hooks (DBOS, thread pools): the figures are written


if __name__ == "__main__":
    main(sys.argv[1:])
