"""The ClarifyMT report section: per mode (live, static prefix) and target, act accuracy with
under- and over-clarification, a depth x persona heat map (inline SVG beside its table), act
accuracy by dimension and depth, answer accuracy by depth and persona, slots elicited before
answering, turns to answer, question quality and the persona user's fidelity (move checker).

The rules are in views.sql beside the spec (M1-M10). Every number is shown with the count it
rests on; a cell resting on fewer than ``min_n`` judged turns (or answers, replies) says
"too few (n=k; needs min_n)"; a table with nothing to show says "Not computed:" and why.
"""

from __future__ import annotations

import base64
from html import escape

from pydantic import BaseModel, ConfigDict, Field

from tasks.core.registry import section
from tasks.report.sections import md_table, number, section_views, view_prefix

TITLE = "ClarifyMT: when to ask and when to answer, with personas"
MODES = (("live", "live (the persona user replies)"), ("static", "static prefix (stored dialogue)"))


class SectionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_n: int = Field(1, ge=1, le=1000)  # judged turns a cell needs before it shows a number


def cell(value, n, min_n: int, pct: bool = True) -> str:
    """A number with its count, or "too few (n=k; needs min_n)"."""
    if n is None or n < min_n or value is None:
        return f"too few (n={n or 0}; needs {min_n})"
    return number(value, n, pct=pct, digits=None if pct else 2)


def _colour(v: float) -> str:
    # red (0) -> yellow (0.5) -> green (1)
    r, g = (255, int(510 * v)) if v < 0.5 else (int(510 * (1 - v)), 200)
    return f"rgb({r},{g},80)"


def heatmap_svg(rows: list[dict], personas: list[str], depths: list[int], min_n: int,
                title: str) -> str:
    """Act accuracy, personas down and depths across; grey where too few."""
    by = {(r["persona"], r["depth"]): r for r in rows}
    left, top, w, h = 130, 40, 80, 26
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + w * len(depths) + 10}" '
             f'height="{top + h * len(personas) + 10}" font-family="sans-serif" font-size="12">',
             f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>']
    for j, d in enumerate(depths):
        parts.append(f'<text x="{left + j * w + w / 2}" y="{top - 6}" text-anchor="middle">'
                     f'depth {d}</text>')
    for i, p in enumerate(personas):
        y = top + i * h
        parts.append(f'<text x="{left - 6}" y="{y + h / 2 + 4}" text-anchor="end">{escape(p)}</text>')
        for j, d in enumerate(depths):
            r = by.get((p, d))
            ok = r is not None and r["accuracy"] is not None and r["n_judged"] >= min_n
            fill = _colour(r["accuracy"]) if ok else "#dddddd"
            label = f"{r['accuracy']:.2f} ({r['n_judged']})" if ok else "too few"
            parts.append(f'<rect x="{left + j * w}" y="{y}" width="{w - 2}" height="{h - 2}" '
                         f'fill="{fill}"/><text x="{left + j * w + w / 2}" y="{y + h / 2 + 4}" '
                         f'text-anchor="middle">{escape(label)}</text>')
    parts.append("</svg>")
    data = base64.b64encode("".join(parts).encode()).decode()
    return f"![{escape(title)}](data:image/svg+xml;base64,{data})"


def _summary(rows: list[dict], min_n: int) -> list[str]:
    names = dict(MODES)
    body = [[names.get(r["mode"], r["mode"]), r["target"],
             cell(r["act_accuracy"], r["n_judged"], min_n),
             cell(r["under_clarification"], r["n_gold_ask"], min_n),
             cell(r["over_clarification"], r["n_gold_answer"], min_n),
             cell(r["answer_contains"], r["n_answers_scored"], min_n),
             cell(r["slot_recall"], r["n_slots_scored"], min_n),
             cell(r["question_quality"], r["n_questions_rated"], min_n, pct=False),
             "n/a" if r["turns_to_answer"] is None else f"{r['turns_to_answer']:.2f}",
             str(r["n_act_unscored"])] for r in rows]
    return md_table(["mode", "target", "act accuracy", "under-clarification",
                     "over-clarification", "answer accuracy (contains)",
                     "slots elicited before answering", "question quality (1-5)",
                     "turns to answer", "acts unscored"], body)


def _heat(acc: list[dict], min_n: int) -> list[str]:
    rows = [r for r in acc if r["dimension"] == "all" and r["depth"] is not None]
    if not rows:
        return ["Not computed: no act turn has a scored act yet."]
    out = []
    for mode, label in MODES:
        for target in sorted({r["target"] for r in rows if r["mode"] == mode}):
            mine = [r for r in rows if r["mode"] == mode and r["target"] == target]
            personas = sorted({r["persona"] for r in mine if r["persona"] != "all"})
            depths = sorted({r["depth"] for r in mine})
            by = {(r["persona"], r["depth"]): r for r in mine}
            out += ["", f"Act accuracy by depth and persona: {target}, {label}:", ""]
            out.append(heatmap_svg(mine, personas, depths, min_n, f"{target}: {mode}"))
            out += [""] + md_table(["persona"] + [f"depth {d}" for d in depths], [
                [p] + [cell(by[(p, d)]["accuracy"], by[(p, d)]["n_judged"], min_n)
                       if (p, d) in by else cell(None, 0, min_n) for d in depths]
                for p in personas + ["all"]])
    return out


