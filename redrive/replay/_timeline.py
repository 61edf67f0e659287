"""A run as one self-contained HTML page: its steps on a time axis (``redrive view``).

The page loads nothing from elsewhere (inline CSS and JS, no fonts, no
network): the run's data is embedded as JSON in a ``<script
type="application/json">`` element whose ``<``, ``>`` and ``&`` are escaped
as ``\\u003c``..., and the script puts it in the page with ``textContent``
only, so no recorded text is ever read as HTML. Every recorded value has
already been through the journal's scrubber (secrets rules); strings are
masked once more with :func:`redrive._scrub.mask_text`.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from .._jsontext import token_counts
from .._scrub import DEFAULT
from ..frames import Frame, Kind
from ._history import own_time, run_events
from ._rundiff import diff_runs
from ._steps import RecordedStep, StepReader
from ._timeline_assets import CSS as _CSS
from ._timeline_assets import JS as _JS
from ._usage import Price, read_usage

__all__ = ["as_iframe", "page", "render_compare", "render_run", "run_data"]

_APPROVAL = "approval"


def _tokens(view: Any) -> dict[str, int] | None:
    i, o = token_counts(view.get("usage") if isinstance(view, dict) else None)
    if i is not None and o is not None:
        return {"input": i, "output": o}
    return None


def _step(
    step: RecordedStep,
    origin: float,
    replayed_before: int | None,
    asked_at: dict[str, float] | None = None,
    listed: list[Frame] | None = None,
) -> dict[str, Any]:
    begin, end, cut = own_time(step, listed or [])
    outcome = step.outcome if step.end is not None else None
    item: dict[str, Any] = {
        "seq": step.seq,
        "kind": step.kind,
        "name": step.name,
        "status": step.status,
        "approval": step.kind == "value" and step.name == _APPROVAL,
        "attempts": step.attempts,
        "turn": step.turn,
        "start_ms": round((begin - origin) * 1000, 3),
        "duration_ms": None
        if end is None or step.end is None
        else round(max(end - begin, 0.0) * 1000, 3),
        # in flight, or settled by a person or recover(): drawn to its execution's stop
        "open_ms": round(max(end - begin, 0.0) * 1000, 3) if cut and end is not None else None,
        "label": step.name,
        "mode": "live"
        if replayed_before is None
        else ("replayed" if step.seq < replayed_before else "live"),
        "tokens": None,
    }
    if step.kind == "model":
        view = dict(step.data.get("view") or {})
        view.update((outcome or {}).get("view") or {})
        item["tokens"] = _tokens(view)
        if view.get("model"):
            item["label"] = f"{view['model']} ({view.get('provider') or step.name})"
        item["request"] = {
            k: v for k, v in view.items() if k not in ("tool_calls", "text", "usage")
        }
        item["response"] = {
            k: view[k] for k in ("tool_calls", "text", "usage", "error") if k in view
        }
    elif step.kind == "tool":
        item["arguments"] = step.args
        if outcome is not None:
            item["result" if "result" in outcome else "error"] = outcome.get(
                "result", outcome.get("error")
            )
        item["idempotency_key"] = step.idempotency_key
        if outcome is not None and outcome.get("recovered"):
            who = outcome.get("resolved")
            item["settled"] = (
                f"resolved by {who.get('by')}: {who.get('reason')}"
                if isinstance(who, dict)
                else "settled by recover()"
            )
    else:
        value = step.data.get("value")
        item["value"] = value
        args = step.args if isinstance(step.args, dict) else {}
        if isinstance(args.get("label"), str):
            item["label"] = args["label"]
        if item["approval"] and isinstance(value, dict):
            verdict = "approved" if value.get("approved") else "rejected"
            item["decision"] = f"{verdict} by {value.get('by') or 'someone'}"
            asked = (asked_at or {}).get(item["label"])
            if asked is not None and end is not None:  # the wait for a person
                item["start_ms"] = round((asked - origin) * 1000, 3)
                item["duration_ms"] = round(max(end - asked, 0.0) * 1000, 3)
    return item


def run_data(
    frames: Iterable[Frame],
    run_id: str,
    *,
    replayed_before: int | None = None,
    prices: Mapping[str, Price] | None = None,
) -> dict[str, Any]:
    """Read one run's frames into the data the page shows.

    Args:
        frames: the run's frames in seq order.
        run_id: the run's id.
        replayed_before: steps below this seq were replayed by the execution
            shown (a live :class:`~redrive.Run`); None: a stored run (every
            step is ``"live"``: each was run live when it was recorded).
        prices: a price table for the usage's cost (model -> :class:`~redrive.Price`).

    Returns:
        ``{"run_id", "status", "error", "started_at" (seconds since the epoch),
        "duration_ms", "steps": [...], "events": [...], "usage": {...}}``, each
        step with ``seq``, ``kind``, ``name``, ``status``, ``approval``,
        ``attempts``, ``start_ms`` and ``duration_ms`` (milliseconds from the
        run's start; the step's own last attempt), ``open_ms`` (a step in flight
        or settled later: its time until its execution stopped), ``mode``
        (live, replayed), ``tokens`` and its request/response or
        arguments/result; each event (:func:`~._history.run_events`) with
        ``kind``, ``text``, ``start_ms`` and ``duration_ms`` (an interruption's
        gap, else 0); ``usage`` as :meth:`~._usage.RunUsage.as_dict`. Scrubbed
        and masked.

    Raises:
        JournalCorruptError: the frames fail their seq or chain check.
    """
    reader = StepReader(run_id)
    listed = list(frames)
    steps = list(reader.read(listed))
    origin = (
        reader.run_start_frame.at if reader.run_start_frame else (listed[0].at if listed else 0)
    )
    last = reader.run_end_frame.at if reader.run_end_frame else (listed[-1].at if listed else 0)
    end = reader.run_end or {}
    asked = _approvals_asked(listed)
    events = []
    for event in run_events(listed):
        shown = event.as_dict()
        shown["start_ms"] = round((event.at - origin) * 1000, 3)
        gap = 0.0 if event.until is None else max(event.until - event.at, 0.0)
        shown["duration_ms"] = round(gap * 1000, 3)
        events.append(shown)
    data = {
        "run_id": run_id,
        "status": end.get("status") or ("in progress" if listed else "empty"),
        "error": end.get("error"),
        "started_at": origin,
        "duration_ms": round((last - origin) * 1000, 3),
        "steps": [_step(s, origin, replayed_before, asked, listed) for s in steps],
        "events": events,
        "usage": read_usage(listed, prices).as_dict(),
    }
    cleaned: dict[str, Any] = DEFAULT.value(data)
    return cleaned


def _approvals_asked(frames: list[Frame]) -> dict[str, float]:
    """When each approval was asked for (its ``approval_requested`` note), by approval name."""
    asked: dict[str, float] = {}
    for frame in frames:
        if frame.kind == Kind.NOTE.value and frame.name == "approval_requested":
            data = frame.data()
            name = data.get("data", {}).get("name") if isinstance(data, dict) else None
            if isinstance(name, str):
                asked.setdefault(name, frame.at)
    return asked


def _frames(journal: Any, run_id: str) -> list[Frame]:
    from ..errors import UnknownRunError

    if journal.get_run(run_id) is None:
        raise UnknownRunError(
            f"no run {run_id!r} in journal {journal.url}: list the runs with `redrive runs`",
            run_id=run_id,
        )
    return list(journal.frames(run_id))


def render_run(journal: Any, run_id: str, *, prices: Mapping[str, Price] | None = None) -> str:
    """Return the timeline page of run ``run_id`` in ``journal`` (one HTML document).

    Args:
        journal: the journal holding the run.
        run_id: the run.
        prices: a price table for the usage's cost (model -> :class:`~redrive.Price`).

    Raises:
        UnknownRunError: no such run. JournalCorruptError: its frames fail their checks.
    """
    return page([run_data(_frames(journal, run_id), run_id, prices=prices)], None)


def render_compare(journal_a: Any, a: str, journal_b: Any, b: str) -> str:
    """Return the page of runs ``a`` and ``b`` side by side, the first divergent step marked.

    The divergence is :func:`redrive.diff_runs`' answer (its step index, what
    differs and the path-level diff).

    Raises:
        UnknownRunError: a run is missing. JournalCorruptError: frames fail their checks.
    """
    runs = [run_data(_frames(journal_a, a), a), run_data(_frames(journal_b, b), b)]
    found = diff_runs(a, b, journal=journal_a, journal_b=journal_b)
    divergence = None
    if found is not None:
        divergence = DEFAULT.value(
            {
                "index": found.index,
                "what": found.what,
                "location": found.location(),
                "seq_a": found.step_a.seq if found.step_a else None,
                "seq_b": found.step_b.seq if found.step_b else None,
                "diff": [[p, repr(x)[:2000], repr(y)[:2000]] for p, x, y in found.diff[:50]],
                "text": str(found),
            }
        )
    return page(runs, divergence, compare=True)


def as_iframe(frames: Iterable[Frame], run_id: str, *, replayed_before: int | None) -> str:
    """Return the page of one run inside an ``<iframe srcdoc>`` (what Jupyter shows for a Run).

    The iframe keeps the page's script and styles apart from the notebook's.
    """
    document = page([run_data(frames, run_id, replayed_before=replayed_before)], None)
    return (
        f'<iframe sandbox="allow-scripts" style="width:100%;height:420px;border:0" '
        f'srcdoc="{html.escape(document, quote=True)}"></iframe>'
    )


def _finite(value: Any) -> Any:
    """``value`` with each NaN or infinite float as its text (``"inf"``): JSON has no such number.

    Recorded JSON may hold them (Python's parser reads ``1e999`` and ``NaN``); the
    page's ``JSON.parse`` would refuse the whole document over one.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json_for_script(value: Any) -> str:
    text = json.dumps(_finite(value), default=repr, ensure_ascii=False)
    for raw, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
        text = text.replace(raw, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def page(
    runs: list[dict[str, Any]], divergence: dict[str, Any] | None, *, compare: bool = False
) -> str:
    """Return the HTML document showing ``runs`` (and the ``divergence`` between two)."""
    title = " vs ".join(str(r["run_id"]) for r in runs)
    payload = _json_for_script({"runs": runs, "divergence": divergence, "compare": compare})
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>redrive: {html.escape(title)}</title><style>{_CSS}</style></head>"
        f'<body><h1>redrive run timeline</h1><div id="summary"></div><div id="runs"></div>'
        f"<noscript>This page draws its timeline with JavaScript.</noscript>"
        f'<script type="application/json" id="redrive-data">{payload}</script>'
        f"<script>{_JS}</script></body></html>\n"
    )
