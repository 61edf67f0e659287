"""This machine's floor: what one durable write, one encode and one hash cost.

Also checks how many durable writes redrive makes per step (a side-effecting
tool step: 2; a model step: 0 of its own under group commit) by counting the
journal's ``append`` calls.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import msgpack
import xxhash

import redrive
from redrive.frames import decode, encode
from redrive.storage import MemoryJournal

from . import workload as w

__all__ = ["durable_writes", "machine_floor", "step_costs"]


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


class _Preallocated:
    """2 KB writes into a zero-filled, fsynced region + ``fdatasync``: the ``.rdlog`` write.

    The region grows 1 MB at a time (zero-filled and fsynced, untimed), as
    the log's preallocated tail does (:mod:`redrive.storage._framelog`).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.end = self.cap = 0

    def write(self, chunk: bytes) -> float:
        """Write ``chunk`` over zeros and fdatasync it; return the seconds that took."""
        if self.end + len(chunk) > self.cap:
            os.pwrite(self.fd, bytes(1 << 20), self.cap)
            os.fsync(self.fd)
            self.cap += 1 << 20
        t0 = time.perf_counter()
        os.pwrite(self.fd, chunk, self.end)
        _fdatasync(self.fd)
        self.end += len(chunk)
        return time.perf_counter() - t0

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


_fdatasync = getattr(os, "fdatasync", os.fsync)


