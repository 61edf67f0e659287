"""The timeline page's inline style sheet and script (:mod:`._timeline` embeds them).

The script reads the run data from the page's JSON element and draws it with
``textContent`` only: no recorded text is ever read as HTML.
"""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
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
.event{display:grid;grid-template-columns:40px 210px 1fr 190px;gap:6px;align-items:center;padding:2px 0;font-size:11px;border-top:1px dashed #eee}
.event .what{font-weight:bold}.event.ev-interrupted .what,.event.ev-suspended .what{color:#b00}
.bar.gap{background:repeating-linear-gradient(135deg,#f3b0b0 0 4px,#fff 4px 8px);border:1px solid #d64a4a}
.bar.gap.suspended,.bar.gap.paused{background:repeating-linear-gradient(135deg,#fde7b0 0 4px,#fff 4px 8px);border-color:#e0a020}
.bar.mark{width:3px;min-width:3px;background:#6a4ad6}
.usage{font-size:12px;margin:2px 0 6px}
#divergence{border:1px solid #d64a4a;background:#fff5f5;padding:6px;margin:6px 0;border-radius:6px}
"""  # noqa: E501

JS = r"""
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
  if (run.usage) {
    const u = run.usage.spent, v = run.usage.saved;
    function tok(x){ return x.input_tokens + '→' + x.output_tokens + ' tok' + (x.cached_tokens ? ' (' + x.cached_tokens + ' cached)' : '') + (x.reasoning_tokens ? ' (' + x.reasoning_tokens + ' reasoning)' : ''); }
    function cost(x){ return x.cost === null || x.cost === undefined ? '' : ' · cost ' + x.cost.toPrecision(4); }
    const line = el('div', 'usage', 'usage: ' + u.calls + ' live model call(s) · ' + tok(u) + cost(u) + ' · replay saved: ' + v.calls + ' call(s) · ' + tok(v) + cost(v) + ' · ' + v.seconds.toFixed(2) + ' s');
    line.id = 'usage-' + r; box.appendChild(line);
  }
  const rows = run.steps.map(function(s){ return {seq: s.seq, step: s}; }).concat((run.events || []).map(function(e){ return {seq: e.seq + 0.5, event: e}; }));
  rows.sort(function(a, b){ return a.seq - b.seq; });
  rows.forEach(function(row){
    if (!row.event) return;
    const e = row.event;
    const line = el('div', 'event ev-' + e.kind); line.dataset.seq = e.seq; line.dataset.event = e.kind;
    line.appendChild(el('span', null, ''));
    line.appendChild(el('span', 'what', e.kind + (e.worker ? ' · ' + e.worker : '') + (e.by ? ' · ' + e.by : '')));
    const lane = el('span', 'lane');
    const bar = el('span', 'bar ' + (e.duration_ms > 0 ? 'gap ' + e.kind : 'mark'));
    bar.style.left = (100 * Math.max(e.start_ms, 0) / span) + '%';
    if (e.duration_ms > 0) bar.style.width = (100 * e.duration_ms / span) + '%';
    bar.title = e.text; lane.appendChild(bar); line.appendChild(lane);
    line.appendChild(el('span', 'meta', e.text));
    row.line = line;
  });
  rows.forEach(function(row){
    if (row.event) { box.appendChild(row.line); return; }
    const s = row.step;
    const d = el('details', 'step'); d.dataset.seq = s.seq; d.dataset.mode = s.mode;
    const sum = el('summary');
    sum.appendChild(el('span', null, '#' + s.seq));
    const nm = el('span', 'name', (s.approval ? 'approval ' : s.kind + ' ') + s.label); nm.title = s.name;
    sum.appendChild(nm);
    const lane = el('span', 'lane');
    const bar = el('span', 'bar ' + s.kind + ' ' + s.status + ' ' + s.mode);
    bar.style.left = (100 * Math.max(s.start_ms, 0) / span) + '%';
    const own = s.duration_ms !== null ? s.duration_ms : (s.open_ms !== null && s.open_ms !== undefined ? s.open_ms : span - s.start_ms);
    bar.style.width = (100 * own / span) + '%';
    bar.title = s.status + ', ' + ms(s.duration_ms);
    lane.appendChild(bar); sum.appendChild(lane);
    let meta = (s.duration_ms === null && s.open_ms !== null && s.open_ms !== undefined ? 'in flight, ran ≥ ' + ms(s.open_ms) + ' until its worker stopped' : ms(s.duration_ms)) + ' · ' + s.mode;
    if (s.tokens) meta += ' · ' + s.tokens.input + '→' + s.tokens.output + ' tok';
    if (s.attempts > 1) meta += ' · ' + s.attempts + ' attempts';
    if (s.decision) meta += ' · ' + s.decision;
    if (s.settled) meta += ' · ' + s.settled;
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
