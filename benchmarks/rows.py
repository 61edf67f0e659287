"""Rows of the goals table for issue 26's items 1, 4, 6 and 7, and the format of a spread.

A row is ``(figure, redrive, peer or floor in the same run, goal, verdict)``;
the verdict is True (met), False (not met) or None (not judged: not run, or a
figure reported for itself). :func:`benchmarks.run.goals` joins these with
the other items' rows into one table.
"""

from __future__ import annotations

from typing import Any

from .interleaved import ratios, spread

Row = tuple[str, str, str, str, bool | None]


def fmt_time(seconds: float | None) -> str:
    """``seconds`` in µs, ms or s with two or three significant places; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_spread(samples: list[float], *, unit: str = "time") -> str:
    """``median (p10-p90 low-high, n=k)`` of seconds (or of ratios with ``unit="x"``)."""
    s = spread(samples)
    if not s:
        return "-"

    def one(v: float) -> str:
        return f"{v:.2f}x" if unit == "x" else fmt_time(v)

    return f"{one(s['median'])} (p10-p90 {one(s['p10'])}-{one(s['p90'])}, n={s['n']:.0f})"


def _ratio_cell(top: list[float], bottom: list[float]) -> tuple[str, float | None]:
    r = ratios(top, bottom)
    if not r:
        return "-", None
    return (f"{r['median']:.2f}x (p10-p90 {r['p10']:.2f}-{r['p90']:.2f}x)", r["median"])


def cycle_rows(data: dict[str, Any]) -> list[Row]:
    """Item 1: open + resume + close and open + replay + close, DuckDB against memory."""
    cy = data.get("cycles", {})
    if "error" in cy:
        return [
            ("open + resume/replay + close cycles", f"not run: {cy['error']}", "-", "<= 3x", None)
        ]
    rows: list[Row] = []
    for kind, label in (("resume", "open + resume + close"), ("replay", "open + replay + close")):
        got = cy.get(kind)
        if not got:
            continue
        ours, base = got["duckdb"], got["memory"]
        cell, median = _ratio_cell(ours["total_s"], base["total_s"])
        split = ", ".join(
            f"{part} {fmt_time(spread(ours[f'{part}_s'])['median'])}"
            for part in ("open", "work", "close")
        )
        what = "an interrupted" if kind == "resume" else "a finished"
        rows.append(
            (
                f"{label} of {what} 10-step run, DuckDB, fresh process",
                f"{fmt_spread(ours['total_s'])}; {cell} (split: {split})",
                f"memory journal {fmt_spread(base['total_s'])}; duckdb.connect alone "
                f"{fmt_time(data.get('floor', {}).get('duckdb_connect'))}",
                "<= 3x memory",
                None if median is None else median <= 3.0,
            )
        )
    return rows


def whole_process_rows(data: dict[str, Any]) -> list[Row]:
    """Item 4: whole-process resume against LangGraph and DBOS, in-process figures beside."""
    wp = data.get("whole", {})
    if "error" in wp:
        return [("whole-process resume", f"not run: {wp['error']}", "-", "published", None)]
    ours = wp.get("redrive-duckdb", {})
    rows: list[Row] = []
    for n in sorted(ours, key=int):
        mine = ours[n]
        peers = []
        for system, name in (("langgraph", "LangGraph"), ("dbos", "DBOS")):
            theirs = wp.get(system, {}).get(n)
            if not theirs:
                peers.append(f"{name} not run")
                continue
            cell, _ = _ratio_cell(mine["wall_s"], theirs["wall_s"])
            extra = ""
            if theirs.get("startup_s"):
                per = [
                    a - b for a, b in zip(theirs["in_process_s"], theirs["startup_s"], strict=True)
                ]
                extra = (
                    f"; start-up (DBOS() + launch) {fmt_spread(theirs['startup_s'])}, "
                    f"recovery after it {fmt_spread(per)}"
                )
            peers.append(
                f"{name} {fmt_spread(theirs['wall_s'])} (in process "
                f"{fmt_spread(theirs['in_process_s'])}{extra}); redrive/{name} {cell}"
            )
        rows.append(
            (
                f"whole-process resume @{int(n):,} steps (spawn, import, open, resume, exit)",
                f"{fmt_spread(mine['wall_s'])} (in process {fmt_spread(mine['in_process_s'])})",
                "; ".join(peers),
                "published (report)",
                True,
            )
        )
    return rows


def size_rows(data: dict[str, Any]) -> list[Row]:
    """Item 4: journal size with an accumulated-messages state against LangGraph's SQLite."""
    ms = data.get("messages")
    if not ms:
        return []
    mine, theirs = ms.get("redrive", {}), ms.get("langgraph", {})
    if "file_bytes" not in mine:
        return [
            (
                "journal size, accumulated messages",
                f"not run: {mine.get('error')}",
                "-",
                "published",
                None,
            )
        ]
    peer = (
        f"LangGraph SqliteSaver {theirs['file_bytes'] / 2**20:.2f} MB "
        f"({theirs['file_bytes'] / mine['file_bytes']:.1f}x redrive)"
        if "file_bytes" in theirs
        else f"LangGraph not run: {theirs.get('error', '?')}"
    )
    return [
        (
            f"bytes on disk after {ms['steps']:,} steps of an accumulated-messages state",
            f"{mine['file_bytes'] / 2**20:.2f} MB (DuckDB file + log)",
            peer,
            "published (report)",
            True,
        )
    ]