def _by_dimension(acc: list[dict], min_n: int) -> list[str]:
    rows = [r for r in acc if r["persona"] == "all" and r["dimension"] != "all"]
    if not rows:
        return ["Not computed: no act turn has a scored act yet."]
    depths = sorted({r["depth"] for r in rows if r["depth"] is not None})
    by = {(r["mode"], r["target"], r["dimension"], r["depth"]): r for r in rows}
    keys = sorted({(r["mode"], r["target"], r["dimension"]) for r in rows})
    body = [[m, t, d] + [cell(by[(m, t, d, x)]["accuracy"], by[(m, t, d, x)]["n_judged"], min_n)
                         if (m, t, d, x) in by else cell(None, 0, min_n) for x in depths + [None]]
            for m, t, d in keys]
    return md_table(["mode", "target", "dimension"] + [f"depth {x}" for x in depths] + ["all depths"],
                    body)


def _clar(rows: list[dict], min_n: int) -> list[str]:
    rows = [r for r in rows if r["persona"] != "all" and r["depth"] is None]
    if not rows:
        return ["Not computed: no act turn has a scored act yet."]
    return md_table(["mode", "target", "persona", "under-clarification P(answer | gold ask)",
                     "over-clarification P(ask | gold answer)"],
                    [[r["mode"], r["target"], r["persona"],
                      cell(r["under_clarification"], r["n_gold_ask"], min_n),
                      cell(r["over_clarification"], r["n_gold_answer"], min_n)] for r in rows])


def _answers(rows: list[dict], min_n: int) -> list[str]:
    if not rows:
        return ["Not computed: no turn was read as an answer yet."]
    body = [[r["mode"], r["target"], "all" if r["depth"] is None else str(r["depth"]), r["persona"],
             cell(r["contains"], r["n_scored"], min_n), cell(r["token_f1"], r["n_scored"], min_n),
             cell(r["exact_match"], r["n_scored"], min_n), str(r["n_unscored"])] for r in rows]
    return md_table(["mode", "target", "depth", "persona", "contains", "token F1", "exact match",
                     "unscored"], body)


def _simple(rows: list[dict], cols: list[tuple], why: str) -> list[str]:
    if not rows:
        return [f"Not computed: {why}."]
    return md_table([c[0] for c in cols], [[c[1](r) for c in cols] for r in rows])


def why_empty(counts: dict) -> dict[str, str]:
    """The actual reason each judge's table is empty, from what was played and judged
    (``counts``: act turns by prediction, user replies, the judge kinds with a verdict set):
    a table is empty because there was nothing to judge, or because the judge never ran,
    and the report says which instead of guessing at the config."""
    acts = (f"{counts['n_act_turns']} act turns: {counts['n_ask']} asked, {counts['n_answer']} "
            f"answered, {counts['n_refusal']} refused, {counts['n_unscored']} unscored")
    kinds = counts["kinds"]

    def judged(kind: str, role: str, nothing: bool, what: str) -> str:
        if nothing:
            return what
        if kind not in kinds:
            return f"the {role} has no verdict set (not configured, or the verdicts stage has not run)"
        return f"the {role}'s verdict set has no verdict on these turns"

    return {
        "slots": judged("clarifymt_slots", "slot judge", counts["n_ambiguous_answer"] == 0,
                        f"no answer turn of an ambiguous item to read slots from ({acts})"),
        "quality": judged("clarifymt_question", "question judge", counts["n_ask"] == 0,
                          f"no act turn asked a clarifying question ({acts})"),
        "fidelity": judged("clarifymt_persona_check", "move checker", counts["n_replies"] == 0,
                           "the persona user replied to no question, so there was no reply to check"),
    }


