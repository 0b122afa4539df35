"""One self-contained annotation page per annotator (offline, no server).

The data is embedded as JSON with <, > and & escaped; every text is rendered with
textContent; a Content-Security-Policy forbids any network load. Labels autosave in
localStorage (key ``carryon-validation:<sample uid>:<annotator>``: the uid hashes the sample's
id, when it was drawn and its units, so a page of another run's ``naturalness-0`` never
resumes this one's progress) and are exported as JSON (a
download link with a data: URL, and the same JSON in ``textarea#export``)."""

from __future__ import annotations

import hashlib
import json
from html import escape
from pathlib import Path

from tasks.untrusted import FOLD_CSS, FOLD_JS
from tasks.validation import ValidationError

FORMAT = "carryon-validation/1"


def _json_for_script(obj) -> str:
    return (json.dumps(obj, ensure_ascii=True, allow_nan=False)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def sample_spec(wh, sample_id: str, spec=None):
    """The spec of the benchmark a sample was drawn from: the one given (the config's), else
    the built-in spec it names, else the default benchmark's."""
    if spec is not None:
        return spec
    from tasks.bench import builtin_names, default_benchmark, load_spec

    rows = wh.query("SELECT params FROM validation_samples WHERE sample_id = ?", [sample_id])
    name = json.loads(rows[0]["params"]).get("benchmark") if rows else None
    return load_spec(name if name in builtin_names() else default_benchmark())


def page_data(wh, sample_id: str, annotator: str, spec=None) -> dict:
    with wh.connect():  # one attachment for the many small queries below
        return _page_data(wh, sample_id, annotator, sample_spec(wh, sample_id, spec))


def _page_data(wh, sample_id: str, annotator: str, spec) -> dict:
    from tasks.validation.report import kind_of

    s = wh.query("SELECT * FROM validation_samples WHERE sample_id = ?", [sample_id])
    if not s:
        raise ValidationError(f"no sample {sample_id!r} in the warehouse")
    kind = kind_of(s[0]["kind"])
    units = wh.query("""SELECT u.*, a.shown_order FROM validation_assignments a
                        JOIN validation_units u USING (sample_id, unit_id)
                        WHERE a.sample_id = ? AND a.annotator = ? ORDER BY a.shown_order""", [sample_id, annotator])
    out = [{"unit_id": u["unit_id"], "position": u["position"],
            "conversations": kind.conversations(wh, spec, u)} for u in units]
    every_unit = [r["unit_id"] for r in wh.query(
        "SELECT unit_id FROM validation_units WHERE sample_id = ? ORDER BY unit_id", [sample_id])]
    uid = hashlib.sha256(json.dumps([sample_id, str(s[0]["created"]), every_unit])
                         .encode()).hexdigest()[:16]
    return {"format": FORMAT, "sample_id": sample_id, "sample_uid": uid, "kind": kind.name,
            "asks": kind.asks, "annotator": annotator,
            "scale": kind.scale, "instructions": kind.instructions, "units": out}


CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem;color:#222}
.turn{border-left:4px solid #ccc;padding:.3rem .6rem;margin:.5rem 0;white-space:pre-wrap;overflow-wrap:anywhere}
.turn.user{border-color:#2a6fdb;background:#f3f7ff}.turn.assistant{border-color:#888;background:#fafafa}
.turn.target{outline:2px solid #d33}.role{font-weight:600;font-size:.85rem;color:#555}
.ask{margin:.3rem 0 0;font-size:.9rem}.ask label{margin-right:.8rem;white-space:nowrap}
.conv{border:1px solid #ddd;padding:.5rem;margin:.5rem 0}.items li{margin:.3rem 0}
#nav{position:sticky;top:0;background:#fff;padding:.4rem 0;border-bottom:1px solid #ddd}
textarea{width:100%;height:8rem;font-family:monospace}
"""

JS = r"""
(() => {
  'use strict';
  const D = JSON.parse(document.getElementById('data').textContent);
  const KEY = 'carryon-validation:' + D.sample_uid + ':' + D.annotator;
  let st = {labels: {}, index: 0};
  try { const s = JSON.parse(localStorage.getItem(KEY) || 'null'); if (s && s.labels) st = s; } catch (e) {}
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
                                   if (text !== undefined && text !== null) e.textContent = String(text); return e; };
  // Every question of a unit: [key, {unit_id, conversation_id, position, item_id}]
  function questions(u) {
    const out = [];
    for (const c of u.conversations) {
      if (D.asks === 'user_turns') {
        for (const t of c.turns) if (t.role === 'user')
          out.push({unit_id: u.unit_id, conversation_id: c.conversation_id, position: t.position, item_id: 0});
      } else if (D.asks === 'checklist') {
        for (const it of c.items)
          out.push({unit_id: u.unit_id, conversation_id: c.conversation_id, position: -1, item_id: it.item_id});
      } else {
        out.push({unit_id: u.unit_id, conversation_id: c.conversation_id, position: u.position, item_id: 0});
      }
    }
    return out;
  }
  const keyOf = q => [q.unit_id, q.conversation_id, q.position, q.item_id].join('|');
  const all = D.units.flatMap(questions);
  function exportObj() {
    const labels = all.filter(q => keyOf(q) in st.labels).map(q => Object.assign({}, q, {value: st.labels[keyOf(q)]}));
    return {format: D.format, sample_id: D.sample_id, kind: D.kind, annotator: D.annotator, labels: labels};
  }
  function save() {
    try { localStorage.setItem(KEY, JSON.stringify(st)); } catch (e) {}
    const text = JSON.stringify(exportObj(), null, 1);
    document.getElementById('export').value = text;
    const a = document.getElementById('download');
    a.href = 'data:application/json;charset=utf-8,' + encodeURIComponent(text);
    a.download = 'annotations-' + D.sample_id + '-' + D.annotator + '.json';
    const done = all.filter(q => keyOf(q) in st.labels).length;
    const unitsDone = D.units.filter(u => questions(u).every(q => keyOf(q) in st.labels)).length;
    document.getElementById('progress').textContent =
      'Item ' + (D.units.length ? st.index + 1 : 0) + ' of ' + D.units.length + ' \u00b7 ' + unitsDone +
      ' complete \u00b7 ' + done + ' of ' + all.length + ' labels';
  }
  function ask(q) {
    const box = el('div', 'ask');
    const k = keyOf(q);
    for (const [v, name] of D.scale) {
      const lab = el('label');
      const inp = document.createElement('input');
      inp.type = 'radio'; inp.name = k; inp.value = String(v);
      inp.dataset.key = k;
      if (st.labels[k] === v) inp.checked = true;
      inp.addEventListener('change', () => { st.labels[k] = v; save(); });
      lab.appendChild(inp); lab.appendChild(document.createTextNode(' ' + name));
      box.appendChild(lab);
    }
    return box;
  }
  function render() {
    const root = document.getElementById('unit');
    root.textContent = '';
    const u = D.units[st.index];
    if (!u) { root.appendChild(el('p', null, 'Nothing to annotate.')); save(); return; }
    const qs = questions(u);
    u.conversations.forEach((c, ci) => {
      const box = el('div', 'conv');
      if (u.conversations.length > 1) box.appendChild(el('h3', null, 'Conversation ' + (ci === 0 ? 'A' : 'B')));
      for (const t of c.turns) {
        const tb = el('div', 'turn ' + t.role + (D.asks === 'target_turn' && t.position === u.position ? ' target' : ''));
        tb.appendChild(el('div', 'role', (t.role === 'user' ? 'User' : 'Assistant') + ' \u00b7 turn ' + t.model_turn));
        tb.appendChild(carryonFoldedText('text', t.content === null ? '(no content)' : t.content));
        const q = qs.find(q => q.conversation_id === c.conversation_id && q.position === t.position);
        if (q && D.asks !== 'checklist') tb.appendChild(ask(q));
        box.appendChild(tb);
      }
      if (D.asks === 'checklist') {
        box.appendChild(el('h4', null, 'Checklist'));
        const ul = el('ul', 'items');
        for (const it of c.items) {
          const li = el('li', null, it.item_id + '. ' + (it.question || '(item ' + it.item_id + ')'));
          li.appendChild(ask(qs.find(q => q.conversation_id === c.conversation_id && q.item_id === it.item_id)));
          ul.appendChild(li);
        }
        box.appendChild(ul);
      }
      root.appendChild(box);
    });
    document.getElementById('prev').disabled = st.index === 0;
    document.getElementById('next').disabled = st.index >= D.units.length - 1;
    save();
  }
  document.getElementById('prev').addEventListener('click', () => { if (st.index > 0) { st.index--; render(); } });
  document.getElementById('next').addEventListener('click', () => {
    if (st.index < D.units.length - 1) { st.index++; render(); } });
  document.getElementById('instructions').textContent = D.instructions;
  document.getElementById('who').textContent = 'Annotator ' + D.annotator + ' \u00b7 sample ' + D.sample_id;
  if (st.index >= D.units.length) st.index = 0;
  render();
})();
"""


def page_html(data: dict) -> str:
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<link rel="icon" href="data:,">',
        f"<title>CarryOnBench validation {escape(data['sample_id'])} {escape(data['annotator'])}</title>",
        f"<style>{CSS}{FOLD_CSS}</style></head><body>",
        f"<h1>Human validation: {escape(data['kind'])}</h1>",
        '<p id="who"></p><p id="instructions"></p>',
        '<div id="nav"><button id="prev" type="button">Previous</button> '
        '<button id="next" type="button">Next</button> <span id="progress"></span></div>',
        '<div id="unit"></div>',
        "<h2>Export</h2><p>When done, download the file and send it back "
        '(or copy the text below).</p><p><a id="download" href="#">Download annotations (JSON)</a></p>',
        '<textarea id="export" readonly></textarea>',
        f'<script type="application/json" id="data">{_json_for_script(data)}</script>',
        f"<script>{FOLD_JS}{JS}</script>", "</body></html>"])  # long turns fold (tasks/untrusted.py)


def write_pages(wh, sample_id: str, out_dir: Path, spec=None) -> list[Path]:
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValidationError(f"{out_dir}: cannot create the folder: {e.strerror}") from None
    annotators = [r["annotator"] for r in wh.query(
        "SELECT DISTINCT annotator FROM validation_assignments WHERE sample_id = ? ORDER BY 1", [sample_id])]
    paths = []
    for a in annotators:
        p = out_dir / f"{sample_id}-{a}.html"
        try:
            p.write_text(page_html(page_data(wh, sample_id, a, spec)), encoding="utf-8")
        except OSError as e:
            raise ValidationError(f"{p}: cannot write: {e.strerror}") from None
        paths.append(p)
    return paths
