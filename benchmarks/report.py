"""The benchmark report: the systems table, the goals of issue 26 with verdicts, the header.

Pure formatting of the figures :mod:`benchmarks.run` measures (a dict, also
saved as JSON); :mod:`benchmarks.run` prints it and :mod:`benchmarks.page`
writes it as ``docs/performance.md``.
"""

from __future__ import annotations

import os
from typing import Any

from . import replay_cost
from . import rows as goal_rows

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_fmt_time = goal_rows.fmt_time


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.1f}x"


SYSTEMS = [
    "redrive-duckdb",
    "redrive-memory",
    "redrive-postgres",
    "dbos",
    "langgraph",
    "vcrpy",
    "vcrpy-body",
]
CANNOT = {
    "redrive-duckdb": "",
    "redrive-memory": "not durable (tests, replay)",
    "redrive-postgres": "",
    "dbos": "no full replay of a finished run (returns its stored output); no model/tool "
    "argument drift check; no export file",
    "langgraph": "no step replay (resumes from the last checkpoint; time travel re-executes "
    "nodes live); records state, not model requests",
    "vcrpy": "HTTP only: no tool journal, no crash-resume (cassette written at exit), "
    "no in-flight guard",
    "vcrpy-body": "as vcrpy; body matching scans the cassette per request",
}


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "not met")


def _spread(values: list[float] | None) -> str:
    """`` (min-max s)`` of alternating rounds, or nothing for an older run's single figure."""
    return f" ({min(values):.2f}-{max(values):.2f} s)" if values else ""


def check_jobs_row(cj: dict[str, Any]) -> goal_rows.Row:
    """The ``redrive check --jobs 0`` row: what it chose, its time, and the verdict.

    ``cj``: :func:`benchmarks.run._check_jobs`'s figures (seconds medians
    ``one_s``, ``cores_s`` and ``all_s`` for ``--jobs 1``, ``0`` and one per core;
    ``chosen``: the processes ``--jobs 0`` picked each round). The goal: faster
    than one process when it starts workers; when it keeps to one process, that
    workers would not have been clearly faster (``--jobs`` one per core not
    under ``1 - MARGIN`` of one process, the margin its cost model asks). A run
    saved before ``chosen`` was reported is judged by the time alone.
    """
    from redrive._check_jobs import MARGIN

    chosen: list[int] = cj.get("chosen") or []
    one, auto = cj["one_s"], cj["cores_s"]
    base = f"--jobs 1: {one:.2f} s" + _spread(cj.get("one"))
    if not chosen:  # a run saved before the choice was reported: as it was published
        return (
            f"redrive check over {cj['runs']:,} saved runs",
            f"--jobs 0 ({cj['cores']} cores): {auto:.2f} s ({one / auto:.2f}x faster)"
            + _spread(cj.get("auto")),
            base,
            "faster than one process",
            auto < one,
        )
    if max(chosen) <= 1:
        picked = "one process"
        ok = "all_s" not in cj or cj["all_s"] >= one * (1 - MARGIN)
    else:
        picked = f"{'/'.join(map(str, sorted(set(chosen))))} workers"
        ok = auto < one
    if "all_s" in cj:
        base += f"; --jobs {cj['cores']}: {cj['all_s']:.2f} s" + _spread(cj.get("all"))
    return (
        f"redrive check over {cj['runs']:,} saved runs",
        f"--jobs 0 ({cj['cores']} cores) chose {picked}: {auto:.2f} s "
        f"({one / auto:.2f}x one process)" + _spread(cj.get("auto")),
        base,
        "faster than one process, or one process when workers would not be",
        ok,
    )


def _items_2_3_5(data: dict[str, Any]) -> list[goal_rows.Row]:
    """Issue 26 items 2, 3 and 5 (replay per frame, canonical encode, resume against
    LangGraph, pytest per test, check --jobs), from this run's figures.

    Replay per frame, canonical encode, resume against LangGraph and the CPU
    added per pytest test come from :mod:`benchmarks.replay_cost` (measured
    interleaved); the wall-clock pytest row against vcrpy and ``check --jobs``
    from this module.
    """
    rows: list[goal_rows.Row] = []
    ps = data.get("pytest_scale", {})
    if "redrive_added_ms" in ps:
        vc = ps.get("vcrpy_added_ms")
        rows.append(
            (
                f"{ps['tests']:,} replayed pytest tests, added cost per test",
                f"{ps['redrive_added_ms']:.2f} ms",
                f"stub suite {ps['stub_s']:.2f} s; vcrpy "
                + (f"{vc:.2f} ms/test" if vc is not None else f"not run: {ps['skipped']}"),
                "<= 2 ms",
                ps["redrive_added_ms"] <= 2.0,
            )
        )
    else:
        rows.append(("replayed pytest tests", f"not run: {ps.get('error')}", "-", "<= 2 ms", None))
    cj = data.get("check_jobs", {})
    if "cores_s" in cj:
        rows.append(check_jobs_row(cj))
    else:
        rows.append(("redrive check --jobs", f"not run: {cj.get('error')}", "-", "-", None))
    rows += replay_cost.goal_rows(data.get("replay_cost", {}))  # issue 26 items 2, 3, 5
    return rows


