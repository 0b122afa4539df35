"""What every report.html shares, CarryOnBench's and the episode benchmarks': the style, the
page shell (a Content-Security-Policy that forbids any network load, so a page works offline
and a URL in model text fetches nothing), the run's status line (rewritten in place when the
run closes: ``restamp_status``) and JSON data for the page's script.

Model text is untrusted. Every string put in markup is escaped (html.escape); data for a
script is JSON inside <script type="application/json"> with '<', '>' and '&' escaped as
\\u003c etc. (so no '</script>' can end it); the scripts render with textContent only."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

from tasks.report.md_common import run_line
from tasks.untrusted import FOLD_CSS, FOLD_JS

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
# The browsers' shared helpers (plain ES5, textContent only), before each page's own script.
HELPERS_JS = r"""
function carryonEl(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) { e.className = cls; }
  if (text !== undefined && text !== null) { e.textContent = String(text); }
  return e;
}
function carryonUniq(values) {
  var seen = {}, out = [];
  values.forEach(function (v) { if (!seen.hasOwnProperty(v)) { seen[v] = true; out.push(v); } });
  return out;
}
function carryonFill(sel, values, labels) {
  sel.textContent = "";
  values.forEach(function (v, i) {
    var o = carryonEl("option", null, labels ? labels[i] : v);
    o.value = String(v);
    sel.appendChild(o);
  });
}
function carryonShort(s, n) { s = s || ""; return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; }
// A browser's three selects: a target, then a group of its rows (a query, an item: rows share
// row[groupKey], labelled by row[groupText]), then one row (labelled by rowLabel), drawn by
// render(row) (render(null) when there is none).
function carryonCascade(rows, st, sg, sr, groupKey, groupText, rowLabel, render) {
  function onRow() { render(rows[Number(sr.value)]); }
  function onGroup() {
    var idx = [];
    rows.forEach(function (r, i) { if (r.target === st.value && r[groupKey] === sg.value) { idx.push(i); } });
    carryonFill(sr, idx, idx.map(function (i) { return rowLabel(rows[i]); }));
    onRow();
  }
  function onTarget() {
    var mine = rows.filter(function (r) { return r.target === st.value; });
    var ids = carryonUniq(mine.map(function (r) { return r[groupKey]; }));
    var text = {};
    mine.forEach(function (r) { text[r[groupKey]] = r[groupText]; });
    carryonFill(sg, ids, ids.map(function (g) { return carryonShort(text[g] || g, 90); }));
    onGroup();
  }
  st.addEventListener("change", onTarget);
  sg.addEventListener("change", onGroup);
  sr.addEventListener("change", onRow);
  carryonFill(st, carryonUniq(rows.map(function (r) { return r.target; })));
  if (rows.length) { onTarget(); } else { render(null); }
}
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def json_for_script(obj) -> str:
    return "".join(json_pieces(obj))


class JsonArray:
    """A JSON array written piece by piece (``json_pieces``): ``chunks()`` yields lists of its
    elements, read when the page is written, so a page's data (thousands of conversations
    with their turns) is never whole in memory. ``n`` is its length, known beforehand."""

    def __init__(self, n: int, chunks):
        self.n, self.chunks = n, chunks

    def __len__(self) -> int:
        return self.n


def _escape_json(text: str) -> str:
    # Per character, so pieces escape alike whole or split.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def json_pieces(obj):
    """``obj`` as script JSON in pieces, joined equal to ``json.dumps(obj)`` (its default
    separators) escaped: a dict's ``JsonArray`` values are written a chunk at a time."""
    if isinstance(obj, JsonArray):
        yield "["
        first = True
        for chunk in obj.chunks():
            for x in chunk:
                yield ("" if first else ", ") + _escape_json(
                    json.dumps(x, ensure_ascii=True, allow_nan=False))
                first = False
        yield "]"
    elif isinstance(obj, dict) and any(isinstance(v, JsonArray) for v in obj.values()):
        yield "{"
        for i, (k, v) in enumerate(obj.items()):
            yield ("" if i == 0 else ", ") + _escape_json(json.dumps(str(k), ensure_ascii=True)) + ": "
            yield from json_pieces(v)
        yield "}"
    else:
        yield _escape_json(json.dumps(obj, ensure_ascii=True, allow_nan=False))


def md_inline(s: str) -> str:
    """A line of Markdown with `code` spans: escaped, then the code set."""
    parts = escape(s.lstrip("- ")).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def run_status_item(run: dict) -> str:
    """The run's status line, with an id so that it can be rewritten when the run closes."""
    return f'<li id="run-status">{md_inline(run_line(run))}</li>'


def page(title: str, body: list[str], data: dict, script: str) -> str:
    """A whole page: ``body`` (markup), ``data`` as the script's JSON (id ``browser-data``)
    and ``script`` after the long-turn folding (tasks/untrusted.py) and the helpers every
    page's browser has (``HELPERS_JS``)."""
    return "".join(page_pieces(title, body, data, script))


def page_pieces(title: str, body: list[str], data: dict, script: str):
    """``page`` in pieces, for writing a page whose data streams (``JsonArray``)."""
    yield "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<link rel="icon" href="data:,">', f"<title>{escape(title)}</title>",
        f"<style>{CSS}{FOLD_CSS}</style></head><body>", *body,
        '<script type="application/json" id="browser-data">'])
    yield from json_pieces(data)
    yield "\n".join(["</script>", f"<script>{FOLD_JS}{HELPERS_JS}{script}</script>",
                     "</body></html>"])


def write_page(path: Path, pieces) -> None:
    """Write a page's pieces to ``path`` as they come (UTF-8)."""
    with open(path, "w", encoding="utf-8") as f:
        for piece in pieces:
            f.write(piece)


_MD_RUN_LINE = re.compile(r"^- Run: `.*$", re.M)
_HTML_RUN_LINE = re.compile(r'<li id="run-status">.*?</li>', re.S)


def restamp_status(folder: Path, run: dict) -> None:
    """Rewrite only the run's status line of a written report (report.md and report.html)
    from ``run`` (the runs row). The report is written inside its run, before the run's row
    is closed; the run calls this after closing it, so the report shows the final status.
    Each file is replaced atomically (a temporary file renamed over it)."""
    for name, pattern, line in (("report.md", _MD_RUN_LINE, run_line(run)),
                                ("report.html", _HTML_RUN_LINE, run_status_item(run))):
        path = folder / name
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        new, n = pattern.subn(lambda _m: line, text, count=1)
        if n:
            tmp = path.with_name(f".{name}.tmp")
            tmp.write_text(new, encoding="utf-8")
            tmp.replace(path)
