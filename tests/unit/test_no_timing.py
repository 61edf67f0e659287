"""No test asserts a duration (issue 26 #8): bounds on time live in ``benchmarks/``.

A test may assert that work happens off the event loop (:mod:`tests.loopguard`),
in which order things happen, or that a wait ended for the right reason, never
how fast. This check reads every test module's syntax tree and refuses an
``assert`` that reads a clock (``time.time``, ``time.monotonic``,
``time.perf_counter`` and their ``_ns`` forms) or compares a name that holds
a measured time (``elapsed``, ``duration``, ``took``, ``lag``, ``worst``...)
with ``<``, ``<=``, ``>`` or ``>=``.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CLOCKS = {"time", "monotonic", "perf_counter", "time_ns", "monotonic_ns", "perf_counter_ns"}
TIMED = re.compile(r"(^|_)(elapsed|duration|took|lag|lags|worst|stall|seconds|secs|ms)($|_)")
ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _reads_a_clock(node: ast.AST) -> bool:
    return any(
        isinstance(sub, ast.Call)
        and isinstance(sub.func, ast.Attribute)
        and sub.func.attr in CLOCKS
        and isinstance(sub.func.value, ast.Name)
        and sub.func.value.id == "time"
        for sub in ast.walk(node)
    )


def _compares_a_duration(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Compare) and any(isinstance(op, ORDER) for op in sub.ops):
            names = [n.id for n in ast.walk(sub) if isinstance(n, ast.Name)]
            names += [n.attr for n in ast.walk(sub) if isinstance(n, ast.Attribute)]
            if any(TIMED.search(name) for name in names):
                return True
    return False


def timing_assertions(source: str, filename: str) -> list[str]:
    """Return ``"file:line"`` of each ``assert`` in ``source`` that bounds a duration.

    The answer depends on ``source`` and ``filename`` alone, so it is remembered for the
    process: the bench's report (benchmarks/rows.py) reads every test module again each
    time it makes its goal table, several times in one run of tests/unit/test_bench_report.py
    (a syntax tree of every test module costs about 2 s of CPU each time).
    """
    return list(_timing_assertions(source, filename))


@functools.cache
def _timing_assertions(source: str, filename: str) -> tuple[str, ...]:
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Assert) and (
            _reads_a_clock(node.test) or _compares_a_duration(node.test)
        ):
            found.append(f"{filename}:{node.lineno}")
    return tuple(found)


def test_no_test_asserts_a_duration() -> None:
    found = [
        hit
        for path in sorted(TESTS.rglob("*.py"))
        for hit in timing_assertions(path.read_text(), str(path.relative_to(TESTS.parent)))
    ]
    assert found == [], "tests that assert a duration (move the bound to benchmarks/)"


@pytest.mark.parametrize(
    "source",
    [
        "assert time.monotonic() - started < 30.0",
        "assert worst < STALL, 'stalled'",
        "assert elapsed_ms <= 100",
        "assert run.duration > 0.5",
        "assert time.perf_counter_ns() - t0 < 10**9",
    ],
)
def test_the_check_sees_a_duration_bound(source: str) -> None:
    assert timing_assertions(source, "x.py") == ["x.py:1"]


@pytest.mark.parametrize(
    "source",
    [
        "assert on_loop == []",
        "assert len(frames) < 10",
        "assert record.lease_expires is not None",
        "assert first.seq < second.seq",
    ],
)
def test_the_check_leaves_other_assertions_alone(source: str) -> None:
    assert timing_assertions(source, "x.py") == []
