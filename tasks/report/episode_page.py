"""report.html of an episode benchmark (every benchmark whose report is assembled from
sections): the report's Markdown as HTML, then a conversation browser over the run's
episodes, each assistant turn with its judges' verdicts (the selected verdict sets).

The Markdown comes from the sections (tables of numbers and model names, lists, a few
paragraphs), and a section may quote model text, so it is rendered by a small converter that
escapes every character it does not set itself: headings, pipe tables, bullet lists,
paragraphs, `code` and **bold**; anything else shows as the text it is. The page shell and
the escaping rules are tasks/report/page_base.py's."""

from __future__ import annotations

import json
import re
from html import escape

from tasks.report.page_base import page, run_status_item

# Episodes in the browser at most (the warehouse holds the rest); model text per turn is
# folded on the page, a verdict's reason cut here (it is the judge's note, not the answer).
MAX_EPISODES = 2000
MAX_REASON_CHARS = 300

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("browser-data").textContent);
  var eps = data.episodes;
  var st = document.getElementById("sel-target"), si = document.getElementById("sel-item"),
      se = document.getElementById("sel-episode"), box = document.getElementById("turns"),
      meta = document.getElementById("conv-meta");
  var el = carryonEl;
  function verdictText(v) {
    var value = v.value !== null ? String(v.value) : (v.label !== null ? v.label : "unscored");
    if (v.value !== null && v.label !== null) { value += " (" + v.label + ")"; }
    // A unit's verdict says what the unit asks (Ben-Util: the checklist's question).
    var what = v.question ? v.question + " (" + v.measure.split(":")[0] + ": " + value + ")"
                          : v.measure + ": " + value;
    return v.kind + " \u00b7 " + what + (v.evidence ? " \u2014 \u201c" + v.evidence + "\u201d" : "") +
      (v.reason ? " \u2014 " + v.reason : "");
  }
  function render(e) {
    box.textContent = "";
    meta.textContent = "";
    if (!e) { meta.appendChild(el("p", "note", "No episode.")); return; }
    meta.appendChild(el("p", null, e.target + " \u00b7 " + e.condition + " \u00b7 item " + e.item_id +
      " \u00b7 status " + e.status + " \u00b7 ended: " + e.termination + (e.error ? " (" + e.error + ")" : "")));
    e.turns.forEach(function (t) {
      var d = el("div", "turn " + t.role);
      d.setAttribute("data-turn", String(t.turn));
      var head = el("div", "head", "Turn " + t.turn + " \u00b7 " + t.role);
      if (t.act) { head.appendChild(el("span", "move", t.act)); }
      if (t.blocked) { head.appendChild(el("span", "move", "blocked")); }
      d.appendChild(head);
      d.appendChild(carryonFoldedText("text", t.content === null ? "(no content)" : t.content));
      if (t.verdicts.length) {
        var ul = el("ul", "items");
        t.verdicts.forEach(function (v) {
          ul.appendChild(el("li", v.value === null && v.label === null ? "unscored" : null, verdictText(v)));
        });
        d.appendChild(ul);
      }
      box.appendChild(d);
    });
  }
  carryonCascade(eps, st, si, se, "item_id", "opening", function (e) {
    return e.condition + (e.status !== "completed" ? " [" + e.status + "]" : "");
  }, render);
})();
"""

_SEPARATOR = re.compile(r"\|?(\s*:?-{3,}:?\s*\|)*\s*:?-{3,}:?\s*\|?")
_INLINE = re.compile(r"`([^`]*)`|\*\*([^*]+)\*\*")


def _inline(text: str) -> str:
    """One line's text, escaped, with `code` and **bold** set."""
    out, last = [], 0
    for m in _INLINE.finditer(text):
        out.append(escape(text[last:m.start()]))
        out.append(f"<code>{escape(m.group(1))}</code>" if m.group(1) is not None
                   else f"<strong>{escape(m.group(2))}</strong>")
        last = m.end()
    return "".join(out) + escape(text[last:])


