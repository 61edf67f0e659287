"""Replayed tests at scale: 1,000 pytest tests, each replaying a recorded 6-step agent run.

Usage: ``python -m benchmarks.pytest_scale [--tests N]`` (prints JSON figures and a line).

Three suites of the same N tests, each test running one agent loop of 3 model
calls and 3 tool calls (~2 KB requests), each in a fresh ``pytest`` process:

- **stub**: the model is a stub function; nothing is recorded (the floor);
- **redrive**: the pytest plugin, each test with its own journal file
  (``journals/<module>/<test>.rdj``), recorded once, timed replaying
  (``--redrive-record-mode none``);
- **vcrpy**: pytest-recording cassettes of the same model traffic sent over HTTP
  to a local server, recorded once, timed replaying (``--record-mode none``);
  skipped, and said so, when pytest-recording is not installed.

Reported: wall seconds per suite and the added cost per test against the stub
suite (``(suite - stub) / N``). The goal (issue 14): redrive's added cost per
test at most 1 ms and below vcrpy's.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Any

_LOOP = """
SYSTEM = "You are a support agent. Use the tools; answer briefly. " * 8


def request(i, n):
    return {{"model": "stub-1", "messages": [{{"role": "system", "content": SYSTEM}},
            {{"role": "user", "content": f"[test {{n}} step {{i}}] " + "refund policy? " * 60}}]}}


def agent(n, model, tool):
    out = []
    for i in range(3):
        reply = model(request(i, n))
        out.append(tool(reply["ref"]))
    return out
"""

_STUB = (
    _LOOP
    + """

def model(req):
    return {{"ref": req["messages"][-1]["content"][:24], "text": "ok " * 40}}


def tool(ref):
    return {{"ref": ref, "result": "done " * 300}}

{tests}
"""
)

_REDRIVE = (
    _LOOP
    + """
import pytest
import redrive


@redrive.model(name="model:stub-1")
def model(req):
    return {{"ref": req["messages"][-1]["content"][:24], "text": "ok " * 40}}


@redrive.tool(name="lookup", read_only=True)
def tool(ref):
    return {{"ref": ref, "result": "done " * 300}}

{tests}
"""
)

_VCR = (
    _LOOP
    + """
import json
import os
import urllib.request

import pytest

URL = os.environ["BENCH_MODEL_URL"]


def model(req):
    data = json.dumps(req).encode()
    http = urllib.request.Request(URL, data=data, headers={{"Content-Type": "application/json"}})
    with urllib.request.urlopen(http) as resp:
        return json.loads(resp.read())


def tool(ref):
    return {{"ref": ref, "result": "done " * 300}}

{tests}
"""
)


def _tests(n: int, kind: str) -> str:
    mark = {
        "stub": "",
        "redrive": '@pytest.mark.redrive(record_mode="once")\n',
        "vcr": "@pytest.mark.vcr\n",
    }[kind]
    arg = "redrive_run" if kind == "redrive" else ""
    return "\n".join(
        f"{mark}def test_{i}({arg}):\n    assert len(agent({i}, model, tool)) == 3\n"
        for i in range(n)
    )


class _Model(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"ref": req["messages"][-1]["content"][:24], "text": "ok " * 40}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _pytest(directory: str, extra: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *extra, directory],
        capture_output=True,
        text=True,
        env=env,
        cwd=directory,
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"pytest in {directory} failed: {' | '.join(tail)}")
    return took


def _suite(root: str, kind: str, n: int) -> str:
    directory = os.path.join(root, kind)
    os.makedirs(directory)
    template = {"stub": _STUB, "redrive": _REDRIVE, "vcr": _VCR}[kind]
    with open(os.path.join(directory, f"test_{kind}_scale.py"), "w") as fh:
        fh.write(textwrap.dedent(template.format(tests=_tests(n, kind))))
    return directory


def measure(n: int, rounds: int = 3) -> dict[str, Any]:
    """Run the three suites; return seconds per suite, added ms per test, and skips.

    Each suite's timed pass runs ``rounds`` times, interleaved with the others
    (the machine's load drifts), and the fastest pass counts.
    """
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.pop("REDRIVE_JOURNAL", None)
    out: dict[str, Any] = {"tests": n, "skipped": {}, "rounds": rounds}
    with tempfile.TemporaryDirectory(prefix="redrive-pytest-scale-") as root:
        suites: dict[str, tuple[str, list[str]]] = {"stub": (_suite(root, "stub", n), [])}
        directory = _suite(root, "redrive", n)
        _pytest(directory, ["--redrive-record-mode", "once"], env)  # record (untimed)
        suites["redrive"] = (directory, ["--redrive-record-mode", "none"])
        try:
            import pytest_recording  # noqa: F401
        except ImportError as exc:
            out["skipped"]["vcrpy"] = f"pytest-recording not installed ({exc})"
        else:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Model)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            env["BENCH_MODEL_URL"] = f"http://127.0.0.1:{server.server_address[1]}/v1/chat"
            directory = _suite(root, "vcr", n)
            _pytest(directory, ["--record-mode", "once"], env)
            server.shutdown()  # replay must not reach it
            suites["vcrpy"] = (directory, ["--record-mode", "none"])
        for _ in range(rounds):
            for name, (directory, extra) in suites.items():
                took = _pytest(directory, extra, env)
                out[f"{name}_s"] = min(out.get(f"{name}_s", took), took)
    for system in ("redrive", "vcrpy"):
        if f"{system}_s" in out:
            out[f"{system}_added_ms"] = (out[f"{system}_s"] - out["stub_s"]) / n * 1e3
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the figures (JSON) and one summary line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--tests", type=int, default=1000)
    args = parser.parse_args(argv)
    result = measure(args.tests)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