def goal_table(data: dict[str, Any]) -> list[tuple[str, goal_rows.Row]]:
    """Every goal of issue 26 (and issue 14's carried over) as ``(item, row)``, one list."""
    table: list[tuple[str, goal_rows.Row]] = []
    table += [("26.1", r) for r in goal_rows.cycle_rows(data)]
    # -- issue 26 items 2, 3, 5: the replay branch's rows go here ------------------
    table += [("26.2/3/5", r) for r in _items_2_3_5(data)]
    # ------------------------------------------------------------------------------
    table += [("26.4", r) for r in goal_rows.whole_process_rows(data)]
    table += [("26.4", r) for r in goal_rows.size_rows(data)]
    table += [("26.6", r) for r in goal_rows.step_rows(data)]
    table += [("26.6", r) for r in goal_rows.postgres_rows(data)]
    table += [("26.7", goal_rows.no_timing_row(_ROOT))]
    ref = data.get("redrive-duckdb", {})
    peaks = sorted((ref[k] for k in ref if k.startswith("peak-")), key=lambda p: int(p["frames"]))
    if len(peaks) >= 2:
        small, big = peaks[0], peaks[-1]
        grow = (big["peak_kb"] - small["peak_kb"]) / 1024
        row: goal_rows.Row = (
            f"peak RSS growth during replay, fresh process, {small['frames']:,} -> "
            f"{big['frames']:,} frames",
            f"{small['peak_kb'] / 1024:.1f} -> {big['peak_kb'] / 1024:.1f} MB",
            f"replay {_fmt_time(big['replay_s'] / big['frames'])}/frame at {big['frames']:,}",
            "flat (within 5 MB)",
            grow <= 5.0,
        )
        table.append(("14", row))
    return table


