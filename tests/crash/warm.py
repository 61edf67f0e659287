"""A warm parent that forks real worker processes with their imports already done.

``python -m tests.crash.warm MODULE...`` imports the modules (e.g. redrive's demo worker
and the OpenAI SDK: about 3 s of CPU per cold process), then forks one child per order
read on stdin. Each child is a real process of its own: it writes its pid to the order's
pid file if it names one, sets the order's environment and working directory, sends its
stdout and stderr to the order's files, calls the order's ``module.function(*args)`` and
exits with what it returns (0 for None); it may SIGKILL itself
at a crash point as a cold process would. The warm parent opens no journal and runs no
step, so what a child finds on disk is all it knows, as for a process started cold; it
is single-threaded (the children fork from a thread-free process). It waits for each
child and answers one JSON line: the child's pid and its exit status (``-9`` for a
SIGKILL), as :class:`subprocess.Popen` would report it.

:class:`WarmParent` is the test side. Used where a test's claim is about what a fresh
process does after a kill, not about the interpreter's start-up (the cold start of the
same entry point stays covered by a test that runs it with ``python -m``).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.crash.workerproc import Worker

ROOT = Path(__file__).resolve().parents[2]


def _child(order: dict[str, Any]) -> None:
    """In the forked child: run the order's function and exit with its code (never returns)."""
    code = 1
    try:
        if order.get("pidfile"):
            Path(order["pidfile"]).write_text(str(os.getpid()))
        os.environ.clear()
        os.environ.update(order["env"])
        os.chdir(order["cwd"])
        for fd, path in ((1, order["stdout"]), (2, order["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)  # not the warm parent's order pipe
        os.close(nothing)
        module_name, function_name = order["call"].split(":")
        function = getattr(importlib.import_module(module_name), function_name)
        code = int(function(*order["args"]) or 0)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(modules: list[str]) -> None:
    """Import ``modules``, then fork a child per JSON order on stdin; answer each on stdout."""
    for name in modules:
        importlib.import_module(name)
    running = [thread.name for thread in threading.enumerate()]
    if len(running) > 1:  # a fork copies no thread but the caller's: they would be missing
        raise SystemExit(f"the warm parent's imports started threads {running}: cannot fork")
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        order = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(order)
        print(json.dumps({"started": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"pid": pid, "returncode": _returncode(status)}), flush=True)


def _returncode(status: int) -> int:
    """The exit status as :attr:`subprocess.Popen.returncode` gives it (``-N`` for signal N)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class WarmParent:
    """The test side of a warm parent: :meth:`run` forks one child and waits for it.

    One order at a time (a lock), as the tests run their workers one after another.
    """

    def __init__(self, modules: list[str], env: dict[str, str] | None = None) -> None:
        environ = dict(os.environ if env is None else env)
        environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT), environ.get("PYTHONPATH")])
        )
        self.process = Worker("tests.crash.warm", environ, *modules)
        self._lock = threading.Lock()
        ready = self.process.read(timeout=600)  # the imports: long on a loaded machine
        assert "ready" in ready, ready

    def run(
        self,
        call: str,
        args: list[Any],
        *,
        env: dict[str, str],
        cwd: Path,
        files: Path,
        pidfile: Path | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Fork a child that runs ``call`` (``module:function``) on ``args``; wait for it.

        ``files`` is the stem of the child's ``.out`` and ``.err`` files; ``pidfile``, when
        given, holds the child's pid before it calls anything (for a killer outside it).

        Returns:
            What :func:`subprocess.run` would: the argv, exit status, stdout and stderr.

        Raises:
            AssertionError: the child said nothing for ``timeout`` s (it is killed).
        """
        out, err = files.with_suffix(".out"), files.with_suffix(".err")
        order = {
            "call": call,
            "args": args,
            "pidfile": str(pidfile) if pidfile else None,
            "env": env,
            "cwd": str(cwd),
            "stdout": str(out),
            "stderr": str(err),
        }
        with self._lock:
            self.process.send(json.dumps(order))
            child = self.process.read()["started"]
            try:
                answer = self.process.read(timeout=timeout)
            except AssertionError:
                os.kill(child, signal.SIGKILL)  # hung: it would outlive the test
                raise
        return subprocess.CompletedProcess(
            [call, *map(str, args)], answer["returncode"], out.read_text(), err.read_text()
        )

    def close(self) -> None:
        """Stop the warm parent (it exits when its stdin closes)."""
        self.process.stop()


if __name__ == "__main__":
    serve(sys.argv[1:])
