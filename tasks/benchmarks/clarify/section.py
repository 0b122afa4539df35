"""The clarify report section: per target, how often it asks on ambiguous and on unambiguous
questions (``clarify_summary`` / ``clarify_rates``), whether its questions target the actual
ambiguity, and the final answer's accuracy by path (``clarify_accuracy``): answered
directly, after asking, after an on-target clarification, and on the disambiguated question.
tasks/benchmarks/clarify/views.sql states every rule (C1-C8). Each number is shown with the count
it rests on; "n/a" where nothing fed it; "Not computed: ..." when nothing is scored."""

from __future__ import annotations

from tasks.core.registry import section as register_section
from tasks.report.sections import md_table, number, section_views

TITLE = "Clarify or answer: asking when a question is ambiguous"

PATHS = (
    # The path holds every first act that is not a question (C6): refusals and hedges too,
    # so it is not called "answered" (C3's word for direct answers and hedges only).
    ("answered_directly", "did not ask first (answered, hedged or refused)"),
    ("after_asking", "after asking"),
    ("after_on_target", "after an on-target question"),
    ("disambiguated", "disambiguated question"),
)


def _pct(value, n=None) -> str:  # this section's shares are percentages
    return number(value, n, pct=True)


def _rate(rates: dict, target: str, ambiguous: bool, col: str, n: str = "n_judged") -> str:
    r = rates.get((target, "ask", ambiguous))
    return "n/a" if r is None else _pct(r[col], r[n])


@register_section('clarify', title=TITLE)
def section(wh, spec) -> str:
    """The section of ``spec``'s views (its name prefix; ``clarify_*`` for the built-in spec)."""
    views = section_views(wh, spec, "clarify", {
        "summary": "summary ORDER BY target",
        "rates": "rates ORDER BY target, condition, ambiguous",
        "acc": "accuracy ORDER BY target, ambiguous DESC, path"},
        needs=("summary",), nothing="no completed clarify episode has verdicts yet")
    if isinstance(views, str):
        return views
    summary, rates, acc = views["summary"], views["rates"], views["acc"]
    by = {(r["target"], r["condition"], r["ambiguous"]): r for r in rates}
    lines = ["The first act is the act judge's reading of the target's first response. "
             "Under-clarification: an ambiguous question answered without asking; "
             "over-clarification: an unambiguous question met with a question. Unscored "
             "verdicts are left out and counted (rules C1-C8 in the views.sql beside the spec).",
             ""]
    targets = [r["target"] for r in summary]
    rows = [
        ["asks on ambiguous questions"] + [_rate(by, t, True, "clarify_rate") for t in targets],
        ["under-clarification (ambiguous, answered)"]
        + [_rate(by, t, True, "answer_without_asking_rate") for t in targets],
        ["refuses on ambiguous questions"] + [_rate(by, t, True, "refusal_rate") for t in targets],
        ["over-clarification (unambiguous, asked)"]
        + [_rate(by, t, False, "clarify_rate") for t in targets],
        ["questions on target"]
        + [_rate(by, t, True, "on_target_rate", "n_on_target_judged") for t in targets],
        ["first act unscored (left out)"] + [str(r["n_act_unscored"]) for r in summary],
    ]
    lines += md_table(["measure"] + targets, rows)

    if acc:
        have_equiv = any(r["n_equiv_scored"] for r in acc)
        order = {p: i for i, (p, _) in enumerate(PATHS)}
        names = dict(PATHS)
        acc.sort(key=lambda r: (r["target"], not r["ambiguous"], order.get(r["path"], 99)))
        lines += ["", "Final answer accuracy (exact match and token F1 are SQuAD-style; "
                  "'contains' = a reference occurs in the response):", ""]
        headers = ["target", "items", "path", "scored / completed episodes", "exact match", "token F1",
                   "contains"] + (["equivalent"] if have_equiv else [])
        body = []
        for r in acc:
            row = [r["target"], "ambiguous" if r["ambiguous"] else "unambiguous",
                   names.get(r["path"], r["path"]),
                   f"{r['n_scored']} / {r['n_episodes']}"
                   + (f" ({r['n_unscored']} unscored)" if r["n_unscored"] else ""),
                   _pct(r["exact_match"]), _pct(r["token_f1"]), _pct(r["contains"])]
            if have_equiv:
                row.append(_pct(r["equivalent"], r["n_equiv_scored"]))
            body.append(row)
        lines += md_table(headers, body)
        gaps = [[r["target"]] + [number(r[c], signed=True) for c in
                                 ("gap_contains", "gap_token_f1", "gap_equivalent")]
                for r in summary]
        lines += ["", "The gap (ambiguous items): accuracy after an on-target clarification "
                  "minus accuracy on the disambiguated question (negative: clarifying did "
                  "not recover what stating the intent up front gives).", ""]
        lines += md_table(["target", "contains", "token F1", "equivalent"], gaps)
    else:
        lines += ["", "Not computed: no final answer has a reference verdict yet."]
    return "\n".join(lines)
