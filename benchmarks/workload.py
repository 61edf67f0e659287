"""The benchmark workload shared by every system: an agent loop of N steps.

A step is one model call or one tool call; the loop alternates them, so N
steps are N/2 model calls and N/2 tool calls. Each model request is about
2 KB (a system prompt plus a user message that changes every step), each
model reply is a short tool call, and each tool result is about 2 KB. The
model is a stub and the tools do no work, so what is measured is the
recording machinery, not the model.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import redrive
from redrive.frames import Frame
from redrive.storage import Journal

__all__ = [
    "CountingJournal",
    "LiveCallReached",
    "frame_2k",
    "journal_bytes",
    "model_request",
    "model_stub",
    "plain_loop",
    "redrive_loop",
    "tool_result",
]

_FILLER = (
    "The customer asked about the refund policy for a delayed shipment and wants to know "
    "whether the express fee is returned as well. Check the order, the carrier events and "
    "the policy version that applied on the order date before you answer. "
) * 12
SYSTEM = "You are a support agent. Use the tools; answer briefly. " * 8


def _text(i: int, size: int) -> str:
    return (f"[step {i:09d}] " + _FILLER)[:size]


def model_request(i: int) -> dict[str, Any]:
    """Return the i-th model request: about 2 KB of OpenAI-style chat messages."""
    return {
        "model": "stub-1",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": _text(i, 1550)},
        ],
        "temperature": 0.0,
    }


def frame_2k() -> dict[str, Any]:
    """The 2 KB model-request frame, as a plain map, that the msgpack floors are taken on."""
    return {
        "run_id": "bench:1",
        "seq": 7,
        "kind": "model_request",
        "name": "model:stub-1",
        "key": "0" * 32,
        "chain": "f" * 32,
        "payload": model_request(7),
    }


def model_stub(request: dict[str, Any]) -> dict[str, Any]:
    """The model: answers every request with one small tool call (no work)."""
    step = request["messages"][-1]["content"][6:15]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call_{step}", "name": "apply_change", "arguments": {"ref": step}}],
    }


def tool_result(ref: str) -> dict[str, Any]:
    """The tool's result for ``ref``: about 2 KB of plain data (no work)."""
    return {"ok": True, "ref": ref, "detail": _text(int(ref), 1990)}


def plain_loop(
    n: int,
    call_model: Callable[[dict[str, Any]], dict[str, Any]],
    call_tool: Callable[[str], dict[str, Any]],
    *,
    start: int = 0,
) -> int:
    """Run the loop for ``n`` steps (n/2 model + n/2 tool calls) from pair ``start``.

    Returns:
        The number of steps run.
    """
    pairs = n // 2
    checksum = 0
    for i in range(start, start + pairs):
        reply = call_model(model_request(i))
        result = call_tool(reply["tool_calls"][0]["arguments"]["ref"])
        checksum += len(result["detail"])
    return pairs * 2 if checksum >= 0 else 0


class LiveCallReached(KeyboardInterrupt):
    """Raised by the resume benchmark's model stub at the first live call.

    A ``KeyboardInterrupt``, as a process stopped there (a signal, a timeout,
    a deploy) leaves the run: ``running`` and resumable, with nothing more
    written. (An ``Exception`` would be a transient error that outlasted its
    retries: the run would stop ``paused``, and each resume write its notes.)
    """


@redrive.model(name="model:stub-1")  # type: ignore[untyped-decorator]
def _model(request: dict[str, Any]) -> dict[str, Any]:
    return _MODEL_IMPL(request)


@redrive.tool(name="apply_change", restart_safe=False)
def _tool(ref: str) -> dict[str, Any]:
    return tool_result(ref)


_MODEL_IMPL: Callable[[dict[str, Any]], dict[str, Any]] = model_stub


def set_model(impl: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Replace the model behind the redrive-wrapped stub (the resume benchmark stops it)."""
    global _MODEL_IMPL
    _MODEL_IMPL = impl


def redrive_loop(n: int) -> int:
    """The workload through redrive's recorders (call inside ``redrive.run``)."""
    return plain_loop(n, _model, _tool)


class CountingJournal:
    """A journal proxy that counts durable writes (``append`` and ``create_run`` calls)."""

    def __init__(self, inner: Journal) -> None:
        self.inner = inner
        self.appends = 0
        self.frames_written = 0
        self.url = inner.url
        self.durable = inner.durable
        self.read_only = inner.read_only

    def create_run(self, record: Any, first: Frame) -> bool:
        """Count and forward."""
        self.appends += 1
        self.frames_written += 1
        return self.inner.create_run(record, first)

    def append(self, run_id: str, frames: Any, **kwargs: Any) -> None:
        """Count and forward."""
        self.appends += 1
        self.frames_written += len(frames)
        self.inner.append(run_id, frames, **kwargs)

    def frames(self, run_id: str, *, start: int = 0) -> Iterator[Frame]:
        """Forward."""
        return self.inner.frames(run_id, start=start)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def journal_bytes(journal: Journal, run_id: str) -> int:
    """Return the stored bytes of a run's frames (payload plus fixed fields)."""
    total = 0
    for frame in journal.frames(run_id):
        total += len(frame.payload) + len(frame.key) + len(frame.chain) + len(frame.name)
        total += len(frame.run_id) + len(frame.kind) + 16
    return total


def file_size(path: str) -> int:
    """Return the size in bytes of ``path`` plus its ``-wal``/``.wal`` siblings."""
    total = 0
    for p in (path, path + ".wal", path + "-wal", path + "-shm"):
        if os.path.exists(p):
            total += os.path.getsize(p)
    return total


def timed(fn: Callable[[], object]) -> float:
    """Return the seconds ``fn()`` took (perf_counter)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
