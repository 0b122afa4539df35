"""CarryOnBench's report.html: one self-contained page (inline CSS and JS, figures as data
URIs, the conversation browser's data as embedded JSON), on the shell every report page
shares (tasks/report/page_base.py: the escaping rules, the Content-Security-Policy)."""

from __future__ import annotations

from html import escape

from tasks.benchmarks.carryon.report.analyses import Stat
from tasks.benchmarks.carryon.report.not_drawn import figure_html
from tasks.benchmarks.carryon.report import paper_compare as pc
from tasks.report.page_base import md_inline, page_pieces, run_status_item
from tasks.benchmarks.carryon.report.markdown import (
    SUMMARY_HEAD, analysis_stats, provenance_lines, rules_list, table2_frame, validation_lines,
)
from tasks.report.md_common import table_rows

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("browser-data").textContent);
  var convs = data.conversations;
  var st = document.getElementById("sel-target"), sq = document.getElementById("sel-query"),
      sf = document.getElementById("sel-flow"), box = document.getElementById("turns"),
      meta = document.getElementById("conv-meta");
  var el = carryonEl;
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
  carryonCascade(convs, st, sq, sf, "query_id", "query", function (c) {
    return c.condition + ": " + c.flow_id + (c.status !== "completed" ? " [" + c.status + "]" : "");
  }, render);
})();
"""


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


def _validation_html(lines: list[str]) -> list[str]:
    """The human-validation section's markdown lines (headings, bullets, text) as HTML."""
    out, items = [], []

    def flush():
        if items:
            out.append("<ul>" + "".join(f"<li>{md_inline(i)}</li>" for i in items) + "</ul>")
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


def render(rep, browser: dict):
    """The page in pieces (page_base.page_pieces): its browser data streams (data.py)."""
    d = rep.data
    body = [f"<h1>CarryOnBench report — run {escape(str(d.run['run_id']))}</h1>"]
    if d.smoke:
        body.append('<p class="banner" id="smoke-banner">Smoke run, not a benchmark result: the models are '
                    "the embedded local model (SmolLM2-135M-Instruct), whose answers and judgments are unreliable.</p>")
    lines = provenance_lines(rep)  # the first is the run's status line
    body.append("<h2>Provenance</h2><ul>" + run_status_item(d.run)
                + "".join(f"<li>{md_inline(x)}</li>" for x in lines[1:]) + "</ul>")
    body.append("<h2>Rules</h2><ol>" + "".join(f"<li>{md_inline(r)}</li>" for r in rules_list(rep)) + "</ol>")
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
    return page_pieces(f"CarryOnBench report {d.run['run_id']}", body, browser, JS)