def render(views: dict, min_n: int, counts: dict | None = None) -> str:
    why = why_empty(counts) if counts else {}
    lines = ["Each act of the target is read by the act judge (ask = clarifying question; "
             "answer = direct answer or hedge; a refusal is neither) and compared with the "
             "item's gold act at that depth. Live: every turn of the persona dialogue; static "
             "prefix: the one act after a stored dialogue. Unscored verdicts are left out and "
             "counted (rules M1-M10 in views.sql beside the spec).", ""]
    lines += _summary(views["summary"], min_n)
    lines += _heat(views["acc"], min_n)
    lines += ["", "Act accuracy by dimension and depth:", ""] + _by_dimension(views["acc"], min_n)
    lines += ["", "Under- and over-clarification by persona:", ""] + _clar(views["clar"], min_n)
    lines += ["", "Answer accuracy by depth and persona (reference judge, on answer turns):", ""]
    lines += _answers(views["answers"], min_n)
    lines += ["", "Slots elicited before answering (slot judge, ambiguous items):", ""]
    lines += _simple(views["slots"], [
        ("mode", lambda r: r["mode"]), ("target", lambda r: r["target"]),
        ("persona", lambda r: r["persona"]),
        ("slot recall", lambda r: cell(r["slot_recall"], r["n_scored"], min_n)),
        ("all slots", lambda r: cell(r["all_slots_rate"], r["n_scored"], min_n)),
        ("unscored", lambda r: str(r["n_unscored"]))],
        why.get("slots", "no answer turn of an ambiguous item"))
    lines += ["", "Turns to answer (live):", ""]
    lines += _simple(views["tta"], [
        ("target", lambda r: r["target"]), ("persona", lambda r: r["persona"]),
        ("episodes", lambda r: str(r["n_episodes"])),
        ("mean turns to answer", lambda r: cell(r["turns_to_answer"], r["n_answered"], min_n,
                                                pct=False)),
        ("never answered (turn cap or refused)", lambda r: str(r["n_no_answer"])),
        ("acts unscored", lambda r: str(r["n_act_unscored"]))], "no live episode yet")
    lines += ["", "Question quality (1-5, question judge, on turns that ask):", ""]
    lines += _simple(views["quality"], [
        ("mode", lambda r: r["mode"]), ("target", lambda r: r["target"]),
        ("persona", lambda r: r["persona"]),
        ("quality", lambda r: cell(r["quality"], r["n_rated"], min_n, pct=False)),
        ("not a question (judge)", lambda r: str(r["n_not_question"])),
        ("unscored", lambda r: str(r["n_unscored"]))],
        why.get("quality", "no act turn asked a clarifying question"))
    lines += ["", "Persona fidelity of the simulated user (move checker):", ""]
    lines += _simple(views["fidelity"], [
        ("target", lambda r: r["target"]), ("persona", lambda r: r["persona"]),
        ("realises the persona", lambda r: cell(r["realises_rate"], r["n_checked"], min_n)),
        ("leaks unasked", lambda r: cell(r["leak_rate"], r["n_checked"], min_n)),
        ("passes", lambda r: cell(r["pass_rate"], r["n_checked"], min_n))],
        why.get("fidelity", "no simulated reply was checked"))
    return "\n".join(lines)


@section("clarifymt", title=TITLE, args=SectionArgs)
class ClarifyMTSection:
    def __init__(self, args: SectionArgs | None = None):
        self.min_n = (args or SectionArgs()).min_n

    def __call__(self, wh, spec) -> str:
        views = section_views(wh, spec, "clarifymt", {
            "summary": "summary ORDER BY mode, target",
            "acc": "act_accuracy ORDER BY mode, target, depth, dimension, persona",
            "clar": "clarification ORDER BY mode, target, persona",
            "answers": "answers ORDER BY mode, target, depth NULLS LAST, persona",
            "slots": "slots ORDER BY mode, target, persona",
            "tta": "turns_to_answer ORDER BY target, persona",
            "quality": "question_quality ORDER BY mode, target, persona",
            "fidelity": "persona_fidelity ORDER BY target, persona"},
            needs=("summary",), nothing="no completed ClarifyMT episode has act verdicts yet")
        return views if isinstance(views, str) else render(views, self.min_n, _counts(wh, spec))


def _counts(wh, spec) -> dict:
    """What why_empty reads: act turns by prediction (M3), ambiguous answer turns, the live
    persona user's replies, and the judge kinds that have a verdict set."""
    p = view_prefix(spec, "clarifymt")
    [c] = wh.query(
        f"SELECT count(*) AS n_act_turns, count(*) FILTER (WHERE pred = 'ask') AS n_ask, "
        f"count(*) FILTER (WHERE pred = 'answer') AS n_answer, "
        f"count(*) FILTER (WHERE pred = 'refusal') AS n_refusal, "
        f"count(*) FILTER (WHERE pred IS NULL) AS n_unscored, "
        f"count(*) FILTER (WHERE pred = 'answer' AND ambiguous) AS n_ambiguous_answer "
        f"FROM {p}_turns")
    # A reply is a user turn after the opening one (position 0) in a completed live episode.
    [r] = wh.query(f"SELECT count(*) AS n FROM episode_turns WHERE role = 'user' AND position > 0 "
                   f"AND episode_id IN (SELECT episode_id FROM {p}_turns WHERE mode = 'live')")
    kinds = {x["kind"] for x in wh.query("SELECT kind FROM selected_verdict_sets WHERE benchmark = ?",
                                         [spec.name])}
    return {**c, "n_replies": r["n"], "kinds": kinds}
