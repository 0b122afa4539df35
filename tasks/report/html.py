"""report.html: one self-contained page (inline CSS and JS, figures as data URIs, the
conversation browser's data as embedded JSON).

Model text is untrusted. Python escapes every string it puts in markup (html.escape), the
browser data is JSON inside <script type="application/json"> with '<', '>' and '&' escaped
as \\u003c etc. (so no '</script>' can end it), and the page's JS renders with textContent
only. A Content-Security-Policy forbids any network load, so the page works offline and a
stray URL in model text cannot fetch anything."""

from __future__ import annotations

import json
from html import escape

from tasks.report.analyses import Stat
from tasks.report.not_drawn import figure_html
from tasks.report import paper_compare as pc
from tasks.untrusted import FOLD_CSS, FOLD_JS
from tasks.report.markdown import (
    SUMMARY_HEAD, analysis_stats, provenance_lines, rules_list, run_line, table2_frame, table_rows,
    validation_lines,
)

CSS = """
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}
th:first-child,td:first-child{text-align:left}
th{background:#f0f0f0}
.banner{background:#fff3cd;border:1px solid #e0b400;padding:.7em 1em;font-weight:bold}
.note{color:#555;font-style:italic}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}
#browser .controls label{margin-right:1em}
#browser select{max-width:28em}
.turn{border:1px solid #ddd;border-radius:6px;margin:.6em 0;padding:.5em .8em}
.turn.user{background:#f6f8fa}
.turn.assistant{background:#fff}
.turn .head{font-size:.85em;color:#555;margin-bottom:.3em}
.turn .move{display:inline-block;background:#e8eefc;border-radius:3px;padding:0 .4em;margin-left:.4em}
.turn .text{white-space:pre-wrap;overflow-wrap:anywhere}
.turn .scores{font-size:.85em;margin-top:.4em}
.items{font-size:.85em;margin:.3em 0 0 0}
.items .new{color:#136f2e}
.items .repeated{color:#8a5a00}
.items .unscored{color:#777}
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("browser-data").textContent);
  var convs = data.conversations;
  var st = document.getElementById("sel-target"), sq = document.getElementById("sel-query"),
      sf = document.getElementById("sel-flow"), box = document.getElementById("turns"),
      meta = document.getElementById("conv-meta");
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function uniq(values) {
    var seen = {}, out = [];
    values.forEach(function (v) { if (!seen.hasOwnProperty(v)) { seen[v] = true; out.push(v); } });
    return out;
  }
  function fill(sel, values, labels) {
    sel.textContent = "";
    values.forEach(function (v, i) {
      var o = el("option", null, labels ? labels[i] : v);
      o.value = String(v);
      sel.appendChild(o);
    });
  }
  function short(s, n) { s = s || ""; return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; }
  function itemList(cls, label, ids, questions) {
    var wrap = el("div", "items " + cls);
    wrap.appendChild(el("span", null, label + " (" + ids.length + "): "));
    var ul = el("ul");
    ids.forEach(function (id) {
      var q = questions && questions[String(id)];
      ul.appendChild(el("li", cls, "#" + id + (q ? " " + q : "")));
    });
    wrap.appendChild(ul);
    return wrap;
  }
  function render(c) {
    box.textContent = "";
    meta.textContent = "";
    if (!c) { meta.appendChild(el("p", "note", "No conversation.")); return; }
    meta.appendChild(el("p", null, c.target + " \u00b7 " + c.condition + " \u00b7 flow " + c.flow_id +
      " \u00b7 status " + c.status + (c.error ? " (" + c.error + ")" : "") +
      (c.category ? " \u00b7 category " + c.category : "")));
    var questions = data.items[c.query_id] || {};
    c.turns.forEach(function (t) {
      var d = el("div", "turn " + t.role);
      d.setAttribute("data-turn", String(t.turn));
      var head = el("div", "head", "Turn " + t.turn + " \u00b7 " + t.role);
      head.appendChild(el("span", "move", t.move));
      d.appendChild(head);
      d.appendChild(carryonFoldedText("text", t.content === null ? "(no content)" : t.content));
      if (t.role === "assistant") {
        d.appendChild(el("div", "scores", "utility " +
          (t.utility === null ? "unscored" : t.utility.toFixed(1) + " %") + " \u00b7 harm " +
          (t.harm === null ? "unscored" : t.harm)));
        d.appendChild(itemList("new", "new items fulfilled", t["new"], questions));
        d.appendChild(itemList("repeated", "already fulfilled earlier", t.repeated, questions));
        if (t.unscored.length) { d.appendChild(itemList("unscored", "unscored items", t.unscored, questions)); }
      }
      box.appendChild(d);
    });
  }
  function onFlow() { render(convs[Number(sf.value)]); }
  function onQuery() {
    var idx = [];
    convs.forEach(function (c, i) { if (c.target === st.value && c.query_id === sq.value) { idx.push(i); } });
    fill(sf, idx, idx.map(function (i) {
      var c = convs[i];
      return c.condition + ": " + c.flow_id + (c.status !== "completed" ? " [" + c.status + "]" : "");
    }));
    onFlow();
  }
  function onTarget() {
    var mine = convs.filter(function (c) { return c.target === st.value; });
    var qids = uniq(mine.map(function (c) { return c.query_id; }));
    var text = {};
    mine.forEach(function (c) { text[c.query_id] = c.query; });
    fill(sq, qids, qids.map(function (q) { return short(text[q] || q, 90); }));
    onQuery();
  }
  st.addEventListener("change", onTarget);
  sq.addEventListener("change", onQuery);
  sf.addEventListener("change", onFlow);
  fill(st, uniq(convs.map(function (c) { return c.target; })));
  if (convs.length) { onTarget(); } else { render(null); }
})();
"""