def machine_floor(directory: str, *, rounds: int = 300) -> dict[str, float]:
    """Return medians in seconds: fsync of a 2 KB append, msgpack, canonical encode, xxh3.

    Keys: ``fsync_2k``, ``prealloc_fsync_2k`` (a 2 KB write into a
    zero-filled, fsynced region + fdatasync, as the DuckDB journal's log
    writes; timed in blocks of 20 alternating with the appends),
    ``group_fsync_per_frame`` (1,000 appends then one fsync, per frame),
    ``msgpack_2k`` (pack + unpack), ``canonical_2k`` (redrive's canonical
    encode + decode), ``xxh3_2k``.
    """
    frame = w.frame_2k()
    blob = msgpack.packb(frame)
    path = os.path.join(directory, "fsync.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    pre = _Preallocated(os.path.join(directory, "prealloc.bin"))
    chunk = blob[:2048].ljust(2048, b"\0")
    fsyncs: list[float] = []
    prealloc: list[float] = []
    try:
        for i in range(rounds):
            t0 = time.perf_counter()
            os.write(fd, chunk)
            os.fsync(fd)
            fsyncs.append(time.perf_counter() - t0)
            if i % 20 == 19:
                prealloc.extend(pre.write(chunk) for _ in range(20))
        groups = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(1000):
                os.write(fd, chunk)
            os.fsync(fd)
            groups.append((time.perf_counter() - t0) / 1000)
    finally:
        os.close(fd)
        os.unlink(path)
        pre.close()

    def each(fn: Any, count: int = 2000) -> float:
        samples = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(count):
                fn()
            samples.append((time.perf_counter() - t0) / count)
        return _median(samples)

    return {
        "fsync_2k": _median(fsyncs),
        "prealloc_fsync_2k": _median(prealloc),
        "group_fsync_per_frame": _median(groups),
        "frame_bytes": float(len(blob)),
        "msgpack_2k": each(lambda: msgpack.unpackb(msgpack.packb(frame))),
        "canonical_2k": each(lambda: decode(encode(frame))),
        "msgpack_pack_2k": each(lambda: msgpack.packb(frame)),
        "canonical_encode_2k": each(lambda: encode(frame)),
        "duckdb_connect": _duckdb_connect(directory),
        "xxh3_2k": each(lambda: xxhash.xxh3_128_hexdigest(blob), 20000),
    }


def _duckdb_connect(directory: str) -> float:
    """Median seconds of ``duckdb.connect`` + close of an existing small file (the open floor)."""
    import duckdb

    path = os.path.join(directory, "connect.duckdb")
    duckdb.connect(path).close()
    samples = []
    for _ in range(7):
        t0 = time.perf_counter()
        duckdb.connect(path).execute("SELECT 1").fetchall()
        samples.append(time.perf_counter() - t0)
    for suffix in ("", ".wal"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    return _median(samples)


def step_costs(directory: str, *, rounds: int = 10, steps: int = 20) -> dict[str, Any]:
    """Seconds per step on a DuckDB journal, each block next to an fsync block (issue 26).

    ``tool_step``: no-op side-effecting tool (claim + outcome: two fsyncs);
    ``model_step``: stub model with ``model_commit="write"`` (log write, no
    fsync). Each round times ``steps`` tool steps, then ``steps`` appends of
    2 KB + fsync on the same disk, then ``steps`` model steps, then another
    fsync block: the floor each block is compared with is sampled right next
    to it, not minutes earlier.

    Returns lists with one entry per round (seconds): ``tool_step``,
    ``model_step``, ``fsync_tool`` and ``fsync_model`` (the median fsync of
    the block after each), and ``prealloc_tool``: the median of ``steps``
    2 KB writes into a preallocated, zero-filled region + fdatasync (how the
    journal's log writes) right after each tool block's fsyncs.
    """
    from redrive.storage.duckdb import DuckDBJournal

    @redrive.model(name="model:stub-1")  # type: ignore[untyped-decorator]
    def model(request: dict[str, Any]) -> dict[str, Any]:
        return w.model_stub(request)

    @redrive.tool(name="apply_change", restart_safe=False)
    def tool(ref: str) -> dict[str, Any]:
        return w.tool_result(ref)

    path = os.path.join(directory, "steps.duckdb")
    journal = DuckDBJournal(path)
    sink = os.path.join(directory, "fsync-steps.bin")
    fd = os.open(sink, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    chunk = b"x" * 2048
    out: dict[str, list[float]] = {
        k: [] for k in ("tool_step", "model_step", "fsync_tool", "fsync_model", "prealloc_tool")
    }
    pre = _Preallocated(os.path.join(directory, "prealloc-steps.bin"))

    def fsyncs() -> float:
        samples = []
        for _ in range(steps):
            t0 = time.perf_counter()
            os.write(fd, chunk)
            os.fsync(fd)
            samples.append(time.perf_counter() - t0)
        return _median(samples)

    try:
        for r in range(rounds):
            with redrive.run(journal, f"tools-{r}"):
                tool("999999999")  # warm-up
                t0 = time.perf_counter()
                for i in range(steps):
                    tool(f"{i:09d}")
                out["tool_step"].append((time.perf_counter() - t0) / steps)
            out["fsync_tool"].append(fsyncs())
            out["prealloc_tool"].append(_median([pre.write(chunk) for _ in range(steps)]))
            with redrive.run(journal, f"models-{r}", model_commit="write"):
                model(w.model_request(0))
                t0 = time.perf_counter()
                for i in range(steps):
                    model(w.model_request(i + 1))
                out["model_step"].append((time.perf_counter() - t0) / steps)
            out["fsync_model"].append(fsyncs())
    finally:
        os.close(fd)
        os.unlink(sink)
        pre.close()
        journal.close()
    for suffix in ("", ".rdlog", ".wal"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    return dict(out)


def durable_writes(*, model_steps: int = 20) -> dict[str, float]:
    """Count journal appends: per tool step, and per model step under group commit and "each".

    Returns ``tool_step`` (appends per side-effecting tool step),
    ``model_step_group`` and ``model_step_each`` (extra appends per model step).
    """
    counts: dict[str, float] = {}

    @redrive.model(name="model:stub-1")  # type: ignore[untyped-decorator]
    def model(request: dict[str, Any]) -> dict[str, Any]:
        return w.model_stub(request)

    @redrive.tool(name="apply_change", restart_safe=False)
    def tool(ref: str) -> dict[str, Any]:
        return w.tool_result(ref)

    for commit in ("group", "each"):
        journal = w.CountingJournal(MemoryJournal())
        with redrive.run(journal, f"models-{commit}", model_commit=commit):
            for i in range(model_steps):
                model(w.model_request(i))
            tool("000000001")
        # create + claim + outcome + end = 4; anything more is the model steps' own writes
        counts[f"model_step_{commit}"] = (journal.appends - 4) / model_steps
    journal = w.CountingJournal(MemoryJournal())
    with redrive.run(journal, "tools"):
        for i in range(model_steps):
            tool(f"{i:09d}")
    counts["tool_step"] = (journal.appends - 2) / model_steps
    return counts


def growth(sizes: tuple[int, ...] = (10, 100, 1000)) -> dict[str, dict[int, float]]:
    """Journal bytes per step at each size: fixed 2 KB requests, and a growing conversation.

    The growing variant re-sends the whole conversation with every model
    request, as chat agents do (issue 7 item 3 measures the fix for it).
    """

    @redrive.model(name="model:stub-1")  # type: ignore[untyped-decorator]
    def model(request: dict[str, Any]) -> dict[str, Any]:
        return w.model_stub(request)

    @redrive.tool(name="apply_change", restart_safe=False)
    def tool(ref: str) -> dict[str, Any]:
        return w.tool_result(ref)

    out: dict[str, dict[int, float]] = {"fixed": {}, "conversation": {}}
    for n in sizes:
        journal = MemoryJournal()
        with redrive.run(journal, "fixed"):
            w.plain_loop(n, model, tool)
        out["fixed"][n] = w.journal_bytes(journal, "fixed") / n
        journal = MemoryJournal()
        with redrive.run(journal, "conversation"):
            messages: list[dict[str, Any]] = [{"role": "system", "content": w.SYSTEM}]
            for i in range(n // 2):
                messages.append(w.model_request(i)["messages"][-1])
                reply = model({"model": "stub-1", "messages": messages})
                messages.append(reply)
                result = tool(reply["tool_calls"][0]["arguments"]["ref"])
                messages.append({"role": "tool", "content": str(result)})
        out["conversation"][n] = w.journal_bytes(journal, "conversation") / n
    return out