def _cells(line: str) -> list[str]:
    # A pipe inside a cell is written "\|" (tasks/report/md_common.py).
    inner = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def md_html(text: str) -> list[str]:
    """The subset of Markdown the sections write, as escaped HTML blocks."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif m := re.match(r"^(#{1,4}) (.*)$", line):
            level = len(m.group(1))
            out.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
            i += 1
        elif line.lstrip().startswith("|"):
            block = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                block.append(lines[i])
                i += 1
            # The header, then (as md_lines writes it) a separator row of dashes; a cell of
            # "-" in a later row is a value.
            if len(block) > 1 and _SEPARATOR.fullmatch(block[1].strip()):
                del block[1]
            head, body = _cells(block[0]), [_cells(x) for x in block[1:]]
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head)
                       + "</tr></thead><tbody>" + "".join(
                           "<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>"
                           for r in body) + "</tbody></table>")
        elif line.lstrip().startswith("- "):
            items = []
            while i < len(lines) and lines[i].lstrip().startswith("- "):
                items.append(f"<li>{_inline(lines[i].lstrip()[2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not re.match(
                    r"^(#{1,4} |\s*\||\s*- )", lines[i]):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{_inline(' '.join(para))}</p>")
    return out


def browser_data(wh, spec, max_episodes: int = MAX_EPISODES) -> dict:
    """The run's episodes for the browser: turns in order, each assistant turn with the
    verdicts of each judge kind's latest set per item (views_engine.sql B1), a unit's verdict
    with what the unit asks (Ben-Util: its checklist question) and the quote it rests on."""
    benchmark = spec.name
    eps = wh.query(
        "SELECT e.episode_id, e.item_id, e.condition, e.target, e.status, e.termination, e.error, "
        "i.item_id AS stored_id, i.source_row, i.prompts, i.hidden, i.meta FROM episodes e "
        "LEFT JOIN bench_items i ON i.benchmark = e.benchmark AND i.item_id = e.item_id "
        "WHERE e.benchmark = ? ORDER BY e.target, e.item_id, e.condition, e.episode_id LIMIT ?",
        [benchmark, max_episodes + 1])
    truncated = len(eps) > max_episodes
    eps = eps[:max_episodes]
    ids = [e["episode_id"] for e in eps]
    turns: dict[str, list[dict]] = {}
    for t in wh.query("SELECT episode_id, position, role, model_turn, content, blocked, act "
                      "FROM episode_turns WHERE list_contains(?, episode_id) "
                      "ORDER BY episode_id, position", [ids]):
        turns.setdefault(t["episode_id"], []).append(t)
    texts = _unit_texts(spec, eps)
    verdicts: dict[tuple, list[dict]] = {}
    for v in wh.query("SELECT v.episode_id, e.item_id, v.position, v.kind, v.measure, v.value, "
                      "v.label, v.reason, v.evidence FROM verdicts v JOIN episodes e USING (episode_id) "
                      "JOIN item_verdict_sets s ON s.judgment_set_id = v.judgment_set_id "
                      "AND s.benchmark = e.benchmark AND s.item_id = e.item_id "
                      "WHERE e.benchmark = ? AND list_contains(?, v.episode_id) "
                      "ORDER BY v.kind, v.position, TRY_CAST(split_part(v.measure, ':', 2) AS INTEGER), "
                      "v.measure", [benchmark, ids]):
        name, _, unit = v["measure"].partition(":")
        verdicts.setdefault((v["episode_id"], v["position"]), []).append(
            {"kind": v["kind"], "measure": v["measure"], "value": v["value"],
             "label": v["label"], "reason": _cut(v["reason"]),
             "question": texts.get((v["item_id"], v["kind"]), {}).get(unit) if unit else None,
             "evidence": _cut(v["evidence"])})
    out = []
    for e in eps:
        prompts = json.loads(e["prompts"]) if e["prompts"] else {}
        ts = turns.get(e["episode_id"], [])
        out.append({
            "target": e["target"], "item_id": e["item_id"], "condition": e["condition"],
            "status": e["status"], "termination": e["termination"], "error": e["error"],
            "opening": ts[0]["content"] if ts else next(iter(prompts.values()), e["item_id"]),
            "turns": [{"turn": t["model_turn"], "role": t["role"], "content": t["content"],
                       "blocked": bool(t["blocked"]), "act": t["act"],
                       "verdicts": verdicts.get((e["episode_id"], t["position"]), [])}
                      for t in ts]})
    return {"episodes": out, "truncated": truncated, "max_episodes": max_episodes}


def _cut(text: str | None) -> str | None:
    return text if not text or len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 1] + "\u2026"


def _unit_texts(spec, eps: list[dict]) -> dict[tuple[str, str], dict[str, str]]:
    """(item id, judge kind) -> what each of the judge's units asks of that item, from the
    item as the episodes stage stored it (with what the prepare stages added: its checklist)."""
    from tasks.core.items import Item

    judges = [j for _, j in spec.judge_objects()]
    out: dict[tuple[str, str], dict[str, str]] = {}
    for e in eps:
        if e["stored_id"] is None or any((e["item_id"], j.kind) in out for j in judges):
            continue
        item = Item.from_row({**e, "item_id": e["stored_id"]})
        for j in judges:
            out[(e["item_id"], j.kind)] = j.unit_texts(item)
    return out


def render(title: str, run: dict, markdown: str, browser: dict) -> str:
    """The page: the report's Markdown (its run line as the restampable status item), then
    the browser."""
    body = []
    for block in md_html(markdown):
        # The run's status line is rewritten when the run closes (page_base.restamp_status).
        if block.startswith("<ul><li>Run: "):
            block = block.replace(block[4:block.index("</li>") + 5], run_status_item(run), 1)
        body.append(block)
    body.append('<h2>Conversations</h2><section id="browser"><div class="controls">'
                '<label>Target <select id="sel-target"></select></label>'
                '<label>Item <select id="sel-item"></select></label>'
                '<label>Episode <select id="sel-episode"></select></label></div>')
    if browser.get("truncated"):
        body.append(f'<p class="note">Only the first {browser["max_episodes"]} episodes are '
                    "included in this page; query the warehouse for the rest.</p>")
    body.append('<div id="conv-meta"></div><div id="turns"></div></section>')
    return page(title, body, browser, JS)