def step_rows(data: dict[str, Any]) -> list[Row]:
    """Item 6: a step against the fsync floor sampled right after it, round by round."""
    st = data.get("steps", {})
    if "error" in st or "tool_step" not in st:
        return [("steps against one fsync", f"not run: {st.get('error')}", "-", "-", None)]
    rows: list[Row] = []
    for key, label, goal, bound in (
        ("tool", "side-effecting tool step, DuckDB", "<= 2.2x one fsync", 2.2),
        ("model", 'model step, DuckDB, model_commit="write"', "<= 0.1x one fsync", 0.1),
    ):
        cell, median = _ratio_cell(st[f"{key}_step"], st[f"fsync_{key}"])
        floor = f"2 KB append + fsync in the same rounds {fmt_spread(st[f'fsync_{key}'])}"
        if key == "tool" and st.get("prealloc_tool"):
            pre, _ = _ratio_cell(st["prealloc_tool"], st["fsync_tool"])
            floor += (
                f"; 2 KB write into a preallocated tail + fdatasync (the log's write) "
                f"{fmt_spread(st['prealloc_tool'])}, {pre} the append"
            )
        rows.append(
            (
                label,
                f"{fmt_spread(st[f'{key}_step'])}; {cell} one fsync",
                floor,
                goal,
                None if median is None else median <= bound,
            )
        )
    return rows


def postgres_rows(data: dict[str, Any]) -> list[Row]:
    """Item 6: Postgres claim against a bare INSERT, alone and at the same concurrency."""
    pg = data.get("postgres", {})
    if pg.get("error"):
        return [("Postgres claim", f"not run: {pg['error']}", "-", "<= 1.2x bare INSERT", None)]
    rows: list[Row] = []
    if "claim" in pg:
        c = pg["claim"]
        rows.append(
            (
                "Postgres claim (one statement), one connection",
                f"p50 {fmt_time(c['claim_median'])}, p99 {fmt_time(c['claim_p99'])} "
                f"({c['ratio']:.2f}x)",
                f"bare INSERT of the same frame row, interleaved, p50 "
                f"{fmt_time(c['bare_median'])}, p99 {fmt_time(c['bare_p99'])}",
                "<= 1.2x bare INSERT",
                c["ratio"] <= 1.2,
            )
        )
    for n, m in sorted(pg.get("concurrent", {}).items(), key=lambda kv: int(kv[0])):
        cell, median = _ratio_cell(m["claim"], m["bare"])
        rows.append(
            (
                f"Postgres claim at the tool call, {n} worker processes",
                f"p50 per round {fmt_spread(m['claim'])}; {cell}",
                f"{n} processes of bare 2 KB INSERTs, alternating rounds, p50 "
                f"{fmt_spread(m['bare'])}",
                "<= 1.2x bare INSERT at the same concurrency",
                None if median is None else median <= 1.2,
            )
        )
    for n, m in sorted(pg.get("workers", {}).items(), key=lambda kv: int(kv[0])):
        rows.append(
            (
                f"Postgres throughput, {n} worker(s)",
                f"p50 {fmt_time(m['claim_median'])}, p99 {fmt_time(m['claim_p99'])}, "
                f"{m['steps_per_s']:.0f} steps/s",
                "(report only)",
                "-",
                None,
            )
        )
    return rows


def no_timing_row(root: str) -> Row:
    """Item 7: no test asserts a duration (tests/unit/test_no_timing.py's check, run here)."""
    from pathlib import Path

    from tests.unit.test_no_timing import timing_assertions

    tests = Path(root) / "tests"
    found = [
        hit
        for path in sorted(tests.rglob("*.py"))
        for hit in timing_assertions(path.read_text(), str(path.relative_to(root)))
    ]
    return (
        "tests that assert a duration",
        "none" if not found else f"{len(found)}: {', '.join(found[:3])}",
        "read from every test module's syntax tree (tests/unit/test_no_timing.py's check)",
        "none",
        not found,
    )
