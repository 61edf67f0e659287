

# --- kill: SIGKILL a resume of the subgraph graph (SqliteSaver) inside the charge-free ask node,
# then resume again in a fresh process.
_KCHILD = """
import sys, os, sqlite3, signal
sys.path.insert(0, sys.argv[4])
from pathlib import Path
import redrive
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from tests.integrations.test_outside27_scratch import _subgraph_graph, _deliver
base, work, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
saver = SqliteSaver(sqlite3.connect(str(work / "cp.db"), check_same_thread=False))
graph = _subgraph_graph(base, work / "effects.log", saver)
if mode == "kill":
    import langgraph.graph.state as _s
    orig = graph.nodes["after"].bound.invoke
    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)
    graph.nodes["after"].bound.invoke = die
msg = {"messages": [("user", "x")]} if mode == "start" else Command(resume="yes")
run = _deliver(redrive.open_journal(str(work / "runs.duckdb")), graph, msg, "sync")
print(run.status)
"""


def test_subgraph_kill_during_resume(server: HoldingServer, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    server.add(chat(True), chat(True))
    root = str(Path(__file__).resolve().parents[2])

    def child(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _KCHILD, server.url + "/v1", str(tmp_path), mode, root],
            cwd=root, env={**os.environ, "PYTHONPATH": root}, capture_output=True, text=True, timeout=300,
        )

    first = child("start")
    assert first.stdout.strip().endswith("suspended"), first.stderr[-2000:]
    killed = child("kill")
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-2000:])
    done = child("resume")
    assert done.stdout.strip().endswith("succeeded"), done.stderr[-3000:]
    assert _lines(tmp_path / "effects.log") == ["charge 1"]
    assert len(server.requests) == 1
