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
from collections.abc import Iterable
from typing import Any

from .._jsontext import token_counts
from .._scrub import DEFAULT
from ..frames import Frame, Kind
from ._rundiff import diff_runs
from ._steps import RecordedStep, StepReader

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
) -> dict[str, Any]:
    started = step.data.get("started_at") if step.kind == "model" else None
    begin = float(started) if isinstance(started, int | float) else step.start.at
    end = step.end.at if step.end is not None else None
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
        "duration_ms": None if end is None else round(max(end - begin, 0.0) * 1000, 3),
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
    frames: Iterable[Frame], run_id: str, *, replayed_before: int | None = None
) -> dict[str, Any]:
    """Read one run's frames into the data the page shows.

    Args:
        frames: the run's frames in seq order.
        run_id: the run's id.
        replayed_before: steps below this seq were replayed by the execution
            shown (a live :class:`~redrive.Run`); None: a stored run (every
            step is ``"live"``: each was run live when it was recorded).

    Returns:
        ``{"run_id", "status", "error", "started_at" (seconds since the epoch),
        "duration_ms", "steps": [...]}``, each step with ``seq``, ``kind``,
        ``name``, ``status``, ``approval``, ``attempts``, ``start_ms`` and
        ``duration_ms`` (milliseconds from the run's start), ``mode``
        (live, replayed), ``tokens`` and its request/response or
        arguments/result. Scrubbed and masked.

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
    data = {
        "run_id": run_id,
        "status": end.get("status") or ("in progress" if listed else "empty"),
        "error": end.get("error"),
        "started_at": origin,
        "duration_ms": round((last - origin) * 1000, 3),
        "steps": [_step(s, origin, replayed_before, asked) for s in steps],
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


def render_run(journal: Any, run_id: str) -> str:
    """Return the timeline page of run ``run_id`` in ``journal`` (one HTML document).

    Raises:
        UnknownRunError: no such run. JournalCorruptError: its frames fail their checks.
    """
    return page([run_data(_frames(journal, run_id), run_id)], None)


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


_CSS = """
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:17px;margin:0 0 8px}
#runs{display:flex;gap:16px;align-items:flex-start}
.run{flex:1;min-width:0;border:1px solid #ccc;border-radius:6px;padding:8px}
.run h2{font-size:14px;margin:0 0 6px;word-break:break-all}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:11px;margin-left:4px;background:#eee}
.succeeded{background:#d5f5d5}.failed{background:#f8d0d0}.interrupted,.blocked{background:#fde7b0}
.step{border-top:1px solid #eee;padding:3px 0}
.step summary{cursor:pointer;display:grid;grid-template-columns:40px 210px 1fr 190px;gap:6px;align-items:center}
.axis{display:grid;grid-template-columns:40px 210px 1fr 190px;gap:6px;font-size:11px;color:#777}
.axis .ticks{display:flex;justify-content:space-between;border-bottom:1px solid #ccc}
.legend span{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 3px 0 10px;vertical-align:middle}
.lane{position:relative;height:14px;background:#f4f4f4;border-radius:3px}
.bar{position:absolute;top:1px;height:12px;min-width:2px;border-radius:3px;background:#4a7fd6}
.bar.tool{background:#3aa37a}.bar.value{background:#999}.bar.error{background:#d64a4a}
.bar.blocked{background:#e0a020}.bar.in_flight{background:repeating-linear-gradient(45deg,#bbb 0 4px,#ddd 4px 8px)}
.bar.replayed{opacity:.45}
.name{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.meta{font-size:11px;color:#555;text-align:right}
.divergent{background:#fff1f1;outline:2px solid #d64a4a;border-radius:3px}
.marker{color:#b00;font-weight:bold}
pre{background:#f7f7f7;padding:6px;overflow:auto;max-height:300px;margin:4px 0 4px 40px;font-size:11px;white-space:pre-wrap;word-break:break-all}
.compare .step summary,.compare .axis{grid-template-columns:30px 120px 1fr 150px}
.compare .meta{font-size:10px}
#divergence{border:1px solid #d64a4a;background:#fff5f5;padding:6px;margin:6px 0;border-radius:6px}
"""  # noqa: E501

_JS = r"""
(function(){
const data = JSON.parse(document.getElementById('redrive-data').textContent);
function el(tag, cls, text){const e=document.createElement(tag);if(cls)e.className=cls;if(text!==undefined)e.textContent=String(text);return e;}
function ms(v){return v===null||v===undefined?'in flight':(v<1000?v.toFixed(1)+' ms':(v/1000).toFixed(2)+' s');}
const div = data.divergence;
const summary = document.getElementById('summary');
let total = 0;
data.runs.forEach(function(run){ total += run.steps.length; });
summary.appendChild(el('span', null, 'steps: '));
const count = el('span', null, total); count.id = 'step-count'; summary.appendChild(count);
if (div) {
  const box = el('div'); box.id = 'divergence';
  box.appendChild(el('div', 'marker', 'First divergence: ' + div.location + ' (' + div.what + ')'));
  box.appendChild(el('pre', null, div.text));
  const leaves = el('details'); leaves.appendChild(el('summary', null, 'path diff: ' + div.diff.length + ' difference(s)'));
  div.diff.forEach(function(x){ leaves.appendChild(el('pre', 'leaf', x[0] + ':\n  ' + x[1] + '\n→ ' + x[2])); });
  box.appendChild(leaves);
  summary.appendChild(box);
}
const legend = el('div', 'legend');
[['#4a7fd6','model'],['#3aa37a','tool'],['#999','value'],['#d64a4a','error'],['#e0a020','blocked']].forEach(function(x){
  const sw = el('span'); sw.style.background = x[0]; legend.appendChild(sw); legend.appendChild(document.createTextNode(x[1]));
});
legend.appendChild(document.createTextNode(' · faded: replayed (no call made)'));
summary.appendChild(legend);
if (div) {} else if (data.compare) {
  summary.appendChild(el('div', null, 'The runs take the same steps and end the same.'));
}
const host = document.getElementById('runs');
if (data.compare) host.className = 'compare';
data.runs.forEach(function(run, r){
  const box = el('section', 'run'); box.dataset.run = run.run_id;
  const h = el('h2', null, run.run_id);
  h.appendChild(el('span', 'badge ' + run.status, run.status));
  h.appendChild(el('span', 'badge', ms(run.duration_ms)));
  box.appendChild(h);
  if (run.error) box.appendChild(el('pre', null, run.error));
  const span = Math.max(run.duration_ms || 0, 1);
  const axis = el('div', 'axis'); axis.appendChild(el('span', null, 'seq')); axis.appendChild(el('span', null, 'step'));
  const ticks = el('span', 'ticks'); (data.compare ? [0, 0.5, 1] : [0, 0.25, 0.5, 0.75, 1]).forEach(function(f){ ticks.appendChild(el('span', null, ms(f * span))); });
  axis.appendChild(ticks); axis.appendChild(el('span', null, data.compare ? 'duration · mode' : 'duration · mode · tokens')); box.appendChild(axis);
  const mySeq = div ? (r === 0 ? div.seq_a : div.seq_b) : null;
  run.steps.forEach(function(s){
    const d = el('details', 'step'); d.dataset.seq = s.seq; d.dataset.mode = s.mode;
    const sum = el('summary');
    sum.appendChild(el('span', null, '#' + s.seq));
    const nm = el('span', 'name', (s.approval ? 'approval ' : s.kind + ' ') + s.label); nm.title = s.name;
    sum.appendChild(nm);
    const lane = el('span', 'lane');
    const bar = el('span', 'bar ' + s.kind + ' ' + s.status + ' ' + s.mode);
    bar.style.left = (100 * Math.max(s.start_ms, 0) / span) + '%';
    bar.style.width = (100 * (s.duration_ms === null ? span - s.start_ms : s.duration_ms) / span) + '%';
    bar.title = s.status + ', ' + ms(s.duration_ms);
    lane.appendChild(bar); sum.appendChild(lane);
    let meta = ms(s.duration_ms) + ' · ' + s.mode;
    if (s.tokens) meta += ' · ' + s.tokens.input + '→' + s.tokens.output + ' tok';
    if (s.attempts > 1) meta += ' · ' + s.attempts + ' attempts';
    if (s.decision) meta += ' · ' + s.decision;
    if (s.status !== 'done') meta += ' · ' + s.status;
    sum.appendChild(el('span', 'meta', meta));
    d.appendChild(sum);
    let mark = null;
    if (mySeq !== null && mySeq === s.seq) {
      d.classList.add('divergent'); d.id = 'divergent-' + r;
      mark = el('div', 'marker', '▲ first divergent step (' + div.what + '): ' + div.diff.map(function(x){ return x[0]; }).join(', '));
    }
    ['request','response','arguments','result','error','value','idempotency_key'].forEach(function(k){
      if (s[k] === undefined || s[k] === null) return;
      d.appendChild(el('pre', null, k + ': ' + JSON.stringify(s[k], null, 1)));
    });
    box.appendChild(d);
    if (mark) box.appendChild(mark);
  });
  if (div && mySeq === null && div.index >= run.steps.length) {
    const m = el('div', 'step divergent marker', div.what === 'output' ? '▲ their ends differ (' + div.location + ')' : '▲ first divergence: this run has no step ' + (div.index + 1));
    m.id = 'divergent-' + r; box.appendChild(m);
  }
  host.appendChild(box);
});
document.body.dataset.rendered = 'yes';
})();
"""  # noqa: E501
