"""``redrive check --jobs``: checking saved runs in worker processes, and how many.

Part of :mod:`._check`. ``jobs=N`` (N > 1) starts N workers. ``jobs=0`` is a
measured choice (:func:`choose_workers`), made after the first
:data:`PROBE_RUNS` runs are checked in this process:

- the per-run cost is the CPU seconds those runs took (the first one left
  out: it imports the entrypoint's modules, which forked workers inherit);
- the CPU this process got while checking them, against the wall time
  (:attr:`Probe.share`): under 80% of a core, the machine is busy and
  workers would queue behind the same processes;
- the other processes ready to run (Linux's ``/proc/loadavg``, sampled at
  each probed run; elsewhere the one-minute load average): a worker needs an
  idle core;
- starting a worker costs about :data:`FORK_START_S` (a copy of this
  process) or :data:`SPAWN_START_S` (a new interpreter that imports redrive
  and the entrypoints again, when threads are alive here).

Workers are used only when the cost model says they finish the remaining
runs in clearly less time than this process would (:func:`pool_seconds`
against ``runs x cost``, by at least :data:`MARGIN`): starting them costs
``workers x start``, and a forked worker checks a run about
:data:`WORKER_SLOWDOWN` times slower than this warm process (its first runs
touch copied memory, and the cores are shared). Otherwise the rest is
checked here too. The choice is an estimate: it never makes a result
differ, only the time.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import attrs


class Checked(Protocol):
    """What a check hands back, as this module reads it (``CheckResult``)."""

    @property
    def passed(self) -> bool: ...


R = TypeVar("R", bound=Checked)

__all__ = [
    "FORK_START_S",
    "PROBE_RUNS",
    "SPAWN_START_S",
    "Probe",
    "choose_workers",
    "pool_seconds",
    "run_checks",
    "usable_cores",
]

#: Runs checked in this process before ``jobs=0`` chooses (their cost is measured).
PROBE_RUNS = 4
#: Estimated wall seconds to start a forked worker (a copy of this process).
FORK_START_S = 0.05
#: Estimated wall seconds to start a spawned worker (a new interpreter importing redrive).
SPAWN_START_S = 1.0
#: Below this CPU share of one core while probing, the machine is busy: no worker.
BUSY_SHARE = 0.8
#: A run's cost in a forked worker over its cost in this warm process (measured
#: 1.3x to 2x on a 2-core machine: copy-on-write faults, cold caches, shared cores).
WORKER_SLOWDOWN = 1.5
#: The share of the in-process time workers must save to be chosen (the
#: estimate's noise: a choice inside it could lose to one process).
MARGIN = 0.2


@attrs.frozen
class Probe:
    """What checking the first runs here measured.

    Attributes:
        cpu_per_run: CPU seconds a run took (the first run left out when there are more).
        share: CPU seconds over wall seconds while checking them (1.0: a whole core).
        others: other processes ready to run (median of the samples).
    """

    cpu_per_run: float
    share: float
    others: float


def usable_cores() -> int:
    """The CPUs this process may run on."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return len(getaffinity(0)) if getaffinity is not None else (os.cpu_count() or 1)


def _others_ready() -> float:
    """Processes ready to run besides this one (``/proc/loadavg``; else the load average)."""
    try:
        with open("/proc/loadavg") as fh:
            runnable = int(fh.read().split()[3].split("/")[0])
        return float(max(0, runnable - 1))
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def pool_seconds(remaining: int, workers: int, cpu_per_run: float, start_s: float) -> float:
    """Estimated wall seconds for ``workers`` forked workers to check ``remaining`` runs.

    Args:
        remaining: runs to check.
        workers: worker processes (each on an idle core).
        cpu_per_run: CPU seconds a run took in this process.
        start_s: seconds to start one worker.

    Returns:
        ``workers x start_s`` plus the runs shared out, each
        :data:`WORKER_SLOWDOWN` times its cost here.
    """
    return workers * start_s + remaining * cpu_per_run * WORKER_SLOWDOWN / workers