def goals(data: dict[str, Any]) -> str:
    """The goals table as Markdown: item, figure, redrive, peer or floor, goal, verdict."""
    lines = [
        "| item | figure | redrive | peer or floor in the same run | goal | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for item, (a, b, c, d, e) in goal_table(data):
        lines.append(f"| {item} | {a} | {b} | {c} | {d} | {_verdict(e)} |")
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    """Format the figures as Markdown tables (ratios to the baseline and to redrive)."""
    lines: list[str] = []
    sizes = data["sizes"]
    ref = data.get("redrive-duckdb", {})

    def per_step(row: dict[str, Any]) -> tuple[float | None, float | None]:
        rec = row.get("record")
        if not rec:
            return None, None
        n = sizes["record"]
        return (rec["record_s"] - rec["plain_s"]) / n, rec["plain_s"] / n

    ref_over, _ = per_step(ref)
    resume_ns = sizes["resume"]
    head = ["system", "record overhead/step", "x plain", "x redrive"]
    head += [f"resume @{n}" for n in resume_ns]
    head += ["replay steps/s", "replay x plain", "bytes/step", "peak MB (replay)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for system in SYSTEMS:
        row = data.get(system, {})
        if "error" in row and "record" not in row:
            lines.append(f"| {system} | not run: {row['error']} |" + " |" * (len(head) - 2))
            continue
        over, plain = per_step(row)
        cells = [
            system,
            _fmt_time(over),
            _ratio((over or 0) + (plain or 0), plain),
            _ratio(over, ref_over),
        ]
        for n in resume_ns:
            cells.append(_fmt_time(row.get("resume", {}).get(n)) if "resume" in row else "cannot")
        rep = row.get("replay")
        if rep:
            rate = sizes["replay"] / rep["replay_s"]
            cells += [f"{rate:,.0f}", _ratio(rep["replay_s"], rep["plain_s"])]
        elif system == "dbos" and row.get("resume"):
            big = max(row["resume"])
            startup = row.get("startup", {}).get(big)
            if startup is None:
                cells += [f"{big / row['resume'][big]:,.0f} (via recovery, with start-up)", "-"]
            else:
                rate = big / (row["resume"][big] - startup)
                cells += [f"{rate:,.0f} (via recovery; start-up {_fmt_time(startup)} apart)", "-"]
        else:
            cells += ["cannot", "-"]
        rec = row.get("record", {})
        size = rec.get("file_bytes", rec.get("bytes"))
        cells.append(f"{size / sizes['record']:,.0f}" if size else "-")
        cells.append(f"{rep['peak_kb'] / 1024:.1f}" if rep and "peak_kb" in rep else "-")
        lines.append("| " + " | ".join(cells) + " |")
        if row.get("error"):
            lines.append(f"| ↳ {system} partly failed: {row['error']} |" + " |" * (len(head) - 2))
    lines.append("")
    lines.append(
        "What each cannot do: " + "; ".join(f"**{s}**: {c}" for s, c in CANNOT.items() if c)
    )
    fl = data["floor"]
    lines.append("")
    lines.append("Machine floor (medians):")
    lines.append(
        f"- append 2 KB + fsync: {_fmt_time(fl['fsync_2k'])}; "
        f"1,000 appends + one fsync, per frame: {_fmt_time(fl['group_fsync_per_frame'])}"
    )
    if "prealloc_fsync_2k" in fl:
        lines.append(
            f"- write 2 KB into a preallocated, zero-filled region + fdatasync (how the DuckDB "
            f"journal's log writes: no file size change, so no file-system journal commit): "
            f"{_fmt_time(fl['prealloc_fsync_2k'])} = "
            f"{fl['prealloc_fsync_2k'] / fl['fsync_2k']:.2f}x the append + fsync"
        )
    lines.append(
        f"- msgpack pack+unpack of a {fl['frame_bytes']:.0f} B frame: "
        f"{_fmt_time(fl['msgpack_2k'])}; redrive canonical encode+decode: "
        f"{_fmt_time(fl['canonical_2k'])}; xxh3-128: {_fmt_time(fl['xxh3_2k'])}"
    )
    wr = data["writes"]
    lines.append(
        f"- durable writes per side-effecting tool step: {wr['tool_step']:.2f}; "
        f"per model step: {wr['model_step_group']:.2f} (group commit), "
        f"{wr['model_step_each']:.2f} (model_commit='each')"
    )
    rec = ref.get("record")
    if rec:
        pair = (rec["record_s"] - rec["plain_s"]) / (sizes["record"] / 2)
        lines.append(
            f"- redrive DuckDB, one model step + one tool step: {_fmt_time(pair)} = "
            f"{pair / (2 * fl['fsync_2k']):.1f}x the two fsyncs it must do "
            f"({_fmt_time(2 * fl['fsync_2k'])})"
        )
    for n in (sizes["replay"], sizes["large"]):
        peak = ref.get(f"peak-{n}")
        if peak:
            lines.append(
                f"- redrive DuckDB replay of {peak['frames']:,} frames: "
                f"{_fmt_time(peak['replay_s'] / peak['frames'])} per frame, "
                f"peak memory growth {peak['peak_kb'] / 1024:.1f} MB"
            )
    gr = data["growth"]
    lines.append(
        "- journal bytes/step (logical): fixed 2 KB requests "
        + ", ".join(f"N={n}: {v:,.0f}" for n, v in gr["fixed"].items())
        + "; whole conversation re-sent each request "
        + ", ".join(f"N={n}: {v:,.0f}" for n, v in gr["conversation"].items())
    )
    return "\n".join(lines)


def header(data: dict[str, Any]) -> str:
    """The run's first line: date, machine, size and the load average at start and end."""
    load = data.get("load", {})

    def avg(key: str) -> str:
        got = load.get(key)
        return "/".join(f"{v:.2f}" for v in got) if got else "?"

    sizes = data["sizes"]
    return (
        f"redrive benchmarks, {data.get('date', '?')}, {data.get('machine', '?')}, "
        f"{'quick' if data.get('quick') else 'full'} size; N steps = N/2 model + N/2 tool calls; "
        f"record N={sizes['record']}, replay N={sizes['replay']}; "
        f"{sizes.get('rounds', '?')} interleaved rounds; load average (1/5/15 min) "
        f"{avg('start')} at start, {avg('end')} at end"
    )


def full_report(data: dict[str, Any]) -> str:
    """Header, the systems table and the goals table: what ``scripts/bench`` prints."""
    return (
        f"{header(data)}\n\n{report(data)}\n\n"
        "Goals of issue 26 (and 14) (each ratio against its peer or floor measured in "
        "this run; spreads are p10-p90 over rounds):\n\n"
        f"{goals(data)}"
    )