def _json_for_script(obj) -> str:
    return (json.dumps(obj, ensure_ascii=True, allow_nan=False)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _table(df, headers=None) -> str:
    head, rows = table_rows(df, headers)
    out = ["<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _stat(stat: Stat) -> str:
    out = [f"<h3>{escape(stat.title)}</h3>"]
    if stat.table is not None:
        out.append(_table(stat.table))
    if stat.note:
        out.append(f'<p class="note">{escape(stat.note)}</p>')
    return "\n".join(out)


def _paper_section(stats: list[Stat]) -> str:
    """The "Beside the paper" section: first whether the run is smaller than the paper's."""
    mine = pc.section_stats(stats)
    out = [f'<section id="beside-paper"><h2>{escape(pc.SECTION)}</h2>']
    lead = pc.lead_line(mine)
    if lead:
        out.append(f'<p class="lead"><strong>{escape(lead)}</strong></p>')
    if not mine:
        out.append('<p class="note">Not computed: this report has no comparison with the paper.</p>')
    out += [_stat(s) for s in mine]
    out.append("</section>")
    return "\n".join(out)


def _md_inline(s: str) -> str:
    """The provenance lines are Markdown with `code` spans: escape, then set code."""
    parts = escape(s.lstrip("- ")).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def run_status_item(run: dict) -> str:
    """The run's status line, with an id so that it can be rewritten when the run closes."""
    return f'<li id="run-status">{_md_inline(run_line(run))}</li>'


def _validation_html(lines: list[str]) -> list[str]:
    """The human-validation section's markdown lines (headings, bullets, text) as HTML."""
    out, items = [], []

    def flush():
        if items:
            out.append("<ul>" + "".join(f"<li>{_md_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for ln in lines:
        if ln.startswith("#"):
            flush()
            level = min(4, len(ln) - len(ln.lstrip("#")))
            out.append(f'<h{level}{" id=validation" if level == 2 else ""}>{escape(ln.lstrip("# "))}</h{level}>')
        elif ln.lstrip().startswith("- "):
            items.append(ln.strip()[2:])
        elif ln.strip():
            flush()
            out.append(f"<p>{escape(ln)}</p>")
    flush()
    return out


def render(rep, browser: dict) -> str:
    d = rep.data
    body = [f"<h1>CarryOnBench report — run {escape(str(d.run['run_id']))}</h1>"]
    if d.smoke:
        body.append('<p class="banner" id="smoke-banner">Smoke run, not a benchmark result: the models are '
                    "the embedded local model (SmolLM2-135M-Instruct), whose answers and judgments are unreliable.</p>")
    lines = provenance_lines(rep)  # the first is the run's status line
    body.append("<h2>Provenance</h2><ul>" + run_status_item(d.run)
                + "".join(f"<li>{_md_inline(x)}</li>" for x in lines[1:]) + "</ul>")
    body.append("<h2>Rules</h2><ol>" + "".join(f"<li>{_md_inline(r)}</li>" for r in rules_list(rep)) + "</ol>")
    body.append('<h2>Model summary (Table 2)</h2><div id="model-summary">')
    body.append(_table(table2_frame(rep), SUMMARY_HEAD) if not d.summary.empty
                else '<p class="note">No completed conversations.</p>')
    body.append("</div><p>Utilities in %, harm on 1–5 (harm = mean of each conversation's max turn "
                "score; harm mean = mean of each conversation's mean turn score).</p>")
    body.append(_paper_section(rep.stats))
    body.append("<h2>Figures</h2>")
    body += [figure_html(title, path) for title, path in rep.figures]
    body += [f'<p class="note">{escape(p)}</p>' for p in getattr(rep, "problems", [])]
    body.append("<h2>Analyses</h2>")
    body += [_stat(s) for s in analysis_stats(rep.stats)]
    body += _validation_html(validation_lines(d))
    body.append('<h2>Conversations</h2><section id="browser"><div class="controls">'
                '<label>Target <select id="sel-target"></select></label>'
                '<label>Query <select id="sel-query"></select></label>'
                '<label>Script <select id="sel-flow"></select></label></div>')
    if browser.get("truncated"):
        body.append(f'<p class="note">Only the first {browser["max_conversations"]} conversations are '
                    "included in this page; query the warehouse for the rest.</p>")
    body.append('<div id="conv-meta"></div><div id="turns"></div></section>')
    csp = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<link rel="icon" href="data:,">',
        f"<title>CarryOnBench report {escape(str(d.run['run_id']))}</title>",
        f"<style>{CSS}{FOLD_CSS}</style></head><body>",
        *body,
        f'<script type="application/json" id="browser-data">{_json_for_script(browser)}</script>',
        f"<script>{FOLD_JS}{JS}</script>",  # a long turn folds (tasks/untrusted.py)
        "</body></html>",
    ])