def choose_workers(remaining: int, probe: Probe, *, cores: int, start_s: float) -> int:
    """Worker processes for ``remaining`` runs at ``jobs=0``; 1 means check them here.

    Args:
        remaining: runs still to check.
        probe: what checking the first runs measured.
        cores: CPUs this process may use.
        start_s: estimated seconds to start one worker.

    Returns:
        The count of workers, at most one per idle core, whose estimated time
        (:func:`pool_seconds`) is least and at most ``1 - MARGIN`` of
        ``remaining x probe.cpu_per_run`` (this process checking them); 1
        when no count is.
    """
    if remaining < 2 or probe.share < BUSY_SHARE:
        return 1
    idle = min(cores, max(1, round(cores - probe.others)))
    here = remaining * probe.cpu_per_run
    best, best_s = 1, here * (1 - MARGIN)
    for workers in range(2, min(idle, remaining) + 1):
        took = pool_seconds(remaining, workers, probe.cpu_per_run, start_s)
        if took < best_s:
            best, best_s = workers, took
    return best


def _start_method() -> str:
    # fork starts a worker without importing everything again (what makes small runs
    # pay); a process with other threads alive (a progress display, a pool) spawns
    return "fork" if threading.active_count() == 1 and os.name == "posix" else "spawn"


def _in_pool(
    paths: list[str],
    workers: int,
    import_paths: Sequence[str],
    fail_fast: bool,
    worker: Callable[[str, list[str]], R],
) -> Iterator[R]:
    chunk = max(1, len(paths) // (workers * 8))
    context = multiprocessing.get_context(_start_method())
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        results = pool.map(worker, paths, itertools.repeat(list(import_paths)), chunksize=chunk)
        for res in results:
            yield res
            if fail_fast and not res.passed:
                pool.shutdown(wait=False, cancel_futures=True)
                return


def run_checks(
    sources: Sequence[Any] | Iterator[Any],
    *,
    check: Callable[[Any], R],
    worker: Callable[[str, list[str]], R],
    fail_fast: bool = False,
    import_paths: Sequence[str] = (),
    jobs: int = 1,
    chosen: Callable[[int], None] | None = None,
) -> Iterator[R]:
    """Yield ``check(source)`` per source, here or from ``worker`` in worker processes.

    ``check`` checks one source in this process; ``worker`` (a module-level
    function, so a process pool can pickle it) checks an ``.rdj`` path in a
    worker, given the import paths. Used by :func:`redrive._check.iter_checks`.

    With ``fail_fast`` the iteration stops after the first failing result.
    ``jobs`` > 1 checks ``.rdj`` paths in that many worker processes (each run
    is independent: its own copy in memory), yielding results in the order of
    ``sources``; ``0`` checks the first :data:`PROBE_RUNS` here and lets
    :func:`choose_workers` decide for the rest (see the module docstring).
    ``(journal, run_id)`` sources (a journal object cannot move to another
    process) are checked here, in order. ``chosen``, when given, is told the
    processes that check the runs after the probe (1: this process alone; the
    count ``jobs=0`` picked, or the count asked), once, before they start.
    """
    listed = list(sources)
    if jobs == 1 or len(listed) <= 1 or any(isinstance(s, tuple) for s in listed):
        jobs = 1
    done = 0
    workers = jobs
    if jobs == 0:
        cpu: list[float] = []
        wall = 0.0
        samples: list[float] = []
        for source in listed[:PROBE_RUNS]:
            c0, w0 = time.process_time(), time.perf_counter()
            res = check(source)
            cpu.append(time.process_time() - c0)
            wall += time.perf_counter() - w0
            samples.append(_others_ready())
            done += 1
            yield res
            if fail_fast and not res.passed:
                return
        probe = Probe(
            cpu_per_run=statistics.median(cpu[1:] or cpu),
            share=sum(cpu) / wall if wall > 0 else 1.0,
            others=statistics.median(samples),
        )
        start = FORK_START_S if _start_method() == "fork" else SPAWN_START_S
        workers = choose_workers(len(listed) - done, probe, cores=usable_cores(), start_s=start)
    rest = listed[done:]
    if chosen is not None:
        chosen(workers if workers > 1 and len(rest) > 1 else 1)
    if workers <= 1 or len(rest) <= 1:
        for source in rest:
            res = check(source)
            yield res
            if fail_fast and not res.passed:
                return
        return
    paths = [os.fspath(s) for s in rest]
    yield from _in_pool(paths, workers, import_paths, fail_fast, worker)
